"""The local files and run directories a run's config names: what must exist before it starts
(runs.problem) and which of a row's prior runs it starts from (priors.needed)."""
from __future__ import annotations

import os
from typing import Optional, Sequence

# Config fields that name a file or run directory that must exist before the run starts.
PATH_FIELDS = ("model.init_from", "reward.model", "distill.teacher", "tokenizer.path",
               "rm.policy_run")


def referenced_paths(c) -> list[tuple[str, str]]:
  """(field, path) of every local file and run dir config `c` names (PATH_FIELDS, and the
  runs of `agents.init`)."""
  out = []
  for field in PATH_FIELDS:
    section, name = field.split(".")
    if section in c and name in c[section] and c[section][name]:
      out.append((field, str(c[section][name])))
  if "agents" in c and c.agents.get("init"):
    from agent_rl.agents.frozen import parse_init
    out += [("agents.init", p) for p in parse_init(c.agents.init) if p]
  return [(f, p) for f, p in out if "://" not in p]


def provided_by(path: str, workdirs: Sequence[str]) -> Optional[str]:
  """The workdir among `workdirs` (as given) that `path` is or is inside, comparing absolute
  paths (`runs/x` and `$PWD/runs/x` are one run), else None."""
  norm = os.path.abspath(path)
  for w in workdirs:
    a = os.path.abspath(w)
    if norm == a or norm.startswith(a.rstrip(os.sep) + os.sep):
      return w
  return None
