"""Value loss (§1.11), masked-NLL SFT and distillation losses vs loop references."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import losses_np_ref as ref
from agent_rl import losses
from losses_testutil import fd_grad, make_batch, x64

F = lambda x: jnp.asarray(x, jnp.float32)


def test_value_loss_matches_reference_and_fd_gradient():
  rng = np.random.default_rng(0)
  v, r, old = rng.normal(0, 1, (3, 3, 5))
  m = (rng.random((3, 5)) < 0.8).astype(float)
  m[0] = 0
  for mode in ("token-mean", "seq-mean-token-mean"):
    loss, met = jax.jit(lambda *a: losses.value_loss(*a, cliprange_value=0.3, loss_agg_mode=mode))(
        F(v), F(r), F(old), F(m))
    lm = np.zeros_like(v)
    cf = np.zeros_like(v)
    for idx in np.ndindex(v.shape):
      vc = ref.clamp(v[idx], old[idx] - 0.3, old[idx] + 0.3)
      lm[idx] = max((v[idx] - r[idx]) ** 2, (vc - r[idx]) ** 2)
      cf[idx] = float((vc - r[idx]) ** 2 > (v[idx] - r[idx]) ** 2)
    np.testing.assert_allclose(float(loss), 0.5 * ref.agg(lm, m, mode), rtol=2e-5)
    np.testing.assert_allclose(float(met["vf_clipfrac"]), ref.mmean(cf, m), rtol=2e-5)
  with x64():
    fn = jax.jit(lambda x: losses.value_loss(x, jnp.asarray(r), jnp.asarray(old), jnp.asarray(m))[0])
    np.testing.assert_allclose(jax.grad(fn)(jnp.asarray(v)), fd_grad(fn, v), rtol=1e-6, atol=1e-9)


def test_sft_loss_from_logits():
  rng = np.random.default_rng(1)
  logits = rng.normal(0, 2, (2, 4, 9))
  y = rng.integers(0, 9, (2, 4))
  m = np.array([[1, 1, 0, 0], [0, 1, 1, 1]], float)
  loss, met = jax.jit(lambda *a: losses.sft_loss_from_logits(*a, loss_agg_mode="seq-mean-token-mean"))(
      F(logits), jnp.asarray(y), F(m))
  nll = np.array([[-ref.log_softmax(logits[i, t])[y[i, t]] for t in range(4)] for i in range(2)])
  np.testing.assert_allclose(float(loss), ref.agg(nll, m, "seq-mean-token-mean"), rtol=1e-5)
  np.testing.assert_allclose(float(met["nll"]), ref.mmean(nll, m), rtol=1e-5)
  assert float(met["num_tokens"]) == 5


def test_logits_kl_exact_and_gradients():
  rng = np.random.default_rng(2)
  zs, zt = rng.normal(0, 2, (2, 2, 3, 7))
  m = np.array([[1, 1, 0], [1, 0, 1]], float)
  for direction in ("forward", "reverse"):
    for temp in (1.0, 2.0):
      got = jax.jit(lambda a, b: losses.logits_kl(a, b, direction=direction, temperature=temp))(F(zs), F(zt))
      for idx in np.ndindex(2, 3):
        ls, lt = ref.log_softmax(zs[idx] / temp), ref.log_softmax(zt[idx] / temp)
        p, q = (lt, ls) if direction == "forward" else (ls, lt)
        want = sum(math.exp(a) * (a - b) for a, b in zip(p, q))
        assert float(got[idx]) == pytest.approx(want, abs=1e-5)
  with x64():
    for direction in ("forward", "reverse"):
      fn = jax.jit(lambda z: losses.logits_kl_loss(z, jnp.asarray(zt), jnp.asarray(m),
                                                   direction=direction)[0])
      g = jax.grad(fn)(jnp.asarray(zs))
      np.testing.assert_allclose(g, fd_grad(fn, zs), rtol=1e-5, atol=1e-8)
      if direction == "forward":  # d KL(pT‖pθ)/dz = pθ − pT on each counted token, / Σm
        ps = np.exp(zs - zs.max(-1, keepdims=True))
        ps /= ps.sum(-1, keepdims=True)
        pt = np.exp(zt - zt.max(-1, keepdims=True))
        pt /= pt.sum(-1, keepdims=True)
        np.testing.assert_allclose(g, (ps - pt) * m[..., None] / m.sum(), rtol=1e-8, atol=1e-12)


def test_sampled_kl_values_and_gradients():
  d = make_batch(4, b=3, l=5)
  t = d["old"]  # teacher log-probs
  n = d["m"].sum()
  with x64():
    out = {}
    for direction in ("reverse", "forward"):
      fn = lambda lp, direction=direction: losses.sampled_kl_loss(
          lp, jnp.asarray(t), jnp.asarray(d["m"]), direction=direction)[0]
      out[direction] = jax.jit(jax.value_and_grad(fn))(jnp.asarray(d["lp"]))
    adv = losses.reverse_kl_advantage(jnp.asarray(d["lp"]), jnp.asarray(t), jnp.asarray(d["m"]))
  gap = d["lp"] - t
  val, g = out["reverse"]
  np.testing.assert_allclose(float(val), ref.agg(gap, d["m"], "token-mean"), rtol=1e-10)
  np.testing.assert_allclose(g, gap * d["m"] / n, rtol=1e-10, atol=1e-14)
  val, g = out["forward"]
  np.testing.assert_allclose(float(val), ref.agg(-gap, d["m"], "token-mean"), rtol=1e-10)
  np.testing.assert_allclose(g, -d["m"] / n, rtol=1e-10, atol=1e-14)
  np.testing.assert_allclose(adv, -gap * d["m"], rtol=1e-12, atol=1e-14)


def test_hindsight_gap_advantages():
  d = make_batch(5, b=4, l=6)
  t = d["lp"] + np.random.default_rng(0).normal(0, 2, d["lp"].shape)
  run = jax.jit(lambda mode, norm: losses.hindsight_gap_advantages(
      F(d["adv"]), F(d["lp"]), F(t), F(d["m"]), mode=mode, beta=0.5, gap_clip=1.0, normalize=norm),
      static_argnums=(0, 1))
  gap = np.clip(t - d["lp"], -1.0, 1.0)
  np.testing.assert_allclose(run("bonus", False), (d["adv"] + 0.5 * gap) * d["m"], rtol=1e-5, atol=1e-6)
  u = np.exp(0.5 * np.sign(d["adv"]) * gap)
  np.testing.assert_allclose(run("weight", False), d["adv"] * u * d["m"], rtol=1e-5, atol=1e-6)
  want = np.zeros_like(u)
  for i in range(u.shape[0]):
    if d["m"][i].sum() > 0:
      want[i] = d["adv"][i] * u[i] / ref.mmean(u[i], d["m"][i]) * d["m"][i]
  np.testing.assert_allclose(run("weight", True), want, rtol=1e-5, atol=1e-6)
  assert np.all(u <= math.exp(0.5) + 1e-12) and np.all(u >= math.exp(-0.5) - 1e-12)
  with pytest.raises(ValueError, match="bonus"):
    losses.hindsight_gap_advantages(F(d["adv"]), F(d["lp"]), F(t), F(d["m"]), mode="scale")
