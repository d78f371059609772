"""Benchmark: a host game's next resets run in the workers during the update
(`env.host.prefetch_resets`, envs/host/pool.py) vs each rollout resetting its games first.

Per config, two runs of the same config and seed in this process, without and with resets
ahead (no SFT, `--iterations` RL iterations, one evaluation at the end), and per run the mean
over the steady iterations (the first compiles; the last has no next reset to start) of the
iteration's wall time and its split from metrics.jsonl: `time/env_reset_s` (what the rollout
waited for its games' resets), `time/rollout_s`, `time/update_s`. The ratio is the iteration
time without over with. `same_metrics`: the two runs' non-time metrics are equal, bit for bit
(the resets ahead change when the games reset, not what they give).

On a 2-core CPU the update's XLA threads and the resetting workers share the cores, so the
reset is not free here; on an accelerator host the update leaves the CPU to the workers.

  python benchmarks/reset_ahead.py [--configs gigpo_alfworld:tiny,scienceworld:tiny]
      [--iterations 6]

Writes benchmarks/results/reset_ahead.json and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

from length_buckets import config_of  # noqa: E402
from results_io import write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = "gigpo_alfworld:tiny,scienceworld:tiny,textworld_cooking:tiny"
SPLIT = ("iteration_s", "env_reset_s", "rollout_s", "update_s", "policy_s", "env_step_s")


def one_run(spec: str, iterations: int, ahead: bool, workdir: str) -> list[dict]:
  """The RL iterations' metrics of `spec` without SFT, resets ahead on or off."""
  from agent_rl.train.run import run
  c = config_of(spec)
  c.sft.steps, c.train.iterations = 0, iterations
  c.train.eval_every = 10 ** 6  # one evaluation, after the last iteration
  c.env.host.prefetch_resets = ahead
  run(c, workdir)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r for r in map(json.loads, f) if "time/iteration_s" in r]


def summary(recs: list[dict]) -> dict:
  steady = recs[1:-1]
  return {k: statistics.mean(r[f"time/{k}"] for r in steady) for k in SPLIT}


def untimed(recs: list[dict]) -> list[dict]:
  return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]


def compare(off: dict, on: dict, same: bool) -> dict:
  """The two arms side by side: the ratio, and `reset_bound_speedup`, the iteration without
  resets ahead over the same less its reset wait: what they give where the update leaves the
  workers their cores (an accelerator host), and the most they can give."""
  return dict(without=off, with_resets_ahead=on,
              iteration_speedup=off["iteration_s"] / on["iteration_s"],
              reset_bound_speedup=off["iteration_s"] / (off["iteration_s"] - off["env_reset_s"]),
              same_metrics=same)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--configs", default=DEFAULT)
  ap.add_argument("--iterations", type=int, default=6)
  ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks/results/reset_ahead.json"))
  a = ap.parse_args()
  if a.iterations < 3:
    raise SystemExit("--iterations must be >= 3 (the first and last are not steady)")
  out = dict(backend=jax.default_backend(), cpus=os.cpu_count(), machine=platform.machine(),
             load_average_at_start=os.getloadavg()[0], iterations=a.iterations,
             steady_iterations=a.iterations - 2, configs={})
  for spec in a.configs.split(","):
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
      for ahead in (False, True):
        runs[ahead] = one_run(spec, a.iterations, ahead, os.path.join(tmp, str(ahead)))
    out["configs"][spec] = compare(summary(runs[False]), summary(runs[True]),
                                   untimed(runs[False]) == untimed(runs[True]))
    print(spec, json.dumps(out["configs"][spec]), flush=True)
  write_json(a.out, out)


if __name__ == "__main__":
  main()
