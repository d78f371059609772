"""Arms x seeds of a paper row as runs: one workdir and one train command each, resumable.

    RESULTS_DIR/<paper>/<arm>/seed<k>/     # the run's workdir (checkpoints/, metrics.jsonl, ...)

Each run is `python -m agent_rl.train --config=configs/<paper>.py:<scale>,<variant>
--workdir=... [--config.key=value ...] --config.seed=<k>`, the same line `--dry-run` prints, so
a cluster launcher (launch/slurm_gpu.sbatch, launch/tpu_pod.sh) can run each one as a job.
Resuming is the run's own: a workdir with a checkpoint continues from it (train/run.py). The
harness only decides from the workdir what is left:
  done    the checkpoint of the last global step (sft.steps + train.iterations) exists
          (orbax renames a step's folder into place only once the save completed);
  resume  some earlier checkpoint exists;  new  none.
A workdir whose saved config.json differs from the config this command would build (another
scale, --iterations or override) is refused, naming the fields: mixing the two would average
different experiments.

Twins: rows that share a baseline (the graph-credit rows' GiGPO and GRPO arms are the same
config; their GRPO arm is prm_sokoban's outcome arm) would train it once per row. A new run
whose exact config (every field, the seed included) has already finished under another row of
the same results dir is not run again:
its workdir becomes a relative symlink to that twin (`twin` below). A run is a pure function
of its config and seed (bit for bit on CPU), so the twin's metrics are this arm's.
"""
from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

from etils import epath

from agent_rl.eval.reproduce.comparison import PaperConfig
from agent_rl.eval.reproduce.lock import LOCK_FILE, claim, held_fds, release  # noqa: F401
from agent_rl.eval.reproduce.paths import (PATH_FIELDS, provided_by,  # noqa: F401
                                           referenced_paths)
from agent_rl.eval.reproduce.same_config import (StaleRunError, _flat,  # noqa: F401
                                                 _saved_config, check_same_config,
                                                 config_differences, differences)

RESULTS_DIR = os.path.join("benchmarks", "results", "reproduce")
TIME_FILE = "reproduce_time.json"  # seconds the harness spent running this workdir, summed
TRAIN = ("python", "-m", "agent_rl.train")


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One arm x seed: `arg` is the config's `:arg` (scale + variant), `overrides` the
  ("key", "value") settings in command order (the seed last)."""
  paper: str
  arm: str
  seed: int
  arg: str
  config_file: str
  workdir: str
  overrides: tuple[tuple[str, str], ...]

  def args(self) -> list[str]:
    """The train command's arguments (what the launchers take after the script name)."""
    return ([f"--config={self.config_file}:{self.arg}", f"--workdir={self.workdir}"]
            + [f"--config.{k}={v}" for k, v in self.overrides])

  def command(self, prefix: Sequence[str] = TRAIN) -> str:
    return shlex.join([*prefix, *self.args()])

  @property
  def name(self) -> str:
    """The run's name in the harness's log: paper/arm/seedK."""
    return f"{self.paper}/{self.arm}/seed{self.seed}"


def arm_arg(scale: str, variant: str) -> str:
  return ",".join(w for w in (scale, variant) if w)


def parse_override(text: str) -> tuple[str, str]:
  """"train.iterations=3" (a leading "config." is dropped) -> ("train.iterations", "3")."""
  key, eq, value = text.partition("=")
  key = key.strip().removeprefix("--").removeprefix("config.")
  if not eq or not key:
    raise ValueError(f"--set: expected key=value (e.g. train.iterations=3), got {text!r}")
  return key, value


def _typed(old, text: str, key: str):
  """`text` as the type of the field it replaces (what `--config.key=text` does)."""
  if isinstance(old, bool):
    low = text.lower()
    if low not in ("true", "false", "1", "0"):
      raise ValueError(f"--config.{key}: takes true|false, got {text!r}")
    return low in ("true", "1")
  if isinstance(old, (int, float)):
    try:
      return type(old)(text)
    except ValueError:
      raise ValueError(f"--config.{key}: takes a {type(old).__name__}, got {text!r}") from None
  if isinstance(old, str):
    return text
  try:  # tuples, lists and new kwargs: Python literals, else the string itself
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def apply_override(c, key: str, text: str) -> None:
  *parents, leaf = key.split(".")
  node = c
  for p in parents:
    if p not in node:
      raise ValueError(f"--config.{key}: no field {p!r} in config.{'.'.join(parents)}")
    node = node[p]
  node[leaf] = _typed(node[leaf] if leaf in node else None, text, key)


def build_config(pc: PaperConfig, arg: str, overrides: Sequence[tuple[str, str]]):
  """configs/<paper>.py:get_config(arg) with the overrides applied, in order."""
  c = pc.module.get_config(arg)
  for k, v in overrides:
    apply_override(c, k, v)
  return c


def final_step(c) -> int:
  return int(c.sft.steps) + int(c.train.iterations)


def problem(c, provided: Sequence[str] = ()) -> Optional[str]:
  """Why a built config cannot run here (None when it can): validation (an unregistered env,
  a bad field), or a file/run dir it names that does not exist and is not in one of the
  `provided` workdirs (the row's prior runs, which the harness builds first)."""
  from agent_rl.train.config import validate
  later = [p for _, p in referenced_paths(c) if provided_by(p, provided)]
  try:
    validate(c)
  except ValueError as e:  # one naming a prior's run (missing, or killed half-way: the harness
    if not any(p in str(e) for p in later):  # builds or resumes it) is checked when the arm starts
      return str(e)
  for field, path in referenced_paths(c):
    if not os.path.exists(path) and path not in later:
      return f"needs config.{field}={path} (missing: run its recipe first)"
  return None


def arm_problem(pc: PaperConfig, scale: str, arm: str, overrides=()) -> Optional[str]:
  comp = pc.comparison
  try:
    c = build_config(pc, arm_arg(scale, comp.arms[arm]), [*comp.overrides.items(), *overrides])
  except Exception as e:  # an unknown variant or override: the row lists it, --list goes on
    return f"{type(e).__name__}: {e}"
  return problem(c, [p.workdir for p in comp.priors])


def plan(pc: PaperConfig, scale: str, seeds: int, results_dir: str = RESULTS_DIR,
         overrides: Sequence[tuple[str, str]] = (), arms: Sequence[str] = ()) -> list[RunSpec]:
  """The runs of a row: every arm (or those named) x seeds 0..seeds-1, in arm order."""
  comp = pc.comparison
  if comp is None:
    raise ValueError(f"--paper={pc.name}: {pc.reason}")
  unknown = [a for a in arms if a not in comp.arms]
  if unknown:
    raise ValueError(f"--arms: {unknown} not arms of {pc.name}; arms: {', '.join(comp.arms)}")
  if seeds < 1:
    raise ValueError(f"--seeds: at least 1, got {seeds}")
  rel = os.path.relpath(pc.path)  # commands read best relative to the repository root
  rel = pc.path if rel.startswith("..") else rel
  return [RunSpec(pc.name, arm, k, arm_arg(scale, comp.arms[arm]), rel,
                  os.path.join(results_dir, pc.name, arm, f"seed{k}"),
                  (*comp.overrides.items(), *overrides, ("seed", str(k))))
          for arm in (arms or comp.arms) for k in range(seeds)]


def status(c, workdir: str, last: Optional[int] = None) -> tuple[str, int]:
  """("done" | "resume" | "new", newest checkpointed global step or -1); see the module doc.
  last: the run's last step (default `final_step(c)`, a train run's)."""
  check_same_config(c, workdir)
  wd = epath.Path(workdir)  # a gs:// results dir reads like a local one (the runs write there)
  ck = wd / "checkpoints"
  steps = [int(p.name) for p in (ck.iterdir() if ck.exists() else ()) if p.name.isdigit()]
  newest = max(steps, default=-1)
  if newest >= (final_step(c) if last is None else last) and (wd / "metrics.jsonl").exists():
    return "done", newest
  return ("resume" if steps else "new"), newest


def twin(c, workdir: str) -> Optional[str]:
  """A finished run of exactly config `c` elsewhere in the same results dir
  (`<results>/<paper>/<arm>/seed<k>`): no `config_differences` between its config.json and
  `c`, or None."""
  if "://" in workdir:  # a bucket has no symlinks: such rows train every arm
    return None
  wd = epath.Path(workdir)
  results, seed_dir = wd.parent.parent.parent, wd.name
  want = _flat(json.loads(c.to_json_best_effort()))
  if not results.exists():
    return None
  for cand in sorted(results.glob(f"*/*/{seed_dir}")):
    if os.path.islink(str(cand)) or os.path.realpath(str(cand)) == os.path.realpath(workdir):
      continue
    saved = _saved_config(cand)
    if (saved is not None and all(k in want for k in saved)
        and not config_differences(saved, want) and status(c, str(cand))[0] == "done"):
      return str(cand)
  return None


def link_twin(workdir: str, target: str) -> None:
  """WORKDIR -> TARGET as a relative symlink (the results dir can move as a whole)."""
  os.makedirs(os.path.dirname(workdir), exist_ok=True)
  os.symlink(os.path.relpath(target, os.path.dirname(workdir)), workdir)


@dataclasses.dataclass(frozen=True)
class Outcome:
  spec: RunSpec
  state: str  # skipped (already done) | ran | failed
  seconds: float
  message: str = ""


Runner = Callable[[RunSpec], int]
# (built config, spec) -> the committed record's run of an empty workdir, or None (record.lookup)
Recorded = Callable[[object, RunSpec], Optional[dict]]


def no_record(c, spec: RunSpec) -> Optional[dict]:
  return None


def _add_seconds(workdir: str, seconds: float) -> None:
  """Sums the time spent in a workdir over resumes (the table's CPU-time total)."""
  if not os.path.isdir(workdir):
    return
  path = os.path.join(workdir, TIME_FILE)
  prev = 0.0
  if os.path.exists(path):
    with open(path) as f:
      prev = json.load(f)["seconds"]
  with open(path, "w") as f:
    json.dump({"seconds": prev + seconds}, f)


def run_logged(module: str, args: Sequence[str], workdir: str) -> int:
  """`python -m module args` in a child process (this interpreter), its output appended to
  WORKDIR/reproduce.log after the command line; the child inherits the workdir's lock.
  Returns the exit status."""
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "reproduce.log"), "a") as log:
    log.write(f"\n$ {shlex.join(['python', '-m', module, *args])}\n")
    log.flush()
    return subprocess.run([sys.executable, "-m", module, *args], stdout=log,
                          stderr=subprocess.STDOUT, check=False,
                          pass_fds=held_fds(workdir)).returncode


def subprocess_runner(spec: RunSpec) -> int:
  """The printed command in a child process (run_logged). Returns the exit status."""
  return run_logged(TRAIN[-1], spec.args(), spec.workdir)


def execute(pc: PaperConfig, specs: Sequence[RunSpec], runner: Runner = subprocess_runner,
            jobs: int = 1, echo: Callable[[str], None] = print,
            recorded: Recorded = no_record,
            before: Callable[[list], Sequence[Optional[str]]] = lambda todo: [None] * len(todo)
            ) -> list[Outcome]:
  """Runs every spec not yet done, `jobs` at a time; a failed run is reported, not raised
  (the other runs go on). Refuses up front (StaleRunError) a workdir of another config.
  `recorded(c, spec)`: the committed record's run of an empty workdir (record.lookup), which
  is done too. `before(todo)`: called with the built configs of the runs left, when there are
  any, before the first of them starts (the row's prior runs, priors.build_all); it returns
  per run why it cannot run (that run is reported failed and the others go on) or None."""
  if jobs < 1:
    raise ValueError(f"--jobs: at least 1, got {jobs}")
  todo, out = [], []
  for s in specs:
    c = build_config(pc, s.arg, s.overrides)
    state, step = status(c, s.workdir)
    if state == "new" and recorded(c, s) is not None:
      out.append(Outcome(s, "skipped", 0.0, "recorded"))
      echo(f"skip   {s.name}: finished (in the row's record; "
           "its workdir is not here)")
      continue
    same = twin(c, s.workdir) if state == "new" and not os.path.lexists(s.workdir) else None
    if same:
      link_twin(s.workdir, same)
      state, step = status(c, s.workdir)
      out.append(Outcome(s, "skipped", 0.0, f"same run as {same} (step {step})"))
      echo(f"reuse  {s.name}: the same config and seed finished as {same}")
    elif state == "done":
      out.append(Outcome(s, "skipped", 0.0, f"done (step {step})"))
      echo(f"skip   {s.name}: finished (step {step})")
    else:
      todo.append(s)
      echo(f"to run {s.name}"
           + (f" (resumes from step {step})" if state == "resume" else ""))

  if todo:
    why = before([build_config(pc, s.arg, s.overrides) for s in todo])
    for s, w in zip(todo, why):
      if w:
        out.append(Outcome(s, "failed", 0.0, w))
        echo(f"FAILED {s.name}: {w}")
    todo = [s for s, w in zip(todo, why) if not w]

  def one(s: RunSpec) -> Outcome:
    held = claim(s.workdir)
    if held:  # another harness process is running it
      echo(f"busy   {s.name}: {held}")
      return Outcome(s, "skipped", 0.0, held)
    t0 = time.perf_counter()
    try:
      state, step = status(build_config(pc, s.arg, s.overrides), s.workdir)
      if state == "done":  # finished by another process since this one planned
        echo(f"skip   {s.name}: finished (step {step})")
        return Outcome(s, "skipped", 0.0, f"done (step {step})")
      echo(f"{'resume' if state == 'resume' else 'start '} {s.name}"
           + (f" from step {step}" if state == "resume" else ""))
      rc = runner(s)
      msg = "" if rc == 0 else f"exit status {rc}; see {os.path.join(s.workdir, 'reproduce.log')}"
    except Exception as e:  # a runner error is that run's failure
      rc, msg = 1, f"{type(e).__name__}: {e}"
    finally:
      release(s.workdir)
    o = Outcome(s, "ran" if rc == 0 else "failed", time.perf_counter() - t0, msg)
    _add_seconds(s.workdir, o.seconds)
    echo(f"{'done  ' if rc == 0 else 'FAILED'} {s.name} in "
         f"{o.seconds:.0f} s{': ' + msg if msg else ''}")
    return o

  if jobs == 1:
    out += [one(s) for s in todo]
  else:
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
      out += list(pool.map(one, todo))
  return out
