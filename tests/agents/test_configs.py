"""The multi-agent paper configs at their tiny scale (slow: minutes each on 2 cores; the
shrunk runs are in tests/train/test_configs.py): held-out success rises above where it
started, per-agent gradient norms are logged, the scripted-counterpart panels are scored."""
import os

import pytest

from agent_rl.metrics import read_jsonl
from agent_rl.train.run import run
from tests.train.test_configs import CONFIGS, load

pytestmark = pytest.mark.slow


def _curve(workdir, key="eval/success"):
  return [(r["step"], r[key]) for r in read_jsonl(os.path.join(workdir, "metrics.jsonl"))
          if key in r]


@pytest.mark.parametrize("name", ["ibrl_deal", "drmas_calcmath"])
def test_multi_agent_config_learns_at_tiny_scale(name, tmp_path):
  c = load(os.path.join(os.path.dirname(CONFIGS[0]), name + ".py"), "tiny")
  c.mesh.num_devices = 1
  run(c, str(tmp_path))
  curve = _curve(tmp_path)
  assert curve[-1][1] >= curve[0][1] + 0.25, curve
  recs = read_jsonl(os.path.join(tmp_path, "metrics.jsonl"))
  assert any("grad/norm/agent1" in r for r in recs)
  if name == "ibrl_deal":
    assert all(any(f"eval/{p}/reward" in r for r in recs) for p in ("fair", "greedy", "walker"))
