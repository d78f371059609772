"""Prior runs: the runs a row's arms start from (`PriorRun`s in its Comparison: the SFT policy
run of the world rows, Hera's two workers, prm_sokoban's reward model), built by the
harness before the first arm that needs one, so a row reproduces from a clean checkout with
one command.

    why = priors.build_all(comp, arm_configs, configs_dir)   # dependencies first; skipped when
    # finished, waited for while another harness builds one; why[i]: arm i cannot run, or None

Which priors an arm needs is read off its built config (`paths.referenced_paths`:
`model.init_from`, `tokenizer.path`, `distill.teacher`, `reward.model`, `agents.init`, ...),
and a prior's own dependencies off its config the same way (runs/hera_cloud reads
runs/hera_device's tokenizer; runs/prm_sft40 scores runs/sokoban_sft40's rollouts), so no
dependency is declared twice. A prior is done when the checkpoint of its last step and its
metrics are there (`runs.status`; the last step is `sft.steps + train.iterations`, or `rm.steps`
for a reward model); a workdir holding another recipe is refused naming the fields, as an
arm's is. A prior that fails stops the arms that start from it, not the others.
The recipes run on today's code: a policy run built here need not be bit for bit the one a
row's recorded runs started from (training code changes move the bits), so the row records
each prior's final evaluation (`observations`) and lists a rebuilt one that differs beside it.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Optional, Sequence

from agent_rl.eval.reproduce import runs
from agent_rl.eval.reproduce.comparison import (PRIOR_MODULES, Comparison, PriorRun,
                                                config_path, load_config)
from agent_rl.eval.reproduce.lock import claim, release
from agent_rl.eval.reproduce.paths import provided_by, referenced_paths
from agent_rl.metrics.sinks import read_jsonl

# module -> the last step of its run (comparison.PRIOR_MODULES says the same in words)
LAST_STEP: dict[str, Callable] = {"agent_rl.train": runs.final_step,
                                  "agent_rl.reward.train": lambda c: int(c.rm.steps)}
assert set(LAST_STEP) == set(PRIOR_MODULES)

# (prior, its config file) -> exit status of its recipe
PriorRunner = Callable[[PriorRun, str], int]


class PriorRunError(ValueError):
  """A prior run that cannot be built (its config, a missing input) or that failed."""


def config_file(p: PriorRun, configs_dir: str) -> str:
  """configs/<config>.py as the harness prints it (relative to the repository root)."""
  path = config_path(p.config, configs_dir)
  rel = os.path.relpath(path)
  return path if rel.startswith("..") else rel


def build_config(p: PriorRun, configs_dir: str):
  """The prior's config: configs/<config>.py:get_config(arg) with its overrides, in order."""
  pc = load_config(p.config, configs_dir)
  if pc.module is None:
    raise PriorRunError(f"prior run {p.workdir}: configs/{p.config}.py: {pc.reason}")
  try:
    c = pc.module.get_config(p.arg)
    for k, v in p.overrides.items():
      runs.apply_override(c, k, v)
  except Exception as e:  # a bad arg or override of the declaration
    raise PriorRunError(f"prior run {p.workdir}: {type(e).__name__}: {e}") from e
  return c


def state(p: PriorRun, configs_dir: str, c=None) -> tuple[str, int]:
  """runs.status of the prior's workdir against its recipe ("done" | "resume" | "new", step)."""
  c = build_config(p, configs_dir) if c is None else c
  return runs.status(c, p.workdir, LAST_STEP[p.module](c))


def needed(comp: Comparison, configs: Sequence, configs_dir: str) -> list[PriorRun]:
  """The row's priors that the built `configs` name a path in, and theirs in turn, each after
  the priors it needs (PriorRunError on a cycle)."""
  by_dir = {os.path.normpath(p.workdir): p for p in comp.priors}
  order: list[PriorRun] = []
  visiting: set[str] = set()

  def visit(w: str) -> None:
    p = by_dir[w]
    if p in order:
      return
    if w in visiting:
      raise PriorRunError(f"Comparison.priors: {w} needs itself through "
                          f"{', '.join(sorted(visiting))}")
    visiting.add(w)
    for d in _named(build_config(p, configs_dir), by_dir):
      visit(d)
    visiting.discard(w)
    order.append(p)

  for c in configs:
    for d in _named(c, by_dir):
      visit(d)
  return order


def _named(c, by_dir: dict) -> list[str]:
  """The prior workdirs config `c` names a path in, in the order it names them."""
  found = [provided_by(path, list(by_dir)) for _, path in referenced_paths(c)]
  return list(dict.fromkeys(w for w in found if w))


def pending(comp: Comparison, configs: Sequence, configs_dir: str) -> list[PriorRun]:
  """`needed` less those finished here."""
  return [p for p in needed(comp, configs, configs_dir) if state(p, configs_dir)[0] != "done"]


def summary(p: PriorRun, configs_dir: str) -> Optional[dict]:
  """{"step": its last step, "final": every `eval/` value logged there} of a finished prior
  here (what the arms start from, for the row's record), else None."""
  c = build_config(p, configs_dir)
  st, _ = state(p, configs_dir, c)
  if st != "done":
    return None
  last = LAST_STEP[p.module](c)
  final = {}
  for r in read_jsonl(os.path.join(p.workdir, "metrics.jsonl")):
    if r.get("step") == last:
      final.update({k: v for k, v in r.items() if k.startswith("eval/")})
  return {"step": last, "final": dict(sorted(final.items()))}


def observations(comp: Comparison, configs_dir: str, recorded: Sequence[dict] = ()) -> tuple:
  """Per declared prior: {workdir, command, seen: its summaries, note}, the record's
  (`recorded`, the row JSON's "priors") first, then this machine's where it differs (a prior
  built again on other code is a sibling, not the same run: both are kept). `note`: why this
  machine's run dir was not read (it holds another recipe), else ""."""
  old = {r["workdir"]: r for r in recorded}
  out = []
  for p in comp.priors:
    seen = list(old.get(p.workdir, {}).get("seen", ()))
    note = ""
    try:
      now = summary(p, configs_dir)
    except ValueError as e:  # another recipe's run dir: the row is still written
      now, note = None, str(e)
    key = lambda o: json.dumps(o, sort_keys=True)  # noqa: E731 (NaN != NaN, "NaN" == "NaN")
    if now is not None and key(now) not in {key(o) for o in seen}:
      seen.append(now)
    out.append({"workdir": p.workdir, "command": p.command(), "seen": seen, "note": note})
  return tuple(out)


def subprocess_prior(p: PriorRun, config: str) -> int:
  """The prior's recipe in a child process, logged to WORKDIR/reproduce.log."""
  return runs.run_logged(p.module, p.args(config), p.workdir)


def build(p: PriorRun, configs_dir: str, provided: Sequence[str] = (),
          runner: PriorRunner = subprocess_prior, echo: Callable[[str], None] = print,
          poll_s: float = 30.0) -> Optional[float]:
  """Builds prior `p` unless it is finished (returns None then; else the seconds it took).
  Checks its config first (runs.problem; `provided`: the workdirs of priors built before it);
  while another harness process holds its workdir, waits for it; PriorRunError when it fails
  (the arms that start from it cannot run)."""
  c = build_config(p, configs_dir)
  why = runs.problem(c, provided)
  if why:
    raise PriorRunError(f"prior run {p.workdir} cannot run: {why}")
  said = False
  while (held := claim(p.workdir)) is not None:
    if not said:
      echo(f"wait   prior {p.workdir}: {held}")
      said = True
    time.sleep(poll_s)
  t0 = time.perf_counter()
  try:
    st, step = state(p, configs_dir, c)
    if st == "done":
      echo(f"skip   prior {p.workdir}: finished (step {step})")
      return None
    cfile = config_file(p, configs_dir)
    echo(f"{'resume' if st == 'resume' else 'start '} prior {p.workdir}"
         + (f" from step {step}" if st == "resume" else "") + f": {p.command(cfile)}")
    rc = runner(p, cfile)
  finally:
    release(p.workdir)
  seconds = time.perf_counter() - t0
  if rc != 0:
    raise PriorRunError(f"prior run {p.workdir} failed (exit status {rc}); see "
                        f"{os.path.join(p.workdir, 'reproduce.log')}")
  echo(f"done   prior {p.workdir} in {seconds:.0f} s")
  return seconds


def build_all(comp: Comparison, configs: Sequence, configs_dir: str,
              runner: PriorRunner = subprocess_prior, echo: Callable[[str], None] = print,
              poll_s: float = 30.0) -> list[Optional[str]]:
  """Builds every prior the built arm `configs` need, dependencies first (`needed`, `build`),
  then checks each arm again now that its priors exist (`runs.problem`: validation stops at a
  missing prior, so the checks after it run only now). Returns, per config, why that arm
  cannot run (a prior of its failed or was not built because one of its own failed; its own
  config), or None. A failure stops only the arms that need it."""
  failed: dict[str, str] = {}
  built: list[str] = []
  for p in needed(comp, configs, configs_dir):
    try:
      deps = [d.workdir for d in needed(comp, [build_config(p, configs_dir)], configs_dir)]
      bad = [d for d in deps if d in failed]
      if bad:
        raise PriorRunError(f"prior run {p.workdir} not built: it starts from {bad[0]}, "
                            "which failed")
      build(p, configs_dir, built, runner, echo, poll_s)
      built.append(p.workdir)
    except ValueError as e:  # PriorRunError, a run dir of another recipe (runs.StaleRunError)
      failed[p.workdir] = str(e)
      echo(f"FAILED prior {p.workdir}: {e}")
  out = []
  for c in configs:
    mine = [p.workdir for p in needed(comp, [c], configs_dir)]
    why = next((failed[w] for w in mine if w in failed), None)
    out.append(why or runs.problem(c))
  return out
