"""GAE, REINFORCE++ returns, RAGEN bi-level GAE and masked_whiten vs NumPy loops."""
import importlib.util
import pathlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import credit
from agent_rl.credit import gae as gae_mod
from agent_rl.credit import verl_compat as vc
from agent_rl.rollout.batch import from_turns

_spec = importlib.util.spec_from_file_location("credit_gae_numpy_ref", pathlib.Path(__file__).with_name("numpy_ref.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

TOL = dict(rtol=1e-4, atol=1e-4)


def make_tokens(seed, B=12, L=20):
  """Multi-turn rows: padded tails, masked observation spans, sparse rewards (some on masked tokens)."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(3, L + 1, B)
  m = (np.arange(L)[None, :] < lengths[:, None]).astype(np.float64)
  m[:, 2:-2] *= rng.random((B, L - 4)) > 0.3
  r = np.where(rng.random((B, L)) < 0.25, rng.choice([1.0, -0.5, 0.0]), 0.0) * rng.normal(1, 0.3, (B, L))
  v = rng.normal(size=(B, L))
  return r, v, m


_jit_gae = jax.jit(vc.gae_advantage_return, static_argnums=(3, 4))
_jit_rpp = jax.jit(vc.reinforce_pp_outcome_advantage, static_argnames=("gamma", "reset_at_mask"))
_jit_bi = jax.jit(vc.bilevel_gae_advantage_return, static_argnums=(3, 4, 5))


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.9, 0.8)])
def test_gae_matches_loop(gamma, lam):
  r, v, m = make_tokens(0)
  adv, ret = _jit_gae(r, v, m, gamma, lam)
  want_a, want_r = ref.gae(r, v, m, gamma, lam)
  np.testing.assert_allclose(adv, want_a, **TOL)
  np.testing.assert_allclose(ret, want_r, **TOL)


def test_gae_drops_reward_on_masked_token():
  v = np.zeros((2, 4))
  m = np.array([[1, 1, 0, 1], [1, 1, 0, 1.0]])
  r = np.zeros((2, 4))
  r[1, 2] = 5.0  # on the masked token: silently dropped
  _, ret = _jit_gae(r, v, m, 1.0, 1.0)
  np.testing.assert_array_equal(ret[0], ret[1])
  r[1, 1] = 5.0  # on a valid token: counted
  _, ret = _jit_gae(r, v, m, 1.0, 1.0)
  np.testing.assert_allclose(ret[1], [5.0, 5.0, 0.0, 0.0])


@pytest.mark.parametrize("reset", [True, False])
def test_reinforce_pp_matches_loop(reset):
  r, _, m = make_tokens(1)
  adv, ret = _jit_rpp(r, m, gamma=0.95, reset_at_mask=reset)
  want_a, want_r = ref.reinforce_pp(r, m, 0.95, reset=reset)
  np.testing.assert_allclose(adv, want_a, **TOL)
  np.testing.assert_allclose(ret, want_r, **TOL)


def test_reinforce_pp_reset_blocks_later_turns():
  r = np.array([[0, 0, 0, 0, 1.0], [0, 0, 0, 0, 1.0]])
  m = np.array([[1, 1, 0, 1, 1.0], [1, 1, 1, 1, 1.0]])
  rpp = jax.jit(gae_mod.reinforce_pp_returns, static_argnums=2, static_argnames="reset_at_mask")
  g = rpp(r, m, 1.0)
  np.testing.assert_allclose(g[0], [0, 0, 1, 1, 1])  # reset at the masked token
  np.testing.assert_allclose(g[1], [1, 1, 1, 1, 1])
  g = rpp(r, m, 1.0, reset_at_mask=False)
  np.testing.assert_allclose(g[0], [1, 1, 0, 1, 1])  # verl 0.9.1: skip, carry through


def test_bilevel_matches_loop_and_ragen_example():
  r, v, m = make_tokens(2)
  adv, ret = _jit_bi(r, v, m, 0.95, 0.9, 0.8)
  want_a, want_r = ref.bilevel_gae(r, v, m, 0.95, 0.9, 0.8)
  np.testing.assert_allclose(adv, want_a, **TOL)
  np.testing.assert_allclose(ret, want_r, **TOL)
  ends = np.zeros(r.shape, bool)
  ends[:, [4, 9, 15]] = True
  adv, ret = _jit_bi(r, v, m, 1.0, 1.0, 0.95, turn_ends=ends)
  want_a, want_r = ref.bilevel_gae(r, v, m, 1.0, 1.0, 0.95, ends=ends)
  np.testing.assert_allclose(adv, want_a, **TOL)
  np.testing.assert_allclose(ret, want_r, **TOL)
  # RAGEN's own __main__ example, worked by hand from §3: ends at 4 and 9 (gamma=lam=1).
  rr = np.array([[0, 0, 0, 0, 1, 0, 0, 0, 0, 1.0]])
  vv = np.arange(1, 11)[None, :] / 10
  _, ret = _jit_bi(rr, vv, np.ones((1, 10)), 1.0, 1.0, 0.95)
  a9 = 1.0 - 1.0
  a4 = 1 + 0.95 * 1.0 - 0.5 + 0.95 * a9
  np.testing.assert_allclose(ret[0], [a4 + 0.5] * 5 + [1.0] * 5, atol=1e-6)


def test_bilevel_zero_reward_is_not_a_boundary():
  r = np.array([[0, 0, 0, 1.0]])  # two turns, ending at tokens 1 (reward exactly 0) and 3
  v = np.array([[0.1, 0.2, 0.3, 0.4]])
  m = np.ones((1, 4))
  ends = np.array([[False, True, False, True]])
  _, ret_q = _jit_bi(r, v, m, 1.0, 1.0, 0.95)
  _, ret_e = _jit_bi(r, v, m, 1.0, 1.0, 0.95, turn_ends=ends)
  # Quirk (default): only token 3 is an end, so tokens 0-2 form one token-level GAE with the
  # last turn: every return is r~_3 = 1. With the explicit end, turn 1 restarts at token 1.
  np.testing.assert_allclose(ret_q, [[1.0, 1.0, 1.0, 1.0]], atol=1e-6)
  np.testing.assert_allclose(ret_e, ref.bilevel_gae(r, v, m, ends=ends)[1], atol=1e-6)
  assert not np.allclose(ret_q, ret_e)


def test_masked_whiten_edge_cases():
  x = jnp.arange(4.0)
  with pytest.raises(ValueError, match="selects 1 elements"):
    gae_mod.masked_whiten(x, jnp.array([0, 1, 0, 0.0]))
  with pytest.raises(ValueError, match="selects 0 elements"):
    gae_mod.masked_whiten(x, jnp.zeros(4))
  # Under jit it cannot raise: documented result is all zeros.
  out = jax.jit(gae_mod.masked_whiten)(x, jnp.array([0, 1, 0, 0.0]))
  np.testing.assert_array_equal(out, np.zeros(4))
  m = np.array([1, 1, 0, 1.0])
  np.testing.assert_allclose(gae_mod.masked_whiten(x, m), ref.masked_whiten(np.arange(4.0), m), rtol=1e-5)


# --- EpisodeBatch kernels ------------------------------------------------------------------


def make_batch(seed, N=8, T=4, k=3):
  rng = np.random.default_rng(seed)
  reward = np.where(rng.random((N, T)) < 0.3, 0.0, rng.normal(size=(N, T)))
  valid = np.arange(T)[None, :] < rng.integers(1, T + 1, N)[:, None]
  reward[~valid] = 9.0  # ignored
  batch = from_turns(reward, valid, np.zeros(N, np.int32), tokens_per_turn=k)
  lm = np.asarray(batch.loss_mask).copy()
  lm[:, k - 1::k] *= rng.random((N, T)) > 0.5  # observation tokens at turn ends
  lm[0, :k] = 0.0  # a valid turn with no policy tokens: its reward never reaches a token
  values = rng.normal(size=lm.shape)
  batch = batch.replace(loss_mask=jnp.asarray(lm), values=jnp.asarray(values, jnp.float32))
  r_tok = ref.turn_rewards_on_tokens(reward, valid, lm, np.asarray(batch.turn_index))
  return batch, r_tok, values, lm


def test_token_reward_placement():
  batch, r_tok, _, _ = make_batch(0)
  np.testing.assert_allclose(jax.jit(gae_mod.token_rewards)(batch), r_tok, atol=1e-6)


def test_registered_token_kernels_match_loops():
  batch, r_tok, v, m = make_batch(1)
  out = jax.jit(lambda b: credit.get("gae")(b, gamma=0.9, lam=0.95))(batch)
  want_a, want_r = ref.gae(r_tok, v, m, 0.9, 0.95)
  np.testing.assert_allclose(out.token, want_a * m, **TOL)
  np.testing.assert_allclose(out.returns, want_r, **TOL)
  out = jax.jit(lambda b: credit.get("reinforce_pp")(b, gamma=0.9))(batch)
  want_a, want_r = ref.reinforce_pp(r_tok, m, 0.9)
  np.testing.assert_allclose(out.token, want_a, **TOL)
  np.testing.assert_allclose(out.returns, want_r, **TOL)
  for every in (False, True):
    out = jax.jit(lambda b: credit.get("bilevel_gae")(b, every_turn_is_boundary=every))(batch)
    ends = np.asarray(gae_mod._turn_end_tokens(batch)[0]) if every else None
    want_a, want_r = ref.bilevel_gae(r_tok, v, m, 1.0, 1.0, 0.95, ends=ends)
    np.testing.assert_allclose(out.token, want_a * m, **TOL)
    np.testing.assert_allclose(out.returns, want_r, **TOL)


def test_missing_values_is_a_clear_error():
  batch = make_batch(0)[0].replace(values=None)
  with pytest.raises(ValueError, match="batch.values"):
    credit.get("gae")(batch)


def test_gae_no_retrace():
  @jax.jit
  @chex.assert_max_traces(n=1)
  def run(batch):
    return credit.get("gae")(batch).token

  chex.clear_trace_counter()
  for seed in range(3):
    run(make_batch(seed)[0])
