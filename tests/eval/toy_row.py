"""A toy paper row in a temporary configs dir and a fake run function (what train/run.py
leaves in a workdir, in microseconds), for the harness tests (tests/eval/test_reproduce.py,
test_cross_play.py)."""
import json
import os

import pytest

from agent_rl.eval.reproduce import runs

TOY = '''"""Toy row for the harness tests."""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config

VARIANTS = dict(grpo=False, bad_env=False)
COMPARISON = Comparison(arms={"M": "", "B": "grpo"}, method="M", baselines=("B",),
                        metrics=("eval/success",), paper={"M": {"eval/success": 0.8},
                        "B": {"eval/success": 0.6}}, paper_source="toy", setting="toy world")


def get_config(arg=None):
  c, args = scaled_config(arg, VARIANTS)
  c.credit.name = "grpo" if "grpo" in args else "dr_grpo"
  c.train.iterations, c.sft.steps = 3, 2
  if "bad_env" in args:
    c.env.name = "no_such_env"
  return c
'''
CROSS = TOY.replace('paper_source="toy"', 'paper_source="toy", cross_play=True').replace(
    'metrics=("eval/success",)',
    'metrics=("eval/success", "cross/all/return", "cross/early/return")')
UNREG = TOY.replace('arms={"M": "", "B": "grpo"}', 'arms={"M": "bad_env", "B": "grpo"}')


@pytest.fixture
def toy(tmp_path):
  d = tmp_path / "configs"
  d.mkdir()
  (d / "toy.py").write_text(TOY)
  (d / "unreg.py").write_text(UNREG)
  (d / "cross.py").write_text(CROSS)
  (d / "plain.py").write_text('"""No row."""\ndef get_config(arg=None):\n  return None\n')
  return str(d), str(tmp_path / "results")


VALUES = {"M": [0.8, 0.9, 0.85], "B": [0.7, 0.75, 0.72]}


class FakeRun:
  """What train/run.py leaves in a workdir, in microseconds: config.json, metrics.jsonl
  (eval/success at 0, SFT end and the last step) and the final checkpoint folder."""

  def __init__(self, pc):
    self.pc, self.calls = pc, []

  def __call__(self, spec):
    self.calls.append((spec.arm, spec.seed))
    c = runs.build_config(self.pc, spec.arg, spec.overrides)
    os.makedirs(os.path.join(spec.workdir, "checkpoints", str(runs.final_step(c))), exist_ok=True)
    with open(os.path.join(spec.workdir, "config.json"), "w") as f:
      f.write(c.to_json_best_effort(indent=2, sort_keys=True))
    v = VALUES[spec.arm][spec.seed]
    with open(os.path.join(spec.workdir, "metrics.jsonl"), "w") as f:
      for step, x in [(0, 0.0), (c.sft.steps, v / 2), (runs.final_step(c), v)]:
        f.write(json.dumps({"step": step, "eval/success": x}) + "\n")
    return 0
