"""Frozen agents and per-agent initial runs (agents/frozen.py): the optimizer never moves a
frozen agent's slice (AdamW with weight decay, bit for bit) and moves the others exactly as
the plain optimizer does; frozen rows leave the loss; bad settings name the field."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agent_rl.agents import frozen as F
from agent_rl.objective.minibatch import Minibatch
from agent_rl.train.config import base_config, validate


def _tree(k=3):
  r = np.random.default_rng(0)
  return {"lm": {"w": jnp.asarray(r.normal(size=(k, 4, 5)), jnp.float32),
                 "b": jnp.asarray(r.normal(size=(k, 5)), jnp.float32)}}


@pytest.mark.parametrize("frozen", [(1,), (0, 2)])
def test_frozen_slices_never_move_and_the_rest_match_the_plain_optimizer(frozen):
  params = _tree()
  opt = optax.adamw(1e-2, weight_decay=0.1)
  fopt = F.freeze_optimizer(opt, "separate", frozen)
  s, fs = opt.init(params), fopt.init(params)
  p, fp = params, params
  for i in range(3):
    g = jax.tree.map(lambda x: jnp.sin(x * (i + 1)), p)
    u, s = opt.update(g, s, p)
    p = optax.apply_updates(p, u)
    fg = jax.tree.map(lambda x: jnp.sin(x * (i + 1)), fp)
    fu, fs = fopt.update(fg, fs, fp)
    fp = optax.apply_updates(fp, fu)
  for name in ("w", "b"):
    for k in range(3):
      if k in frozen:
        np.testing.assert_array_equal(fp["lm"][name][k], params["lm"][name][k])
      else:
        np.testing.assert_array_equal(fp["lm"][name][k], p["lm"][name][k])
        assert not np.array_equal(fp["lm"][name][k], params["lm"][name][k])


def test_lora_mode_freezes_only_the_agents_adapters():
  params = {"lm": {"q_lora_a": jnp.ones((2, 3, 4)), "q": jnp.ones((3, 3))}}
  fopt = F.freeze_optimizer(optax.sgd(1.0), "lora", (0,))
  u, _ = fopt.update(jax.tree.map(jnp.ones_like, params), fopt.init(params), params)
  np.testing.assert_array_equal(u["lm"]["q_lora_a"][0], 0.0)
  np.testing.assert_array_equal(u["lm"]["q_lora_a"][1], -1.0)
  np.testing.assert_array_equal(u["lm"]["q"], -1.0)  # not stacked: the base's own rule


def test_no_frozen_agents_is_the_optimizer_itself():
  opt = optax.sgd(1.0)
  assert F.freeze_optimizer(opt, "separate", ()) is opt


def test_freeze_rows_masks_the_frozen_agents_rows():
  z = jnp.zeros((4, 3))
  mb = Minibatch(tokens=z, position=z, attention_mask=z, loss_mask=jnp.ones((4, 3)),
                 turn_index=z, old_logprobs=z, advantages=z, agent=jnp.asarray([0, 1, 2, 1]))
  out = F.freeze_rows(mb, (1,))
  np.testing.assert_array_equal(out.loss_mask, [[1] * 3, [0] * 3, [1] * 3, [0] * 3])
  assert F.freeze_rows(mb, ()) is mb


def test_put_agent_replaces_one_copy():
  stacked = _tree()["lm"]
  single = jax.tree.map(lambda x: x[0] * 0 + 7.0, stacked)
  out = F.put_agent(stacked, 2, single)
  np.testing.assert_array_equal(out["w"][2], 7.0)
  np.testing.assert_array_equal(out["w"][:2], stacked["w"][:2])


def _cfg(**agents):
  c = base_config()
  c.env.name, c.rollout.history = "deal_lite", "windowed"
  for k, v in agents.items():
    c.agents[k] = v
  return c


@pytest.mark.parametrize("agents,match", [
    (dict(mode="shared", frozen="1"), "agents.frozen"),
    (dict(mode="separate", frozen="x"), "agents.frozen"),
    (dict(mode="separate", frozen="-1"), "agents.frozen"),
    (dict(mode="lora", init=",/tmp/run"), "agents.init"),
    (dict(mode="separate", init=",/nonexistent/run"), "agents.init"),
])
def test_bad_settings_name_the_field(agents, match):
  with pytest.raises(ValueError, match=match):
    validate(_cfg(**agents))


def test_counts_are_checked_against_the_agents():
  c = _cfg(mode="separate", init="", frozen="2")
  with pytest.raises(ValueError, match="agents.frozen: agents \\[2\\]"):
    F.check(c, 2)
  c = _cfg(mode="separate", init=",", frozen="1")
  with pytest.raises(ValueError, match="agents.init: 2 entries for 3 agents"):
    F.check(c, 3)
  assert F.check(c, 2) == (("", ""), (1,))
