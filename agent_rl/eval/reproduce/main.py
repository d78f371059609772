"""What launch/reproduce.py does, as functions the tests call: list the rows, print a row's
commands, run a row (arms x seeds, resumable) and write its files, and build the table.

    python launch/reproduce.py --list
    python launch/reproduce.py --paper=gigpo_texthouse --scale=tiny --seeds=3 [--jobs=2]
    python launch/reproduce.py --paper=gigpo_texthouse --dry-run    # one train command per run
    python launch/reproduce.py --table
"""
from __future__ import annotations

import os
import shlex
from typing import Callable, Optional, Sequence

from agent_rl.eval.reproduce import cross_play, priors, record, results, runs
from agent_rl.eval.reproduce.comparison import (CONFIGS_DIR, PaperConfig, load_comparisons,
                                                load_config)


def list_rows(scale: str = "tiny", overrides: Sequence[tuple[str, str]] = (),
              configs_dir: str = CONFIGS_DIR, results_dir: str = runs.RESULTS_DIR) -> str:
  """Every configs/*.py: its row (method vs baselines, metrics), the seeds of each arm that the
  row's committed record holds at `scale` (those need no workdir, no policy run here), and
  whether the arm can run here, with the reason when not; configs without a row say so."""
  lines = []
  for pc in load_comparisons(configs_dir):
    comp = pc.comparison
    if comp is None:
      lines.append(f"{pc.name}: {pc.reason}")
      continue
    lines.append(f"{pc.name}: {comp.method} vs {', '.join(comp.baselines)} on "
                 f"{comp.setting or '—'}; metrics {', '.join(comp.metrics)}")
    rec = record.read(results_dir, pc.name)
    for arm, variant in comp.arms.items():
      why = runs.arm_problem(pc, scale, arm, overrides)
      arg = runs.arm_arg(scale, variant)
      done = record.recorded_seeds(rec, arm, scale, overrides)
      first = []
      if why is None:
        try:
          first = [p.workdir for p in _pending_priors(pc, [arg], overrides)]
        except ValueError as e:  # a prior's run dir holds another recipe
          why = str(e)
      state = "runnable" if why is None else f"NOT RUNNABLE: {why}"
      if first:
        state += f" (builds {', '.join(first)} first)"
      if done:
        state = f"recorded (seeds {','.join(map(str, done))}); {state}"
      lines.append(f"  {arm:<12} :{arg:<28} {state}")
  return "\n".join(lines)


def runnable_papers(scale: str, overrides=(), configs_dir: str = CONFIGS_DIR) -> tuple[list, list]:
  """(rows whose every arm can run, [(name, reason)] of the others) for --all."""
  ok, skipped = [], []
  for pc in load_comparisons(configs_dir):
    if pc.comparison is None:
      skipped.append((pc.name, pc.reason))
      continue
    bad = {a: runs.arm_problem(pc, scale, a, overrides) for a in pc.comparison.arms}
    bad = {a: w for a, w in bad.items() if w}
    if bad:
      skipped.append((pc.name, "; ".join(f"{a}: {w}" for a, w in bad.items())))
    else:
      ok.append(pc)
  return ok, skipped


def dry_run(pc: PaperConfig, scale: str, seeds: int, results_dir: str, overrides=(),
            arms: Sequence[str] = (), launcher: str = "") -> list[str]:
  """The row's train commands, one per run; `launcher` replaces `python -m agent_rl.train`
  (e.g. "sbatch launch/slurm_gpu.sbatch", "bash launch/tpu_pod.sh --name=pod --detach").
  First the recipes of the prior runs the arms start from that are not finished here, plain
  `python -m ...` lines in dependency order (a launcher's jobs would start before them); then
  a comment line saying the arms wait for them."""
  prefix = shlex.split(launcher) if launcher else runs.TRAIN
  specs = runs.plan(pc, scale, seeds, results_dir, overrides, arms)
  cdir = os.path.dirname(pc.path)
  todo = _pending_priors(pc, [s.arg for s in specs], overrides)
  first = [p.command(priors.config_file(p, cdir)) for p in todo]
  if first:
    first.append("# the runs below start from the runs above: let those finish first")
  return first + [s.command(prefix) for s in specs]


def dry_run_rows(pcs: Sequence[PaperConfig], scale: str, seeds: int, results_dir: str,
                 overrides=(), arms: Sequence[str] = (), launcher: str = "") -> list[str]:
  """`dry_run` of each row in turn (--all); a prior several rows share is printed once, before
  the first row that needs it."""
  out, printed = [], set()
  for pc in pcs:
    lines = dry_run(pc, scale, seeds, results_dir, overrides, arms, launcher)
    k = next((i for i, ln in enumerate(lines) if ln.startswith("#")), -1)  # priors above it
    new = [ln for ln in lines[:max(k, 0)] if ln not in printed]
    out += new + lines[k:k + 1] * bool(new) + lines[k + 1:]
    printed.update(new)
  return out


def _pending_priors(pc: PaperConfig, args: Sequence[str], overrides=()) -> list:
  """The row's prior runs that the arms of config args `args` need and that are not finished."""
  comp = pc.comparison
  configs = [runs.build_config(pc, a, [*comp.overrides.items(), *overrides])
             for a in dict.fromkeys(args)]
  return priors.pending(comp, configs, os.path.dirname(pc.path))


def reproduce(pc: PaperConfig, scale: str, seeds: int, results_dir: str, overrides=(),
              arms: Sequence[str] = (), jobs: int = 1, runner: Optional[runs.Runner] = None,
              run: bool = True, echo: Callable[[str], None] = print,
              eval_runner: Optional[cross_play.EvalRunner] = None,
              prior_runner: Optional[priors.PriorRunner] = None
              ) -> tuple[results.RowResult, list]:
  """Runs what is left of the row (unless `run` is False: report what is there), first the
  prior runs those runs start from where they are not finished here (priors.py), and its
  cross-play when the row asks for it, then writes RESULTS_DIR/<paper>.{json,md,png}. Returns
  (the row, the run outcomes)."""
  specs = runs.plan(pc, scale, seeds, results_dir, overrides, arms)
  rec = record.read(results_dir, pc.name)

  def recorded(c, s: runs.RunSpec):
    return record.lookup(rec, c, s, scale, overrides)

  # The row reads every arm and every recorded seed (a smaller --seeds keeps the recorded
  # ones); a run of another config among them is refused now, before anything trains.
  full = runs.plan(pc, scale, max(seeds, record.seeds(rec)), results_dir, overrides)
  for s in full:
    c = runs.build_config(pc, s.arg, s.overrides)
    if runs.status(c, s.workdir)[0] == "new":
      recorded(c, s)
  if run:
    for arm in dict.fromkeys(s.arm for s in specs):
      why = runs.arm_problem(pc, scale, arm, overrides)
      if why:
        raise ValueError(f"{pc.name}/{arm} cannot run: {why}")
  def build_priors(configs):
    return priors.build_all(pc.comparison, configs, os.path.dirname(pc.path),
                            prior_runner or priors.subprocess_prior, echo)

  outcomes = (runs.execute(pc, specs, runner or runs.subprocess_runner, jobs, echo, recorded,
                           build_priors) if run else [])
  if run and pc.comparison.cross_play:
    cross_play.execute(pc, specs, eval_runner or cross_play.subprocess_eval, jobs, echo)
  # The row holds every arm, not only those --arms ran (the others from their workdirs or the
  # record): a row written from a subset would drop the arms measured before.
  row = results.collect(pc, full, scale, max(seeds, record.seeds(rec)), overrides, recorded,
                        record.read_priors(results_dir, pc.name))
  paths = results.write_row(row, results_dir)
  echo("wrote " + ", ".join(paths))
  return row, outcomes


def overrides_from_flags(iterations: Optional[int], sets: Sequence[str]) -> list[tuple[str, str]]:
  out = [runs.parse_override(s) for s in sets]
  if iterations is not None:
    out.append(("train.iterations", str(iterations)))
  return out


def load(name: str, configs_dir: str = CONFIGS_DIR) -> PaperConfig:
  pc = load_config(name, configs_dir)
  if pc.comparison is None:
    raise ValueError(f"--paper={name}: {pc.reason}")
  return pc


def default_results_dir() -> str:
  return os.environ.get("RESULTS_DIR", runs.RESULTS_DIR)
