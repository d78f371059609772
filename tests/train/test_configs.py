"""Every paper config (and each variant) runs end to end at a shrunk tiny scale."""
import glob
import importlib.util
import json
import os

import pytest

from agent_rl.train.run import run

CONFIGS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "configs", "*.py")))
VARIANTS = {"ragen_sokoban": ["tiny", "tiny,ppo,kl_reward", "tiny,starpo_s,kl"],
            "gigpo_sokoban": ["tiny", "tiny,grpo"],
            "ragen_frozenlake": ["tiny", "tiny,tsr"],
            "dr_grpo_countdown": ["tiny", "tiny,dapo"],
            "spa_sokoban": ["tiny"]}
CASES = [(p, a) for p in CONFIGS for a in VARIANTS.get(os.path.basename(p)[:-3], ["tiny"])]


def load(path, arg):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  assert mod.__doc__ and "python -m agent_rl.train" in mod.__doc__, f"{path}: docstring recipe"
  return mod.get_config(arg)


def shrink(c):
  c.model.hidden, c.model.num_layers, c.model.num_heads = 32, 1, 2
  c.model.num_kv_heads, c.model.intermediate = 1, 64
  c.tokenizer.vocab_size = 400
  c.rollout.num_tasks, c.rollout.group_size = 4, 2  # starpo_s keeps 1 of 4 groups
  c.rollout.max_turns = min(c.rollout.max_turns, 2)
  c.sft.steps, c.sft.num_demos, c.sft.batch_size = 2, 4, 4
  c.train.iterations, c.train.minibatch_episodes, c.train.eval_every = 2, 2, 2
  c.eval.num_tasks, c.eval.k = 2, 2
  c.mesh.num_devices = 1
  return c


def test_every_config_file_has_variants_listed():
  assert {os.path.basename(p)[:-3] for p in CONFIGS} == set(VARIANTS)


@pytest.mark.parametrize("path,arg", CASES, ids=[f"{os.path.basename(p)[:-3]}:{a}" for p, a in CASES])
def test_config_runs_at_tiny_scale(path, arg, tmp_path):
  c = shrink(load(path, arg))
  last = run(c, str(tmp_path))
  assert "rollout/success" in last and "eval/success" in last
  with open(tmp_path / "metrics.jsonl") as f:
    steps = [json.loads(ln)["step"] for ln in f]
  assert steps[-1] == c.sft.steps + c.train.iterations
  assert (tmp_path / "report.png").exists()
