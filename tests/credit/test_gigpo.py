"""GiGPO kernel vs the row/dict reference (tests/credit/ref_turns.py), plus properties."""
import chex
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import ref_turns as ref
from agent_rl import credit
from agent_rl.credit import gigpo as gg
from agent_rl.rollout.batch import from_turns

SIZES = [1, 4, 3, 5, 2, 4]  # a singleton group; group 2 is made zero-variance
T = 7


def make(seed, sizes=SIZES, copy_group=2, **kw):
  f, gid = ref.random_walk_batch(np.random.default_rng(seed), sizes, T, copy_group=copy_group, **kw)
  fields = {k: v for k, v in f.items() if k not in ("reward", "valid")}
  return f, gid, from_turns(f["reward"], f["valid"], gid, **fields)


@pytest.mark.parametrize("seed,norm,cross_steps", [
    (0, "mean_norm", True), (1, "mean_std_norm", True), (2, "mean_norm", False),
    (3, "mean_std_norm", False)])
def test_gigpo_matches_reference(seed, norm, cross_steps):
  f, gid, b = make(seed)
  got = credit.get("gigpo")(b, norm=norm, cross_steps=cross_steps).turn
  want = ref.gigpo(f, gid, mode=norm, cross_steps=cross_steps)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)
  assert np.all(np.asarray(got)[~f["valid"]] == 0)


def test_gigpo_step_weight_gamma_penalty():
  f, gid, b = make(5)
  got = gg.gigpo(b, gamma=0.8, step_weight=0.5, invalid_penalty=0.3).turn
  want = ref.gigpo(f, gid, gamma=0.8, w=0.5, penalty=0.3)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_edge_cases_singletons_and_zero_variance():
  f, gid, b = make(3)
  a_e = np.asarray(gg.episode_advantage(b, norm="mean_std_norm", cross_steps=False, invalid_penalty=0.0))
  # Singleton group (episode 0), trajectory-once: mu = 0, sigma = 1 -> A^E = raw return.
  v0 = f["valid"][0]
  np.testing.assert_allclose(a_e[0][v0], f["reward"][0][v0].sum(), rtol=1e-6)
  # Zero-variance group 2: identical episodes -> exactly 0.
  rows = gid == 2
  assert np.all(a_e[rows] == 0.0)
  # A state seen once in its group has A^S = 0 (singleton cluster).
  g = np.asarray(gg.discounted_returns(b.reward, b.valid, 0.95))
  a_s = np.asarray(gg.step_advantage(g, b, norm="mean_norm"))
  counts = {}
  for i, t in ref.rows_of(f["valid"]):
    key = (gid[i], int(f["state_hash"][i, t]))
    counts[key] = counts.get(key, 0) + 1
  for i, t in ref.rows_of(f["valid"]):
    if counts[(gid[i], int(f["state_hash"][i, t]))] == 1:
      assert a_s[i, t] == 0.0


def test_bad_norm_raises():
  _, _, b = make(0)
  with pytest.raises(ValueError, match="norm"):
    gg.gigpo(b, norm="zscore")


def test_no_retrace():
  def fn(b):
    return gg.gigpo(b, norm="mean_std_norm")

  traced = jax.jit(chex.assert_max_traces(fn, n=1))
  for seed in range(3):
    _, _, b = make(seed)
    traced(b).turn.block_until_ready()


_jit_gigpo = jax.jit(gg.gigpo, static_argnames=("norm", "cross_steps"))


def _permute(f, gid, perm, relabel):
  f2 = {k: v[perm] for k, v in f.items()}
  return f2, relabel[gid[perm]]


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), perm_seed=st.integers(0, 10_000),
       norm=st.sampled_from(["mean_norm", "mean_std_norm"]))
def test_permuting_episodes_permutes_advantages(seed, perm_seed, norm):
  f, gid = ref.random_walk_batch(np.random.default_rng(seed), SIZES, T, copy_group=2)
  r = np.random.default_rng(perm_seed)
  perm = r.permutation(len(gid))  # within and across groups
  relabel = r.permutation(len(gid)).astype(np.int32)[: len(SIZES)]  # new group labels
  f2, gid2 = _permute(f, gid, perm, relabel)
  mk = lambda ff, g: from_turns(ff["reward"], ff["valid"], g,
                                **{k: v for k, v in ff.items() if k not in ("reward", "valid")})
  a = np.asarray(_jit_gigpo(mk(f, gid), norm=norm).turn)
  a2 = np.asarray(_jit_gigpo(mk(f2, gid2), norm=norm).turn)
  np.testing.assert_allclose(a2, a[perm], rtol=1e-5, atol=1e-5)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), value=st.floats(-5, 5, width=32),
       cross_steps=st.booleans())
def test_identical_returns_give_zero_episode_advantage(seed, value, cross_steps):
  f, gid = ref.random_walk_batch(np.random.default_rng(seed), SIZES[1:], T)
  f["reward"][:] = 0.0
  last = f["valid"].sum(1) - 1
  f["reward"][np.arange(len(gid)), last] = value  # same return for every episode
  f["valid_action"][:] = True
  b = from_turns(f["reward"], f["valid"], gid,
                 **{k: v for k, v in f.items() if k not in ("reward", "valid")})
  a_e = gg.episode_advantage(b, norm="mean_std_norm", cross_steps=cross_steps)
  assert np.all(np.asarray(a_e) == 0.0)
