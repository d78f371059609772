"""Bradley-Terry, PRM BCE, DPO and KTO against NumPy formulas: values, and gradients (autodiff
against NumPy's analytic gradient and central finite differences of the NumPy loss); the DPO /
KTO objective terms against the same formulas on interleaved preference rows."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.losses import preference as P
from agent_rl.objective import Minibatch, build_objective
from agent_rl.train.config import base_config
from agent_rl.train.policy import TokenStats
from tests.losses.losses_testutil import fd_grad, x64


def _ls(x):  # log sigmoid, stable
  return -np.logaddexp(0.0, -x)


def _sig(x):
  return 1.0 / (1.0 + np.exp(-x))


def np_bt(c, r, m, margin=0.0):
  return (-_ls(c - r - margin) * m).sum() / m.sum()


def np_bce(s, y, m):
  return (-(y * _ls(s) + (1 - y) * _ls(-s)) * m).sum() / m.sum()


def np_dpo(pc, pr, rc, rr, m, beta, eps=0.0):
  h = beta * ((pc - rc) - (pr - rr))
  return ((-(1 - eps) * _ls(h) - eps * _ls(-h)) * m).sum() / m.sum()


def np_kto(p, ref, d, m, beta, ld=1.0, lu=1.0, z0=None):
  r = p - ref
  if z0 is None:
    z0 = max((r * m).sum() / m.sum(), 0.0)
  per = np.where(d, ld * (1 - _sig(beta * (r - z0))), lu * (1 - _sig(beta * (z0 - r))))
  return (per * m).sum() / m.sum(), z0


def _rng(seed=0):
  return np.random.default_rng(seed)


def test_bradley_terry_value_grad_and_metrics():
  r = _rng(0)
  c, rj = r.normal(0, 2, 9), r.normal(0, 2, 9)
  m = (r.random(9) < 0.8).astype(np.float64)
  m[0] = 1
  with x64():
    loss, met = P.bradley_terry_loss(c, rj, m, margin=0.3)
    np.testing.assert_allclose(float(loss), np_bt(c, rj, m, 0.3), rtol=1e-12)
    np.testing.assert_allclose(float(met["accuracy"]), ((c > rj) * m).sum() / m.sum())
    g = jax.grad(lambda a, b: P.bradley_terry_loss(a, b, m, margin=0.3)[0], (0, 1))(c, rj)
    # d/dc -log sig(d) = -(1 - sig(d)) / n, the rejected side the negative.
    want = -(1 - _sig(c - rj - 0.3)) * m / m.sum()
    np.testing.assert_allclose(np.asarray(g[0]), want, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(g[1]), -want, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(g[0]), fd_grad(lambda a: np_bt(a, rj, m, 0.3), c),
                               atol=1e-8)


def test_bradley_terry_stable_at_large_margins_and_empty():
  loss, _ = P.bradley_terry_loss(jnp.array([-200.0]), jnp.array([200.0]))
  np.testing.assert_allclose(float(loss), 400.0, rtol=1e-6)
  loss, _ = P.bradley_terry_loss(jnp.ones(3), jnp.zeros(3), jnp.zeros(3))
  assert float(loss) == 0.0


def test_prm_bce_value_and_grad():
  r = _rng(1)
  s, y = r.normal(0, 2, (4, 5)), (r.random((4, 5)) < 0.4).astype(np.float64)
  m = (r.random((4, 5)) < 0.6).astype(np.float64)
  m[0, 0] = 1
  with x64():
    loss, met = P.prm_bce_loss(s, y, m)
    np.testing.assert_allclose(float(loss), np_bce(s, y, m), rtol=1e-12)
    np.testing.assert_allclose(float(met["accuracy"]), (((s > 0) == (y > 0.5)) * m).sum() / m.sum())
    g = jax.grad(lambda a: P.prm_bce_loss(a, y, m)[0])(s)
    np.testing.assert_allclose(np.asarray(g), (_sig(s) - y) * m / m.sum(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(g), fd_grad(lambda a: np_bce(a, y, m), s), atol=1e-8)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_dpo_value_grad_and_frozen_reference(eps):
  r = _rng(2)
  pc, pr, rc, rr = (-np.abs(r.normal(5, 2, 6)) for _ in range(4))
  m = np.array([1, 1, 0, 1, 1, 1.0])
  beta = 0.3
  with x64():
    loss, met = P.dpo_loss(pc, pr, rc, rr, m, beta=beta, label_smoothing=eps)
    np.testing.assert_allclose(float(loss), np_dpo(pc, pr, rc, rr, m, beta, eps), rtol=1e-12)
    h = beta * ((pc - rc) - (pr - rr))
    np.testing.assert_allclose(float(met["accuracy"]), ((h > 0) * m).sum() / m.sum())
    f = lambda a, b, c_, d: P.dpo_loss(a, b, c_, d, m, beta=beta, label_smoothing=eps)[0]
    g = jax.grad(f, (0, 1, 2, 3))(pc, pr, rc, rr)
    dh = (-(1 - eps) * (1 - _sig(h)) + eps * _sig(h)) * m / m.sum()
    np.testing.assert_allclose(np.asarray(g[0]), beta * dh, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(g[1]), -beta * dh, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(g[0]),
                               fd_grad(lambda a: np_dpo(a, pr, rc, rr, m, beta, eps), pc), atol=1e-8)
    assert not np.any(np.asarray(g[2])) and not np.any(np.asarray(g[3]))  # reference frozen


def test_kto_value_grad_and_reference_point():
  r = _rng(3)
  p, ref = -np.abs(r.normal(5, 2, 8)), -np.abs(r.normal(5, 2, 8))
  d = np.array([1, 0, 1, 1, 0, 0, 1, 0], bool)
  m = np.ones(8)
  beta, ld, lu = 0.5, 1.0, 1.33
  with x64():
    loss, met = P.kto_loss(p, ref, d, m, beta=beta, lambda_d=ld, lambda_u=lu)
    want, z0 = np_kto(p, ref, d, m, beta, ld, lu)
    np.testing.assert_allclose(float(loss), want, rtol=1e-12)
    np.testing.assert_allclose(float(met["kl"]), z0, rtol=1e-12, atol=1e-15)
    g = jax.grad(lambda a: P.kto_loss(a, ref, d, m, beta=beta, lambda_d=ld, lambda_u=lu)[0])(p)
    # z0 carries no gradient: the gradient of the NumPy loss with z0 held at its value.
    np.testing.assert_allclose(np.asarray(g), fd_grad(
        lambda a: np_kto(a, ref, d, m, beta, ld, lu, z0=z0)[0], p), atol=1e-8)
    # With mismatched-completion log-probs the reference point is their mean log-ratio.
    kp, kr = p[::-1] + 0.7, ref[::-1]
    loss2, met2 = P.kto_loss(p, ref, d, m, beta=beta, kl_policy=kp, kl_ref=kr)
    z = max((kp - kr).mean(), 0.0)
    np.testing.assert_allclose(float(met2["kl"]), z, rtol=1e-12)
    np.testing.assert_allclose(float(loss2), np_kto(p, ref, d, m, beta, z0=z)[0], rtol=1e-12)
  with pytest.raises(ValueError, match="kl_ref"):
    P.kto_loss(p, ref, d, kl_policy=p)


def test_sequence_logprobs_and_pair_rows():
  lp = np.array([[1.0, 2.0, np.nan], [3.0, 4.0, 5.0]])
  m = np.array([[1, 1, 0], [0, 1, 1]])
  np.testing.assert_allclose(np.asarray(P.sequence_logprobs(jnp.asarray(lp), m)), [3.0, 9.0])
  a, b = P.pair_rows(jnp.arange(6))
  np.testing.assert_array_equal(a, [0, 2, 4]) and np.testing.assert_array_equal(b, [1, 3, 5])
  with pytest.raises(ValueError, match="pairs"):
    P.pair_rows(jnp.arange(3))


def _pref_case(seed=0, rows=6, l=5):
  r = _rng(seed)
  lp, ref = -np.abs(r.normal(1, 1, (rows, l))), -np.abs(r.normal(1, 1, (rows, l)))
  mask = (r.random((rows, l)) < 0.7).astype(np.float32)
  mask[:, 0] = 0
  mask[:, 1] = 1
  adv = np.where(np.arange(rows)[:, None] % 3 == 0, 1.0, -1.0) * np.ones((rows, l))
  z = jnp.zeros((rows, l), jnp.int32)
  mb = Minibatch(tokens=z, position=z, attention_mask=jnp.ones((rows, l), bool),
                 loss_mask=jnp.asarray(mask), turn_index=z, old_logprobs=jnp.asarray(lp, jnp.float32),
                 advantages=jnp.asarray(adv, jnp.float32), ref_logprobs=jnp.asarray(ref, jnp.float32))
  stats = TokenStats(jnp.asarray(lp, jnp.float32), jnp.zeros((rows, l)), None)
  return stats, mb, lp, ref, mask, adv


def test_dpo_and_kto_terms_on_preference_rows():
  stats, mb, lp, ref, mask, adv = _pref_case()
  seq, sref = (lp * mask).sum(1), (ref * mask).sum(1)
  c = base_config()
  c.loss.terms = "dpo"
  c.loss.term_kwargs.dpo, c.loss.term_kwargs.dpo_beta = 2.0, 0.2
  total, met = build_objective(c)(stats, mb, jax.random.key(0))
  want = np_dpo(seq[0::2], seq[1::2], sref[0::2], sref[1::2], np.ones(3), 0.2)
  np.testing.assert_allclose(float(total), 2.0 * want, rtol=1e-5)
  np.testing.assert_allclose(float(met["loss/dpo"]), want, rtol=1e-5)
  c = base_config()
  c.loss.terms = "kto"
  c.loss.term_kwargs.kto, c.loss.term_kwargs.kto_beta = 1.0, 0.3
  total, met = build_objective(c)(stats, mb, jax.random.key(0))
  want, _ = np_kto(seq, sref, (adv * mask).sum(1) > 0, np.ones(6), 0.3)
  np.testing.assert_allclose(float(total), want, rtol=1e-5)


def test_preference_term_needs_reference_and_is_off_by_default():
  stats, mb, *_ = _pref_case()
  c = base_config()
  c.loss.terms = "policy,dpo"  # coefficient 0 (default): not computed
  build_objective(c)(stats, mb, jax.random.key(0))
  c.loss.terms, c.loss.term_kwargs.dpo = "dpo", 1.0
  with pytest.raises(ValueError, match="'dpo' needs minibatch field.*ref_logprobs"):
    build_objective(c)(stats, mb._replace(ref_logprobs=None), jax.random.key(0))
