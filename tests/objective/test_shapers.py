"""Reward shapers against plain NumPy: KL-in-reward with the fixed and adaptive controllers
(the beta carried across iterations), DAPO's overlong penalty, reward-term weights."""
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.objective import apply_shapers
from agent_rl.objective.shapers import initial_state
from agent_rl.rollout.batch import from_turns
from agent_rl.train.config import base_config


def _batch(seed=0, n=4, t=3, k=2):
  r = np.random.default_rng(seed)
  reward = r.normal(size=(n, t)).astype(np.float32)
  valid = np.ones((n, t), bool)
  valid[0, 2] = False
  b = from_turns(reward, valid, np.arange(n) // 2, tokens_per_turn=k,
                 extras={"reward_terms/success": jnp.asarray(r.random((n, t)) < 0.5, jnp.float32),
                         "reward_terms/format": jnp.asarray(r.random((n, t)), jnp.float32)})
  lp = -np.abs(r.normal(size=b.tokens.shape)).astype(np.float32)
  ref = -np.abs(r.normal(size=b.tokens.shape)).astype(np.float32)
  return b.replace(logprobs=jnp.asarray(lp), ref_logprobs=jnp.asarray(ref)), k


def test_kl_in_reward_fixed_and_adaptive():
  b, k = _batch()
  c = base_config()
  c.loss.kl_in_reward, c.loss.kl_type = 0.05, "kl"
  m = np.asarray(b.loss_mask)
  kld = (np.asarray(b.logprobs) - np.asarray(b.ref_logprobs)) * m
  n, t = b.reward.shape
  per_turn = kld.reshape(n, t, k).sum(-1)
  cur_kl = np.mean(kld.sum(-1) / (m.sum(-1) + 1e-8))
  for ctrl in ("fixed", "adaptive"):
    c.reward.kl_controller, c.reward.kl_target, c.reward.kl_horizon = ctrl, 0.1, 100
    out, met, state = apply_shapers(c, b, initial_state(c))
    want = np.asarray(b.reward) - 0.05 * per_turn * np.asarray(b.valid)
    np.testing.assert_allclose(np.asarray(out.reward), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(met["rollout/kl_in_reward"]), cur_kl, rtol=1e-5)
    beta = 0.05 if ctrl == "fixed" else 0.05 * (1 + np.clip(cur_kl / 0.1 - 1, -0.2, 0.2) * n / 100)
    np.testing.assert_allclose(state["kl_beta"], beta, rtol=1e-6)
    _, met2, _ = apply_shapers(c, b, state)  # the next iteration uses the updated beta
    assert met2["rollout/kl_beta"] == state["kl_beta"]


def test_overlong_and_reward_weights():
  b, k = _batch(1)
  c = base_config()
  c.reward.overlong_buffer, c.reward.overlong_max_length, c.reward.overlong_penalty = 2, 5, 1.0
  out, met, _ = apply_shapers(c, b, initial_state(c))
  gen = np.asarray(b.loss_mask).sum(1)  # k tokens per valid turn
  pen = np.minimum(-(gen - (5 - 2)) / 2 * 1.0, 0.0)
  last = np.asarray(b.valid).sum(1) - 1
  want = np.asarray(b.reward).copy()
  want[np.arange(len(last)), last] += pen
  np.testing.assert_allclose(np.asarray(out.reward), want, rtol=1e-6)

  c = base_config()
  c.reward.term_weights = "success=2.0,format=-0.5"
  out, _, _ = apply_shapers(c, b, initial_state(c))
  e = {k2: np.asarray(v) for k2, v in b.extras.items()}
  want = (2.0 * e["reward_terms/success"] - 0.5 * e["reward_terms/format"]) * np.asarray(b.valid)
  np.testing.assert_allclose(np.asarray(out.reward), want, rtol=1e-6)
  c.reward.term_weights = "succes=1.0"
  with pytest.raises(ValueError, match="'succes'.*not emitted.*format.*success"):
    apply_shapers(c, b, initial_state(c))
  c.reward.term_weights = "success:1"
  with pytest.raises(ValueError, match="config.reward.term_weights"):
    apply_shapers(c, b, initial_state(c))


def test_unknown_shaper_is_named():
  from agent_rl.train.config import validate
  c = base_config()
  c.reward.shapers = "kl_in_reward,overlong_len"
  with pytest.raises(ValueError, match="unknown reward shaper 'overlong_len'"):
    validate(c)
