"""Critic warm-up (`train.critic_warmup`, verl's trainer.critic_warmup): the first iterations
train the critic alone (here with the critic's pre-fit on each batch too). The actor/critic optimizers against plain optax on each subtree; a run whose
policy LM is bit-identical across a warm-up iteration and moves after it; exact resume across
the switch; the config errors."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agent_rl.train.config import validate
from agent_rl.train.optim import actor_critic, critic_only, make_optimizer
from agent_rl.train.run import SimulatedKill, run
from tests.train.tiny import checkpoint_params, same_tree, tiny_config


def _opts(total=10):
  c = tiny_config()
  c.optim.weight_decay, c.optim.clip_norm, c.optim.warmup_steps = 0.1, 1.0, 2
  c.optim.schedule = "cosine"
  return make_optimizer(c.optim, total // 2), make_optimizer(c.optim, total)  # actor, critic


PARAMS = {"lm": {"w": jnp.ones(3)}, "value_head": {"w": jnp.full(2, 0.5)}}
# The policy's gradient is large: clipped together with the critic's it would shrink it.
GRADS = {"lm": {"w": jnp.full(3, 50.0)}, "value_head": {"w": jnp.array([0.3, -0.2])}}


def test_critic_only_moves_the_critic_alone_and_the_actor_starts_at_its_schedules_start():
  """Against plain optax on each subtree alone (verl's two optimizers): warm-up steps move the
  value head as the critic's optimizer on its own gradients; the policy LM gets zero updates
  (no weight decay) and its optimizer state is untouched, so its first update after the
  switch is a fresh optimizer's first (learning-rate warm-up from 0, bias correction at 1)."""
  actor, critic = _opts()
  warm, both = critic_only(actor, critic), actor_critic(actor, critic)
  state = both.init(PARAMS)
  assert jax.tree.structure(warm.init(PARAMS)) == jax.tree.structure(state)  # one ckpt layout
  c_state, p = critic.init(PARAMS["value_head"]), PARAMS
  for _ in range(3):  # warm-up steps
    upd, state = warm.update(GRADS, state, p)
    ref, c_state = critic.update(GRADS["value_head"], c_state, p["value_head"])
    np.testing.assert_array_equal(np.asarray(upd["lm"]["w"]), 0.0)
    np.testing.assert_allclose(upd["value_head"]["w"], ref["w"], rtol=1e-6)
    p = optax.apply_updates(p, upd)
  assert np.all(np.asarray(ref["w"]) != 0)  # past the learning-rate warm-up's 0
  upd, state = both.update(GRADS, state, p)  # the switch: both train
  a_ref, _ = actor.update(GRADS["lm"], actor.init(PARAMS["lm"]), p["lm"])
  c_ref, _ = critic.update(GRADS["value_head"], c_state, p["value_head"])
  np.testing.assert_allclose(upd["lm"]["w"], a_ref["w"], rtol=1e-6)
  np.testing.assert_allclose(upd["value_head"]["w"], c_ref["w"], rtol=1e-6)
  # (the actor's first step is 0: its learning-rate warm-up starts at 0, as a fresh optimizer's)
  upd2, _ = both.update(GRADS, state, optax.apply_updates(p, upd))
  assert np.all(np.asarray(upd2["lm"]["w"]) != 0)


def _config(iterations=3, prefit=1):
  """GAE with a value head, 2 warm-up iterations; each iteration also pre-fits the critic on
  its batch (`train.critic_prefit`, tests/train/test_critic_prefit.py): its key derivation and
  optimizer are what the exact resume below also checks, in the same three runs."""
  c = tiny_config(iterations=iterations, ckpt_every=1, credit="gae", critic="shared")
  c.train.critic_warmup, c.train.critic_prefit = 2, prefit
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
  assert same_tree(p1["lm"], p2["lm"])  # iteration 2 (warm-up) left the policy bit for bit
  assert not same_tree(p1["value_head"], p2["value_head"])  # and trained the critic
  assert not same_tree(p2["lm"], p3["lm"])  # iteration 3 trains the actor
  rl = [r for r in _records(wd) if "train/critic_only" in r]
  assert [r["train/critic_only"] for r in rl] == [1.0, 1.0, 0.0]
  assert all(np.isfinite(r["loss/value"]) and np.isfinite(r["prefit/loss/value"]) for r in rl)
  # Critic-only updates run the critic's forward alone (policy.value_stats): no policy entropy.
  assert ["loss/entropy" in r for r in rl] == [False, False, True]
  assert not any("prefit/loss/entropy" in r for r in rl)
  # Exact resume across the switch: killed after iteration 2 (its state lost), the restart
  # redoes it from checkpoint 1 and then trains the actor from its held state as the full run.
  killed = str(tmp_path / "k")
  with pytest.raises(SimulatedKill):
    run(c, killed, kill_after=2)
  run(c, killed)
  assert _records(killed) == _records(wd)


@pytest.mark.slow  # a third run (~90 s); the optimizer logic is the unit test above
def test_warmup_with_lora_keeps_adapters_and_base_then_trains_the_adapters(tmp_path):
  """The warm-up's held actor inside LoRA's frozen-base optimizer (nested multi_transforms):
  iteration 2 moves the value head only; iteration 3 the adapters, never the base."""
  c = _config(prefit=0)
  c.model.lora.rank, c.model.lora.alpha, c.model.lora.targets = 4, 8.0, "q,v"
  wd = str(tmp_path / "l")
  run(c, wd)
  flat = lambda step: {jax.tree_util.keystr(k): np.asarray(v) for k, v in
                       jax.tree_util.tree_flatten_with_path(checkpoint_params(c, wd, step))[0]}
  p1, p2, p3 = flat(1), flat(2), flat(3)
  moved = lambda a, b: {k for k in a if not np.array_equal(a[k], b[k])}
  is_lora = lambda k: "_lora_" in k
  assert moved(p1, p2) and all(not k.startswith("['lm']") for k in moved(p1, p2))
  assert moved(p2, p3) and all(is_lora(k) or not k.startswith("['lm']") for k in moved(p2, p3))
  assert any(is_lora(k) for k in moved(p2, p3))


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
