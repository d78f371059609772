"""KL estimators, straight-through "+" variants, KL reward penalty and actor loss (§1.8, §1.9)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import losses_np_ref as ref
from agent_rl import losses
from losses_testutil import make_batch, x64

KINDS = ["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"]


def _ref_map(lp, rlp, kind):
  return np.vectorize(lambda a, b: ref.kl_estimate(a, b, kind), otypes=[float])(lp, rlp)


def test_estimators_match_reference_including_clamps():
  d = make_batch(0)
  lp = d["lp"].copy()
  rlp = d["old"].copy()
  rlp[2, :3] = lp[2, :3] + np.array([25.0, -30.0, 3.0])  # exp clamp (±20) and value clamp (10)
  out = jax.jit(lambda a, b: {k: losses.kl_penalty(a, b, k) for k in KINDS + [k + "+" for k in KINDS]})(
      jnp.asarray(lp, jnp.float32), jnp.asarray(rlp, jnp.float32))
  for kind in KINDS:
    want = _ref_map(lp, rlp, kind)
    np.testing.assert_allclose(out[kind], want, rtol=2e-5, atol=2e-5, err_msg=kind)
    np.testing.assert_allclose(out[kind + "+"], want, rtol=2e-5, atol=2e-5, err_msg=kind + "+")
  assert float(out["k3"][2, 0]) == 10.0


def test_plus_variants_take_k2_gradient():
  d = make_batch(1, b=3, l=4)
  with x64():
    lp, rlp = jnp.asarray(d["lp"]), jnp.asarray(d["old"])
    grads = {k: jax.jit(jax.grad(lambda x, k=k: jnp.sum(losses.kl_penalty(x, rlp, k))))(lp)
             for k in ["k1+", "abs+", "k3+", "k2+", "k1", "k3"]}
  k2_grad = d["lp"] - d["old"]  # d/dlogπ of ½(logπ − logπref)²
  for k in ["k1+", "abs+", "k3+", "k2+"]:
    np.testing.assert_allclose(grads[k], k2_grad, rtol=1e-12, atol=1e-12, err_msg=k)
  np.testing.assert_allclose(grads["k1"], np.ones_like(k2_grad))
  u = np.clip(d["old"] - d["lp"], -20, 20)
  k3 = np.exp(u) - u - 1
  want_k3 = np.where(np.abs(k3) < 10, -(np.exp(u) - 1), 0.0)
  np.testing.assert_allclose(grads["k3"], want_k3, rtol=1e-10, atol=1e-12)


def test_kl_errors():
  x = jnp.zeros((2, 3))
  with pytest.raises(ValueError, match="distill.logits_kl"):
    losses.kl_penalty(x, x, "full")
  with pytest.raises(KeyError, match="low_var_kl"):
    losses.kl_penalty(x, x, "k4")


def test_kl_loss():
  d = make_batch(2)
  f = lambda k: jnp.asarray(d[k], jnp.float32)
  scores = np.zeros_like(d["lp"])
  scores[:, -1] = 1.0
  loss = jax.jit(lambda a, b, m: losses.kl_loss(a, b, m, kind="k3", loss_agg_mode="seq-mean-token-mean"))(
      f("lp"), f("old"), f("m"))
  k3 = _ref_map(d["lp"], d["old"], "k3")
  np.testing.assert_allclose(float(loss), ref.agg(k3, d["m"], "seq-mean-token-mean"), rtol=2e-5)


def test_actor_loss_combines_terms():
  d = make_batch(3)
  f = lambda k: jnp.asarray(d[k], jnp.float32)
  ent = np.abs(d["adv"]) + 0.1
  ref_lp = d["old"] - 0.2

  def run(lp, old, adv, m, ent, rlp):
    return losses.actor_loss(lp, old, adv, m, policy_loss="vanilla", loss_agg_mode="seq-mean-token-sum",
                             entropy=ent, entropy_coef=0.01, ref_logprobs=rlp, kl_coef=0.1,
                             kl_type="low_var_kl", clip_ratio_high=0.28)

  loss, met = jax.jit(run)(f("lp"), f("old"), f("adv"), f("m"), jnp.asarray(ent, jnp.float32),
                           jnp.asarray(ref_lp, jnp.float32))
  mode = "seq-mean-token-sum"
  pg, _ = ref.vanilla(d["lp"], d["old"], d["adv"], d["m"], hi=0.28, mode=mode)
  h = ref.agg(ent, d["m"], mode)
  kl = ref.agg(_ref_map(d["lp"], ref_lp, "k3"), d["m"], mode)
  np.testing.assert_allclose(float(loss), pg - 0.01 * h + 0.1 * kl, rtol=2e-5, atol=2e-6)
  for k, v in (("pg_loss", pg), ("entropy", h), ("kl_loss", kl)):
    np.testing.assert_allclose(float(met[k]), v, rtol=2e-5, atol=2e-6, err_msg=k)
  assert "clipfrac" in met
  with pytest.raises(ValueError, match="entropy"):
    losses.actor_loss(f("lp"), f("old"), f("adv"), f("m"), entropy_coef=0.01)
  with pytest.raises(ValueError, match="ref_logprobs"):
    losses.actor_loss(f("lp"), f("old"), f("adv"), f("m"), kl_coef=0.001)
