"""The objective's terms against plain NumPy: each term's value (and the policy gradient's
importance weights), the sum over enabled terms, and bad term names / missing inputs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.objective import TERMS, Minibatch, build_objective, register_term
from agent_rl.train.config import base_config
from agent_rl.train.policy import TokenStats


def _case(seed=0, b=3, l=7):
  r = np.random.default_rng(seed)
  f = lambda *s: r.normal(size=s).astype(np.float32)
  mask = (r.random((b, l)) < 0.7).astype(np.float32)
  mask[:, 0] = 0
  mb = Minibatch(tokens=jnp.zeros((b, l), jnp.int32), position=jnp.zeros((b, l), jnp.int32),
                 attention_mask=jnp.ones((b, l), bool), loss_mask=jnp.asarray(mask),
                 turn_index=jnp.zeros((b, l), jnp.int32), old_logprobs=jnp.asarray(-np.abs(f(b, l))),
                 advantages=jnp.asarray(f(b, l)), returns=jnp.asarray(f(b, l)),
                 old_values=jnp.asarray(f(b, l)), ref_logprobs=jnp.asarray(-np.abs(f(b, l))),
                 teacher_logprobs=jnp.asarray(-np.abs(f(b, l))),
                 sample_logprobs=jnp.asarray(-np.abs(f(b, l))))
  stats = TokenStats(jnp.asarray(-np.abs(f(b, l))), jnp.asarray(np.abs(f(b, l))), jnp.asarray(f(b, l)))
  return stats, mb, mask


def _np(x):
  return np.asarray(x, np.float64)


def _config(**kw):
  c = base_config()
  for k, v in kw.items():
    blk, f = k.split("__")
    c[blk][f] = v
  return c


def _ppo(lp, old, adv, mask, w=None, eps=0.2):
  ratio = np.exp(lp - old)
  l = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps, 1 + eps))
  if w is not None:
    l = l * w
  return (l * mask).sum() / mask.sum()


def test_each_term_matches_numpy():
  stats, mb, m = _case()
  lp, ent, v = map(_np, stats)
  old, adv, ret, oldv, ref, teach = map(_np, (mb.old_logprobs, mb.advantages, mb.returns,
                                              mb.old_values, mb.ref_logprobs, mb.teacher_logprobs))
  c = _config(loss__entropy_coef=0.01, loss__kl_coef=0.1, loss__kl_type="k1",
              loss__value_coef=0.5, loss__sft_coef=0.3, model__critic="shared",
              distill__coef=0.2, distill__teacher="x")
  total, met = build_objective(c)(stats, mb, jax.random.key(0))
  n = m.sum()
  pg = _ppo(lp, old, adv, m)
  ent_v = (ent * m).sum() / n
  kl = ((lp - ref) * m).sum() / n
  vclip = oldv + np.clip(v - oldv, -0.5, 0.5)
  vl = 0.5 * (np.maximum((v - ret) ** 2, (vclip - ret) ** 2) * m).sum() / n
  keep = m * (adv > 0)
  sft = -(lp * keep).sum() / keep.sum()
  dist = ((lp - teach) * m).sum() / n
  for k, want in [("loss/policy", pg), ("loss/entropy", ent_v), ("loss/kl_ref", kl),
                  ("loss/value", vl), ("loss/sft_aux", sft)]:
    np.testing.assert_allclose(float(met[k]), want, rtol=2e-5, err_msg=k)
  want = pg - 0.01 * ent_v + 0.1 * kl + 0.5 * vl + 0.3 * sft + 0.2 * dist
  np.testing.assert_allclose(float(total), want, rtol=2e-5)


def test_truncated_importance_weights():
  stats, mb, m = _case(1)
  lp, old, q, adv = map(_np, (stats.logprobs, mb.old_logprobs, mb.sample_logprobs, mb.advantages))
  for level in ("token", "sequence"):
    c = _config(loss__is_cap=1.5, loss__is_level=level, loss__terms="policy,is_correction")
    _, met = build_objective(c)(stats, mb, jax.random.key(0))
    lw = (old - q) * m
    if level == "sequence":
      lw = np.broadcast_to(lw.sum(1, keepdims=True), lw.shape)
    w = np.minimum(np.exp(lw), 1.5)
    np.testing.assert_allclose(float(met["loss/policy"]), _ppo(lp, old, adv, m, w), rtol=2e-5)
    np.testing.assert_allclose(float(met["loss/is_weight_mean"]), (w * m).sum() / m.sum(), rtol=1e-5)
  # off by default: the policy loss is unweighted
  _, met = build_objective(_config())(stats, mb, jax.random.key(0))
  np.testing.assert_allclose(float(met["loss/policy"]), _ppo(lp, old, adv, m), rtol=2e-5)
  assert "loss/is_weight_mean" not in met


def test_own_term_is_one_function_and_one_config_line():
  @register_term("entropy_sq_test", coef=lambda c: c.loss.term_kwargs.get("sq", 0.0))
  def entropy_sq(x, c):
    return jnp.sum(x.stats.entropy ** 2 * x.mask) / jnp.sum(x.mask), {}

  stats, mb, m = _case(2)
  c = _config(loss__terms="policy,entropy_sq_test")
  c.loss.term_kwargs.sq = 2.0
  total, met = build_objective(c)(stats, mb, jax.random.key(0))
  ent = _np(stats.entropy)
  want = float(met["loss/policy"]) + 2.0 * (ent ** 2 * m).sum() / m.sum()
  np.testing.assert_allclose(float(total), want, rtol=2e-5)


def test_bad_terms_are_named():
  with pytest.raises(ValueError, match="unknown loss term 'polcy'.*known:.*policy"):
    build_objective(_config(loss__terms="polcy,entropy"))
  stats, mb, _ = _case()
  c = _config(loss__kl_coef=0.1)
  with pytest.raises(ValueError, match="term 'kl' needs minibatch field.*ref_logprobs"):
    build_objective(c)(stats, mb._replace(ref_logprobs=None), jax.random.key(0))
  from agent_rl.train.config import validate
  with pytest.raises(ValueError, match="config.loss.is_level"):
    validate(_config(loss__is_level="episode"))
