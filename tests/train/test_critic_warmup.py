"""Critic warm-up (`train.critic_warmup`, verl's trainer.critic_warmup): the first iterations
train the critic alone. The masked optimizer against a hand-masked reference; a run whose
policy LM is bit-identical across a warm-up iteration and moves after it; exact resume across
the switch; the config errors."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.train.config import validate
from agent_rl.train.optim import critic_only, make_optimizer
from agent_rl.train.run import SimulatedKill, run
from tests.train.tiny import checkpoint_params, tiny_config


def test_critic_only_moves_the_critic_alone():
  c = tiny_config()
  c.optim.weight_decay, c.optim.clip_norm = 0.1, 1.0
  opt = make_optimizer(c.optim, 10)
  params = {"lm": {"w": jnp.ones(3)}, "value_head": {"w": jnp.full(2, 0.5)}}
  # The policy's gradient is large: clipping it in would shrink the critic's update.
  grads = {"lm": {"w": jnp.full(3, 50.0)}, "value_head": {"w": jnp.array([0.3, -0.2])}}
  masked = critic_only(opt)
  state = masked.init(params)
  assert jax.tree.structure(state) == jax.tree.structure(opt.init(params))  # one ckpt layout
  upd, _ = masked.update(grads, state, params)
  ref_grads = {"lm": {"w": jnp.zeros(3)}, "value_head": grads["value_head"]}
  ref, _ = opt.update(ref_grads, opt.init(params), params)
  np.testing.assert_array_equal(np.asarray(upd["lm"]["w"]), 0.0)  # weight decay too
  np.testing.assert_array_equal(np.asarray(upd["value_head"]["w"]),
                                np.asarray(ref["value_head"]["w"]))
  assert np.all(np.asarray(ref["value_head"]["w"]) != 0)


def _config(iterations=3):
  c = tiny_config(iterations=iterations, ckpt_every=1, credit="gae", critic="shared")
  c.train.critic_warmup = 2
  return c


def _params(c, workdir, step):
  return jax.tree.map(np.asarray, checkpoint_params(c, workdir, step))


def _records(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(ln).items() if not k.startswith("time/")} for ln in f]


def test_warmup_iterations_keep_the_policy_then_it_trains(tmp_path):
  c = _config()
  wd = str(tmp_path / "w")
  run(c, wd)
  p1, p2, p3 = (_params(c, wd, s) for s in (1, 2, 3))
  same = lambda a, b: all(np.array_equal(x, y) for x, y in
                          zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  assert same(p1["lm"], p2["lm"])  # iteration 2 (warm-up) left the policy bit for bit
  assert not same(p1["value_head"], p2["value_head"])  # and trained the critic
  assert not same(p2["lm"], p3["lm"])  # iteration 3 trains the actor
  rl = [r for r in _records(wd) if "train/critic_only" in r]
  assert [r["train/critic_only"] for r in rl] == [1.0, 1.0, 0.0]
  assert all(np.isfinite(r["loss/value"]) for r in rl)
  # Exact resume across the switch: killed after iteration 2 (its state lost), the restart
  # redoes it from checkpoint 1 and then starts the actor's fresh optimizer as the full run did.
  killed = str(tmp_path / "k")
  with pytest.raises(SimulatedKill):
    run(c, killed, kill_after=2)
  run(c, killed)
  assert _records(killed) == _records(wd)


@pytest.mark.parametrize("field,value,match", [
    ("critic_warmup", 3, "must be < train.iterations"),
    ("critic_warmup", -1, "must be an int >= 0"),
    ("critic", "none", "need a critic"),
])
def test_bad_warmup_is_a_clear_error(field, value, match):
  c = _config()
  if field == "critic":
    c.model.critic, c.credit.name = "none", "grpo"
  else:
    c.train.critic_warmup = value
  with pytest.raises(ValueError, match=rf"train.critic_warmup.*{match}"):
    validate(c)
