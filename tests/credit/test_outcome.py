"""Outcome estimators (GRPO family, RLOO, REINFORCE++-baseline, ReMax, OPO, GPG) vs NumPy loops."""
import importlib.util
import pathlib

import chex
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from agent_rl import credit
from agent_rl.credit import outcome
from agent_rl.credit import verl_compat as vc
from agent_rl.rollout.batch import from_turns

_spec = importlib.util.spec_from_file_location("credit_outcome_numpy_ref",
                                               pathlib.Path(__file__).with_name("numpy_ref.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

TOL = dict(rtol=1e-4, atol=1e-4)


def make_case(seed, B=64, L=12, min_size=1):
  """Rows in shuffled groups (singletons, constant groups, mixed), padded masks with gaps."""
  rng = np.random.default_rng(seed)
  sizes = []
  while sum(sizes) < B:
    sizes.append(int(rng.integers(min_size, 6)))
  sizes[-1] -= sum(sizes) - B
  if sizes[-1] < min_size:
    sizes[-2] += sizes.pop()
  if min_size == 1:
    sizes = [1, 3] + sizes[2:] if len(sizes) > 2 else sizes
    sizes[-1] += B - sum(sizes)
  labels = rng.permutation(B)[:len(sizes)]
  gid = np.concatenate([[labels[k]] * n for k, n in enumerate(sizes)])
  scores = np.where(rng.random(B) < 0.5, rng.choice([0.0, 0.5, 1.0], B), rng.normal(size=B))
  const = gid == labels[1]  # one zero-variance group with a non-round value
  scores[const] = 0.3
  lengths = rng.integers(2, L + 1, B)
  m = (np.arange(L)[None, :] < lengths[:, None]).astype(np.float64)
  m[:, 1:-1] *= rng.random((B, L - 2)) > 0.2  # observation gaps
  m[np.arange(B), lengths - 1] = 1.0
  r = np.zeros((B, L))
  extra = np.where(const, 0.0, rng.normal(size=B) * 0.1)  # constant rows sum exactly in f32
  r[np.arange(B), lengths - 1] = scores - extra
  r[:, 0] += extra
  perm = rng.permutation(B)
  return r[perm], m[perm], gid[perm].astype(np.int32), rng


CASES = {
    "grpo": (lambda r, m, g: vc.grpo_outcome_advantage(r, m, g), lambda r, m, g: ref.grpo(r.sum(-1), g)),
    "dr_grpo": (lambda r, m, g: vc.grpo_outcome_advantage(r, m, g, norm_adv_by_std=False),
                lambda r, m, g: ref.grpo(r.sum(-1), g, norm=False)),
    "grpo_vectorized": (lambda r, m, g: vc.grpo_vectorized_outcome_advantage(r, m, g),
                        lambda r, m, g: ref.grpo_vectorized(r.sum(-1), g)),
    "grpo_vectorized_verl091": (lambda r, m, g: vc.grpo_vectorized_outcome_advantage(r, m, g, var_floor=0.0),
                                lambda r, m, g: ref.grpo_vectorized(r.sum(-1), g, var_floor=0.0)),
    "rloo": (lambda r, m, g: vc.rloo_outcome_advantage(r, m, g), lambda r, m, g: ref.rloo(r.sum(-1), g)),
    "rloo_vectorized": (lambda r, m, g: vc.rloo_vectorized_outcome_advantage(r, m, g),
                        lambda r, m, g: ref.rloo(r.sum(-1), g, singleton_raw=False)),
    "opo": (lambda r, m, g: vc.opo_outcome_advantage(r, m, g), lambda r, m, g: ref.opo(r.sum(-1), m.sum(-1), g)),
    "gpg": (lambda r, m, g: vc.gpg_outcome_advantage(r, m, g, f_norm=2.0),
            lambda r, m, g: ref.gpg(r.sum(-1), g, f_norm=2.0)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", [0])
def test_verl_entry_points_match_loops(name, seed):
  r, m, g, _ = make_case(seed)
  ours, ref_fn = CASES[name]
  adv, ret = ours(r, m, g)
  want = ref_fn(r, m, g)[:, None] * m
  np.testing.assert_allclose(adv, want, **TOL)
  np.testing.assert_allclose(ret, want, **TOL)


def test_grpo_passk_and_token_level_estimators():
  r, m, g, rng = make_case(3, min_size=2)
  tie = np.flatnonzero(g == g[0])  # a group with a tie at the maximum -> the first index wins
  r[tie] = 0.0
  r[tie, 0] = 1.0
  r[tie[-1], 0] = 0.5 if len(tie) > 2 else 1.0
  for norm in (True, False):
    adv, _ = vc.grpo_passk_outcome_advantage(r, m, g, norm_adv_by_std=norm)
    np.testing.assert_allclose(adv, ref.grpo_passk(r.sum(-1), g, norm=norm)[:, None] * m, **TOL)
  adv, _ = vc.reinforce_pp_baseline_outcome_advantage(r, m, g)
  np.testing.assert_allclose(adv, ref.reinforce_pp_baseline(r, m, g), **TOL)
  b = rng.normal(size=r.shape[0])
  adv, ret = vc.remax_outcome_advantage(r, b, m)
  want_a, want_r = ref.remax(r, b, m)
  np.testing.assert_allclose(adv, want_a, **TOL)
  np.testing.assert_allclose(ret, want_r, **TOL)


def test_edge_cases():
  s = jnp.array([2.5, 0.3, 0.3, 0.3, 1.0, 3.0])
  g = jnp.array([0, 1, 1, 1, 2, 2])
  a = outcome.grpo_scores(s, g, 6)
  assert float(a[0]) == pytest.approx(2.5 / (1 + 1e-6))  # singleton: raw score, not 0
  assert np.all(np.asarray(a[1:4]) == 0.0)  # zero-variance group: exactly 0
  assert np.all(np.asarray(outcome.grpo_scores(s, g, 6, norm_by_std=False)[1:4]) == 0.0)
  assert np.all(np.asarray(outcome.grpo_vectorized_scores(s, g, 6)[1:4]) == 0.0)
  assert float(outcome.rloo_scores(s, g, 6, singleton="raw")[0]) == 2.5
  assert float(outcome.rloo_scores(s, g, 6, singleton="zero")[0]) == 0.0
  np.testing.assert_allclose(outcome.rloo_scores(s, g, 6)[4:], [-2.0, 2.0])
  with pytest.raises(ValueError, match="rloo singleton"):
    outcome.rloo_scores(s, g, 6, singleton="none")
  with pytest.raises(ValueError, match="at least 2 samples"):
    outcome.grpo_passk_scores(s, g, 6)
  # Under jit a singleton cannot raise: it gets 0; other groups are unaffected.
  pk = jax.jit(outcome.grpo_passk_scores, static_argnums=2)(s, g, 6)
  assert float(pk[0]) == 0.0 and float(pk[5]) > 0 and float(pk[4]) == 0.0
  # A padding row (weight 0) joins no statistic and gets 0.
  w = jnp.array([1, 1, 1, 1, 1, 0.0])
  aw = outcome.grpo_scores(s, g, 6, w)
  assert float(aw[5]) == 0.0 and float(aw[4]) == pytest.approx(1.0 / (1 + 1e-6))
  with pytest.raises(ValueError, match="index must be"):
    vc.grpo_outcome_advantage(jnp.ones((3, 2)), jnp.ones((3, 2)), jnp.array([0.0, 1.0, 1.0]))


# --- EpisodeBatch kernels ------------------------------------------------------------------


def make_batch(seed, N=24, T=4, gid=None):
  rng = np.random.default_rng(seed)
  reward = np.where(rng.random((N, T)) < 0.5, rng.choice([0.0, 1.0], (N, T)), rng.normal(size=(N, T)))
  n_turns = rng.integers(1, T + 1, N)
  n_turns[5] = 0  # a padding episode
  valid = np.arange(T)[None, :] < n_turns[:, None]
  reward[~valid] = 7.0  # must be ignored
  if gid is None:
    gid = rng.integers(0, 6, N).astype(np.int32)
    gid[0], gid[1:4] = 20, 21  # a singleton and a zero-variance group
    const = slice(1, 4)
  else:
    const = slice(8, 12)
  reward[const] = 0.0
  reward[const, 0] = 0.3
  valid[const, 0] = True
  batch = from_turns(reward, valid, gid, tokens_per_turn=3)
  lm = np.asarray(batch.loss_mask).copy()
  lm[:, 2::3] *= rng.random((N, T)) > 0.5  # some turns end with an observation token
  return batch.replace(loss_mask=jnp.asarray(lm)), reward, valid, gid, rng


def _ref_turn(fn, reward, valid, gid, *extra):
  keep = valid.any(1)
  s = (reward * valid).sum(1)
  a = np.zeros(len(s))
  a[keep] = fn(s[keep], gid[keep], *[e[keep] for e in extra])
  return a[:, None] * valid


KERNELS = {
    "grpo": ({}, ref.grpo), "dr_grpo": ({}, lambda s, g: ref.grpo(s, g, norm=False)),
    "grpo_vectorized": ({}, ref.grpo_vectorized), "rloo": ({}, ref.rloo),
    "rloo_vectorized": ({}, lambda s, g: ref.rloo(s, g, singleton_raw=False)),
    "gpg": ({"f_norm": 0.5}, lambda s, g: ref.gpg(s, g, f_norm=0.5)),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_registered_kernels_match_loops(name):
  batch, reward, valid, gid, _ = make_batch(0)
  kw, fn = KERNELS[name]
  out = jax.jit(lambda b: credit.get(name)(b, **kw))(batch)
  assert out.token is None
  np.testing.assert_allclose(out.turn, _ref_turn(fn, reward, valid, gid), **TOL)


def test_registered_length_and_token_kernels():
  batch, reward, valid, gid, rng = make_batch(1)
  lm, ti = np.asarray(batch.loss_mask), np.asarray(batch.turn_index)
  lengths = np.array([sum(lm[i, l] for l in range(lm.shape[1]) if ti[i, l] >= 0 and valid[i, ti[i, l]])
                      for i in range(lm.shape[0])])
  np.testing.assert_allclose(credit.get("opo")(batch).turn, _ref_turn(lambda s, g, l: ref.opo(s, l, g), reward, valid, gid, lengths), **TOL)
  # REINFORCE++-baseline: whitening over the loss-mask tokens of the broadcast advantage.
  keep = valid.any(1)
  a = np.zeros(len(gid))
  a[keep] = ref.group_centered((reward * valid).sum(1)[keep], gid[keep])
  tok_valid = np.where(ti >= 0, valid[np.arange(len(gid))[:, None], np.clip(ti, 0, None)], False) * lm
  want = ref.masked_whiten(a[:, None] * tok_valid, tok_valid) * tok_valid
  got = credit.token_advantages(credit.get("reinforce_pp_baseline")(batch), batch.turn_index, batch.loss_mask)
  np.testing.assert_allclose(got, want, **TOL)
  # ReMax: each turn sees its own and later valid rewards, minus the greedy baseline.
  b = rng.normal(size=len(gid))
  n, t = batch.valid.shape
  col = jnp.asarray(np.broadcast_to(b[:, None], (n, t)), jnp.float32)  # the env-free extra
  out = credit.get("remax")(batch.replace(extras={"baseline_return": col}))
  rv = reward * valid
  want_g = np.array([[rv[i, t:].sum() for t in range(rv.shape[1])] for i in range(len(b))])
  np.testing.assert_allclose(out.turn, (want_g - b[:, None]) * valid, **TOL)
  np.testing.assert_allclose(out.returns, want_g * valid, **TOL)
  with pytest.raises(ValueError, match="baseline_return"):
    credit.get("remax")(batch)  # no baseline rollout attached


def test_registered_passk():
  gid = np.arange(24, dtype=np.int32) // 4  # groups of 4; group 1 holds the padding episode
  batch, reward, valid, gid, _ = make_batch(2, gid=gid)
  out = credit.get("grpo_passk")(batch)
  np.testing.assert_allclose(out.turn, _ref_turn(ref.grpo_passk, reward, valid, gid), **TOL)
  assert np.all(np.asarray(out.turn[8:12]) == 0.0)  # zero-variance group


# --- properties ----------------------------------------------------------------------------

B = 16
_JIT = {
    "grpo": jax.jit(lambda s, g, l: outcome.grpo_scores(s, g, B)),
    "dr_grpo": jax.jit(lambda s, g, l: outcome.grpo_scores(s, g, B, norm_by_std=False)),
    "grpo_vectorized": jax.jit(lambda s, g, l: outcome.grpo_vectorized_scores(s, g, B)),
    "rloo": jax.jit(lambda s, g, l: outcome.rloo_scores(s, g, B)),
    "rloo_vectorized": jax.jit(lambda s, g, l: outcome.rloo_scores(s, g, B, singleton="zero")),
    "opo": jax.jit(lambda s, g, l: outcome.opo_scores(s, l, g, B)),
    "gpg": jax.jit(lambda s, g, l: outcome.gpg_scores(s, g, B)),
    "reinforce_pp_baseline": jax.jit(lambda s, g, l: outcome.reinforce_pp_baseline_scores(s, g, B)),
}
_score = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-4, 4, allow_nan=False, width=32))
_case = st.tuples(st.lists(_score, min_size=B, max_size=B), st.lists(st.integers(0, 4), min_size=B, max_size=B),
                  st.lists(st.integers(1, 9), min_size=B, max_size=B))


@settings(max_examples=30, deadline=None)
@given(_case, st.permutations(range(B)), st.permutations(range(B)))
def test_permutation_invariance(case, row_perm, label_perm):
  s, g, l = (np.array(x) for x in case)
  s = s.astype(np.float32)
  p, relabel = np.array(row_perm), np.array(label_perm)
  for name, fn in _JIT.items():
    base = np.asarray(fn(s, g, l))
    moved = np.asarray(fn(s[p], relabel[g[p]], l[p]))
    np.testing.assert_allclose(moved, base[p], rtol=1e-5, atol=1e-5, err_msg=name)


@settings(max_examples=30, deadline=None)
@given(_case, st.floats(-3, 3, allow_nan=False, width=32))
def test_constant_shift_invariance(case, c):
  s, g, l = (np.array(x) for x in case)
  g = g % 2 * 2  # labels {0, 2}, each with at least two members
  g[:2], g[2:4] = 0, 2
  s = s.astype(np.float32)
  for name in ("grpo", "dr_grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "opo"):
    np.testing.assert_allclose(_JIT[name](s + np.float32(c), g, l), _JIT[name](s, g, l), rtol=1e-3, atol=2e-3,
                               err_msg=name)


@settings(max_examples=20, deadline=None)
@given(st.floats(-4, 4, allow_nan=False, width=32), st.lists(st.integers(0, 3), min_size=B, max_size=B))
def test_identical_rewards_give_zero(v, g):
  g = np.array(g)
  g = np.where(np.bincount(g, minlength=10)[g] < 2, 9, g)  # singletons join label 9 ...
  if np.sum(g == 9) == 1:
    g[g == 9] = g[g != 9][0]  # ... or another group if only one was left over
  s = np.full(B, v, np.float32)
  l = np.arange(1, B + 1)
  counts = np.bincount(g, minlength=16)
  assert counts[g].min() >= 2
  for name, fn in _JIT.items():
    assert np.all(np.asarray(fn(s, g, l)) == 0.0), name


def test_no_retrace_across_batches():
  @jax.jit
  @chex.assert_max_traces(n=1)
  def run(batch):
    return credit.get("grpo")(batch).turn

  chex.clear_trace_counter()
  for seed in range(3):
    batch = make_batch(seed)[0]
    run(batch)
