"""The main job's cost, this tree against an earlier commit, in one run (CPU and wall time).

    python benchmarks/main_job_cpu.py --base 13dd9ab [--rounds 2] [--config configs/ragen_sokoban.py:tiny]

Each round runs the README's main command (`python -m agent_rl.train --config=... --workdir=`)
in a clean workdir, first in `git archive <base>` unpacked to a temporary directory (its own
`PYTHONPATH`, the same virtual environment), then in this tree, and records the children's
user+sys CPU seconds (`resource.getrusage(RUSAGE_CHILDREN)`) and the wall time. CPU time is
the figure to compare on a machine shared with other jobs (wall time there mostly measures the
other jobs); the ratio new/base < 1 means this tree is cheaper. Also the final held-out success
of each run. Output: benchmarks/results/main_job_cpu.json.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_io import write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _children_cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime


def run_once(tree: str, config: str, workdir: str) -> dict:
  env = dict(os.environ, PYTHONPATH=tree)
  c0, t0 = _children_cpu(), time.perf_counter()
  proc = subprocess.run([sys.executable, "-m", "agent_rl.train", f"--config={config}",
                         f"--workdir={workdir}"], cwd=tree, env=env, capture_output=True, text=True)
  wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
  if proc.returncode:
    raise SystemExit(f"main job failed in {tree}:\n{proc.stderr[-3000:]}")
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  evals = [r["eval/success"] for r in rows if "eval/success" in r]
  its = sorted(r["time/iteration_s"] for r in rows if "time/iteration_s" in r)
  return dict(cpu_s=round(cpu, 1), wall_s=round(wall, 1), final_eval_success=evals[-1],
              median_iteration_s=round(its[len(its) // 2], 3))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--base", required=True, help="the earlier commit to compare against")
  ap.add_argument("--config", default="configs/ragen_sokoban.py:tiny")
  ap.add_argument("--rounds", type=int, default=1)
  ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "main_job_cpu.json"))
  a = ap.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    base = os.path.join(tmp, "base")
    os.makedirs(base)
    archive = subprocess.run(["git", "archive", a.base], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", base], input=archive.stdout, check=True)
    rounds = []
    for i in range(a.rounds):
      rounds.append({name: run_once(tree, a.config, os.path.join(tmp, f"{name}{i}"))
                     for name, tree in (("base", base), ("new", ROOT))})
  cpu = lambda k: sum(r[k]["cpu_s"] for r in rounds)
  write_json(a.out, dict(config=a.config, base=a.base, rounds=rounds,
                         cpu_ratio_new_over_base=round(cpu("new") / cpu("base"), 3),
                         load_average=os.getloadavg()))


if __name__ == "__main__":
  main()
