"""Cross-play of a row's finished runs: each run's agent under test against the other agents'
frozen weights from every other run of the row and from its own earliest kept checkpoint.

Self-play numbers cannot tell a pair that learned to bargain from a pair that agreed on a
private convention (or colluded on a shared reward). The test is cross-play (Hu et al. 2020,
"Other-Play", arXiv:2003.02979): pair agents that never met. IB-RL (arXiv 2608.06735) claims
isolated per-agent advantages give agents that hold up against such counterparts. A row opts
in with `Comparison(cross_play=True)` (configs/ibrl_deal.py); once every run of the row is
finished the harness evaluates, per run R (agent `eval.counterpart_agent` keeps R's weights,
`agents.counterparts.splice`), one `train.evaluate` panel per counterpart:

  a<i>s<k>   the other agents of the run of arm i (comparison order), seed k (every run but R)
  early      the other agents of R itself at its earliest kept checkpoint (before RL moved them)

and writes RUN/cross_play.json (the panels, the counterparts and train.evaluate's output).
The row reads these metrics from it (`metrics`), beside the ones of metrics.jsonl:

  cross/within/{return,success}  vs the other seeds of the same arm
  cross/other/{return,success}   vs every run of the other arms
  cross/early/{return,success}   vs its own earlier self
  cross/all/{return,success}     vs every other run of the row

`return` is the agent under test's own return (`eval/<panel>/agent<k>/return`), `success` the
panel's, each averaged over the panels of that kind. Resumable: a run whose file lists the same
counterparts is not evaluated again; a row with an unfinished run gets no cross-play yet.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from typing import Callable, Optional, Sequence

from etils import epath

from agent_rl.eval.reproduce.comparison import PaperConfig
from agent_rl.eval.reproduce.runs import RunSpec, build_config, final_step, status

CROSS_FILE = "cross_play.json"
KINDS = ("within", "other", "early", "all")
EVALUATE = ("python", "-m", "agent_rl.train.evaluate")


def earliest_checkpoint(workdir: str, before: int) -> Optional[int]:
  """The smallest kept checkpoint step of WORKDIR below `before` (its final step), or None."""
  ck = epath.Path(workdir) / "checkpoints"
  steps = [int(p.name) for p in (ck.iterdir() if ck.exists() else ()) if p.name.isdigit()]
  steps = [s for s in steps if s < before]
  return min(steps) if steps else None


def panels(spec: RunSpec, specs: Sequence[RunSpec], arms: Sequence[str],
           early: Optional[int]) -> dict[str, str]:
  """Panel name -> counterpart ("DIR" or "DIR@STEP") of run `spec` among the row's `specs`."""
  out = {f"a{arms.index(s.arm)}s{s.seed}": s.workdir for s in specs if s.workdir != spec.workdir}
  if early is not None:
    out["early"] = f"{spec.workdir}@{early}"
  return out


def kind(name: str, own_arm: int) -> str:
  if name == "early":
    return "early"
  return "within" if int(name[1:].split("s")[0]) == own_arm else "other"


def summarize(evaluated: dict, names: Sequence[str], own_arm: int, agent: int) -> dict:
  """train.evaluate's output on the panels -> the cross/<kind>/{return,success} means."""
  groups = {k: [] for k in KINDS}
  for n in names:
    groups[kind(n, own_arm)].append(n)
    if n != "early":
      groups["all"].append(n)
  out = {}
  for k, ns in groups.items():
    for m, key in (("return", f"agent{agent}/return"), ("success", "success")):
      vals = [evaluated[f"eval/{n}/{key}"] for n in ns if f"eval/{n}/{key}" in evaluated]
      if vals and len(vals) == len(ns):
        out[f"cross/{k}/{m}"] = sum(vals) / len(vals)
  return out


def metrics(workdir: str) -> dict:
  """The cross/... metrics of a run (empty when it has no cross-play yet)."""
  path = epath.Path(workdir) / CROSS_FILE
  return json.loads(path.read_text())["metrics"] if path.exists() else {}


EvalRunner = Callable[[RunSpec, dict, str], int]  # (run, panels, output JSON path) -> status


def subprocess_eval(spec: RunSpec, cps: dict, out: str) -> int:
  """`python -m agent_rl.train.evaluate` on the run's latest checkpoint with the panels as
  `eval.counterparts`; output to `out`, its log appended to WORKDIR/reproduce.log."""
  args = [f"--config={spec.config_file}:{spec.arg}", f"--workdir={spec.workdir}",
          "--checkpoint=latest", f"--out={out}",
          *[f"--config.{k}={v}" for k, v in spec.overrides],
          *[f"--config.eval.counterparts.{n}={d}" for n, d in cps.items()]]
  with open(os.path.join(spec.workdir, "reproduce.log"), "a") as log:
    log.write(f"\n$ {' '.join([*EVALUATE, *args])}\n")
    log.flush()
    return subprocess.run([sys.executable, "-m", "agent_rl.train.evaluate", *args], stdout=log,
                          stderr=subprocess.STDOUT, check=False).returncode


def execute(pc: PaperConfig, specs: Sequence[RunSpec], runner: EvalRunner = subprocess_eval,
            jobs: int = 1, echo: Callable[[str], None] = print) -> list[str]:
  """Cross-play of every run of a finished row not yet evaluated against the same
  counterparts; returns the workdirs that failed (reported, not raised)."""
  arms = list(pc.comparison.arms)
  todo = []
  for s in specs:
    c = build_config(pc, s.arg, s.overrides)
    if status(c, s.workdir)[0] != "done":
      echo(f"cross-play of {pc.name} waits: {s.arm}/seed{s.seed} is not finished"
           if os.path.lexists(s.workdir) else
           f"cross-play of {pc.name} needs every run's checkpoints: {s.arm}/seed{s.seed} is "
           "in the row's record only (its workdir is not here); run the row where its "
           "workdirs are, or train that arm again in another --results_dir")
      return []
    cps = panels(s, specs, arms, earliest_checkpoint(s.workdir, final_step(c)))
    path = epath.Path(s.workdir) / CROSS_FILE
    if path.exists() and json.loads(path.read_text())["counterparts"] == cps:
      echo(f"skip   cross-play {s.name}: done")
      continue
    todo.append((s, cps, int(c.eval.counterpart_agent)))

  def one(item) -> Optional[str]:
    s, cps, agent = item
    raw = os.path.join(s.workdir, "cross_play_eval.json")
    try:
      rc = runner(s, cps, raw)
    except Exception as e:  # a runner error is that run's failure
      rc = f"{type(e).__name__}: {e}"
    if rc != 0 or not os.path.exists(raw):
      echo(f"FAILED cross-play {s.name}: {rc}; see "
           f"{os.path.join(s.workdir, 'reproduce.log')}")
      return s.workdir
    with open(raw) as f:
      evaluated = json.load(f)
    m = summarize(evaluated, list(cps), arms.index(s.arm), agent)
    with open(os.path.join(s.workdir, CROSS_FILE), "w") as f:
      json.dump({"counterparts": cps, "agent": agent, "metrics": m, "eval": evaluated}, f,
                indent=2)
    os.remove(raw)
    echo(f"done   cross-play {s.name}: " +
         ", ".join(f"{k} {v:.3f}" for k, v in m.items() if k.endswith("/return")))
    return None

  with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
    return [w for w in pool.map(one, todo) if w]
