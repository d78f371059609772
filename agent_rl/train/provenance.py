"""Which code trained a run: each start-up (a resume is one too) appends a line to
WORKDIR/code.jsonl with the git commit of the checkout the `agent_rl` package was imported
from, whether its tracked files had changes, and the versions of the packages that move the
numbers. A row of the reproduction harness reads them back (eval/reproduce/results.py), so a
table says which commits its runs came from: runs are bit for bit on CPU only for one code.

    {"commit": "cb51b6d...", "dirty": false, "started": "2026-12-07T08:20:00Z",
     "versions": {"python": "3.11.9", "jax": "0.4.35", "flax": ..., "optax": ..., ...}}

`commit` and `dirty` are null outside a git checkout (a wheel, a `git archive` copy) and when
git is missing; a checkout is only read if the package sits at its top level, so a copy inside
some other repository does not report that repository's commit.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
from typing import Optional

from etils import epath

CODE_FILE = "code.jsonl"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
CODE_DIRS = ("agent_rl/", "configs/")  # where an untracked .py file is code a run may import


def _git(root: str, *args: str) -> Optional[str]:
  """git's output in `root` (None when git fails or is missing). --no-optional-locks: a status
  here must not take the index lock from a user's (or another run's) git command."""
  try:
    out = subprocess.run(["git", "--no-optional-locks", "-C", root, *args], capture_output=True,
                         text=True, timeout=30, check=False)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return out.stdout.strip() if out.returncode == 0 else None


def code_version(root: str = ROOT) -> dict:
  """{"commit": HEAD's hash or None, "dirty": None without a commit, else whether a tracked
  file changed or an untracked .py file sits in agent_rl/ or configs/ (new code the run may
  import; other untracked files, such as run dirs, are not code)} of the git checkout whose
  top level is `root`."""
  top = _git(root, "rev-parse", "--show-toplevel")
  if top is None or os.path.realpath(top) != os.path.realpath(root):
    return {"commit": None, "dirty": None}
  commit = _git(root, "rev-parse", "HEAD")
  status = _git(root, "status", "--porcelain", "--untracked-files=all")
  if status is None or commit is None:
    return {"commit": commit, "dirty": None}
  changed = [ln for ln in status.splitlines()
             if (ln and not ln.startswith("??"))
             or (ln.startswith("?? ") and ln.endswith(".py") and ln[3:].startswith(CODE_DIRS))]
  return {"commit": commit, "dirty": bool(changed)}


def versions() -> dict:
  out = {"python": platform.python_version()}
  for p in PACKAGES:
    try:
      out[p] = importlib.metadata.version(p)
    except importlib.metadata.PackageNotFoundError:
      out[p] = None
  return out


def record_start(workdir: str, root: str = ROOT) -> dict:
  """Appends this start-up's line to WORKDIR/code.jsonl (call on one process) and returns it."""
  line = {**code_version(root), "versions": versions(),
          "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
  path = epath.Path(workdir) / CODE_FILE  # read and rewritten: a bucket object cannot append
  prev = path.read_text() if path.exists() else ""
  path.write_text(prev + json.dumps(line, sort_keys=True) + "\n")
  return line


def _starts(workdir: str) -> list[dict]:
  """The run's start-up lines, oldest first ([] without code.jsonl)."""
  path = epath.Path(workdir) / CODE_FILE
  if not path.exists():
    return []
  return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def code_line(workdir: str) -> Optional[str]:
  """report.md's line on the code: the commits (read_commits), how many start-ups, and the
  last start-up's package versions; None for a run without code.jsonl."""
  starts = _starts(workdir)
  if not starts:
    return None
  v = starts[-1].get("versions", {})
  pkgs = ", ".join(f"{k} {v[k]}" for k in ("python", *PACKAGES) if v.get(k))
  n = len(starts)
  return (f"code: {', '.join(read_commits(workdir))} ({n} start-up{'s' if n > 1 else ''}; "
          f"last with {pkgs})")


def read_commits(workdir: str) -> tuple[str, ...]:
  """The distinct commits a run's start-ups report, in order: the short hash with "+dirty"
  where tracked files had changes, "unknown" outside a checkout; () when the run kept none
  (a run from before 2026-12-07). `workdir` may be a bucket path (gs://)."""
  out = []
  for r in _starts(workdir):
    c = "unknown"
    if r.get("commit"):
      c = r["commit"][:10] + ("+dirty" if r.get("dirty") else "")
    if c not in out:
      out.append(c)
  return tuple(out)
