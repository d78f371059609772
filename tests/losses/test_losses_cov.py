"""Clip-Cov / KL-Cov (ALGORITHMS.md §1.9) vs loop references; selection counts and randomness."""
import math

import jax
import jax.numpy as jnp
import numpy as np

import losses_np_ref as ref
from agent_rl import losses
from agent_rl.losses.cov import clip_cov_selection
from losses_testutil import make_batch

F = lambda x: jnp.asarray(x, jnp.float32)
WIDE = dict(clip_cov_lb=-10.0, clip_cov_ub=10.0)


def _batch(seed, b=6, l=9):
  d = make_batch(seed, b=b, l=l, spread=0.3)
  d["adv"] *= 3.0  # spread the covariances so the (lb, ub) window holds some tokens
  return d


def test_clip_cov_selection_count_subset_and_determinism():
  d = _batch(0)
  sel_fn = jax.jit(lambda key, r, lb, ub: clip_cov_selection(
      F(d["lp"]), F(d["old"]), F(d["adv"]), F(d["m"]), key, clip_cov_ratio=r, clip_cov_lb=lb,
      clip_cov_ub=ub))
  n_tok = d["m"].sum()
  for r, lb, ub in [(2e-4, 1.0, 5.0), (0.2, -10.0, 10.0), (0.9, -10.0, 10.0), (0.5, 0.5, 5.0),
                    (0.5, 50.0, 60.0)]:
    cand = ref.clip_cov_candidates(d["lp"], d["old"], d["adv"], d["m"], lb=lb, ub=ub)
    sel = np.asarray(sel_fn(jax.random.PRNGKey(1), r, lb, ub))
    k = min(max(math.floor(r * n_tok), 1), cand.sum())
    assert sel.sum() == k, (r, lb, ub)
    assert not np.any(sel & ~cand)
    np.testing.assert_array_equal(sel, np.asarray(sel_fn(jax.random.PRNGKey(1), r, lb, ub)))
  assert ref.clip_cov_candidates(d["lp"], d["old"], d["adv"], d["m"], lb=0.5).sum() > 2
  a, b = (np.asarray(sel_fn(jax.random.PRNGKey(s), 0.2, -10.0, 10.0)) for s in (2, 3))
  assert a.sum() == b.sum() and not np.array_equal(a, b)


def test_clip_cov_selection_is_uniform_over_candidates():
  d = _batch(1, b=3, l=5)
  cand = ref.clip_cov_candidates(d["lp"], d["old"], d["adv"], d["m"], **{"lb": -10.0, "ub": 10.0})
  n_keys, r = 2000, 0.2
  k = min(max(math.floor(r * d["m"].sum()), 1), cand.sum())
  keys = jax.random.split(jax.random.PRNGKey(0), n_keys)
  sel = jax.jit(jax.vmap(lambda key: clip_cov_selection(
      F(d["lp"]), F(d["old"]), F(d["adv"]), F(d["m"]), key, clip_cov_ratio=r, **WIDE)))(keys)
  freq = np.asarray(sel).mean(0)[cand]
  p = k / cand.sum()
  assert 0 < p < 1
  np.testing.assert_allclose(freq, p, atol=5 * math.sqrt(p * (1 - p) / n_keys))


def test_clip_cov_loss_matches_reference():
  d = _batch(2)
  kw = dict(clip_cov_ratio=0.2, clip_ratio_high=0.28, **WIDE)
  key = jax.random.PRNGKey(7)

  def run(lp, old, adv, m, w):
    outs = [losses.get("clip_cov")(lp, old, adv, m, key=key, weights=w, loss_agg_mode=mode, **kw)
            for mode in losses.AGG_MODES]
    return outs, clip_cov_selection(lp, old, adv, m, key, clip_cov_ratio=0.2, clip_ratio_high=0.28,
                                    **WIDE)

  outs, sel = jax.jit(run)(*(F(d[k]) for k in ("lp", "old", "adv", "m", "w")))
  sel = np.asarray(sel)
  assert sel.sum() >= 2
  for mode, (loss, met) in zip(losses.AGG_MODES, outs):
    want, want_met = ref.clip_cov(d["lp"], d["old"], d["adv"], d["m"], sel, d["w"], hi=0.28, mode=mode)
    np.testing.assert_allclose(float(loss), want, rtol=2e-5, atol=2e-6)
    for k, v in want_met.items():
      np.testing.assert_allclose(float(met[k]), v, rtol=2e-5, atol=2e-6, err_msg=k)
    assert float(met["cov_selected"]) == sel.sum()


def test_kl_cov_matches_reference():
  d = _batch(3)
  for ratio in (2e-4, 0.15):
    def run(lp, old, adv, m, w):
      return [losses.get("kl_cov")(lp, old, adv, m, weights=w, loss_agg_mode=mode,
                                   kl_cov_ratio=ratio, ppo_kl_coef=0.7)
              for mode in losses.AGG_MODES]
    outs = jax.jit(run)(*(F(d[k]) for k in ("lp", "old", "adv", "m", "w")))
    for mode, (loss, met) in zip(losses.AGG_MODES, outs):
      want, want_met, sel = ref.kl_cov(d["lp"], d["old"], d["adv"], d["m"], ratio, 0.7, d["w"], mode)
      assert sel.sum() == max(1, math.floor(d["m"].sum() * ratio))
      np.testing.assert_allclose(float(loss), want, rtol=2e-5, atol=2e-6)
      for k, v in want_met.items():
        np.testing.assert_allclose(float(met[k]), v, rtol=2e-5, atol=2e-6, err_msg=k)
