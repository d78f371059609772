"""Measurement (not a speed claim): implicit world modeling on early experience then imitation
vs imitation alone, on the KeyRoom toy host game (envs/host/toy.py), 3 seeds.

Both arms: the tests' toy host run (`tests/train/tiny.py:host_config`, 4 turns), 32 demos,
150 imitation steps of 8 rows, lr 3e-3, no RL, 32 held-out tasks. The IWM arm first fits 50
steps of early experience (`sft.iwm_alternatives=2`, `sft.iwm_steps=50`, so `sft.steps=200`).
Held-out success and reward after SFT per seed, and IWM - imitation with Welch's 95% interval
(agent_rl.eval.reproduce.stats, as the reproduction tables).

  python benchmarks/early_experience_toy.py [--seeds 0,1,2]

Writes benchmarks/results/early_experience_toy.json and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent_rl.eval.reproduce import stats  # noqa: E402
from results_io import write_json  # noqa: E402
from tests.train.tiny import host_config  # noqa: E402

IWM_STEPS, IL_STEPS = 50, 150


def held_out(seed: int, iwm: bool) -> tuple[float, float]:
  """(held-out success, reward) after SFT of one arm and seed."""
  from agent_rl.train.run import run
  c = host_config(iterations=0)
  c.seed = seed
  c.rollout.max_turns, c.rollout.max_action_tokens = 4, 16
  c.sft.num_demos, c.sft.batch_size, c.train.log_every = 32, 8, 10
  c.sft.steps = IL_STEPS + (IWM_STEPS if iwm else 0)
  if iwm:
    c.sft.iwm_steps, c.sft.iwm_alternatives = IWM_STEPS, 2
  c.eval.num_tasks = 32
  c.optim.lr = 3e-3
  with tempfile.TemporaryDirectory() as wd:
    run(c, wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
      ev = [r for r in map(json.loads, f) if "eval/success" in r]
  return ev[-1]["eval/success"], ev[-1]["eval/reward"]


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--seeds", default="0,1,2")
  seeds = [int(s) for s in ap.parse_args().seeds.split(",")]
  arms = {a: [held_out(s, a == "iwm") for s in seeds] for a in ("imitation", "iwm")}
  out = dict(seeds=seeds, iwm_steps=IWM_STEPS, imitation_steps=IL_STEPS, alternatives=2,
             held_out_tasks=32)
  for i, metric in enumerate(("success", "reward")):
    per = {a: [v[i] for v in arms[a]] for a in arms}
    d = stats.welch_diff(per["iwm"], per["imitation"])
    out[metric] = dict(per_seed=per, iwm_minus_imitation=d.diff,
                       ci95=None if d.ci95 is None else list(d.ci95))
  write_json(os.path.join(os.path.dirname(__file__), "results", "early_experience_toy.json"),
             out)


if __name__ == "__main__":
  main()
