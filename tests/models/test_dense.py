"""dense (hand-written mixed-precision backward) vs NumPy loops and plain autodiff."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from agent_rl.models.dense import dense

T, E, F = 6, 5, 7


def _inputs(dtype, seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((2, 3, E)), dtype)
  w = jnp.asarray(rng.standard_normal((E, F)), dtype)
  dy = jnp.asarray(rng.standard_normal((2, 3, F)), jnp.float32)
  return x, w, dy


def _matmul64(a, b):
  """Plain triple loop in float64 (the reference product of the already-rounded operands)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  out = np.zeros((a.shape[0], b.shape[1]))
  for i in range(a.shape[0]):
    for j in range(b.shape[1]):
      out[i, j] = sum(a[i, k] * b[k, j] for k in range(a.shape[1]))
  return out


def _vjp(x, w, dy, out_dtype):
  y, pullback = jax.vjp(lambda x, w: dense(x, w, out_dtype), x, w)
  dx, dw = pullback(dy.astype(y.dtype))
  return y, dx, dw


def test_float32_matches_numpy_and_autodiff():
  x, w, dy = _inputs(jnp.float32)
  y, dx, dw = _vjp(x, w, dy, None)
  x2, dy2 = np.asarray(x).reshape(-1, E), np.asarray(dy).reshape(-1, F)
  np.testing.assert_allclose(np.asarray(y).reshape(-1, F), _matmul64(x2, w), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dx).reshape(-1, E), _matmul64(dy2, np.asarray(w).T),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dw, _matmul64(x2.T, dy2), rtol=1e-5, atol=1e-5)
  y_ref, pullback = jax.vjp(lambda x, w: x @ w, x, w)
  for ours, ref in zip((y, dx, dw), (y_ref, *pullback(dy))):
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


def test_bfloat16_accumulates_in_float32():
  # Operands bf16, products accumulated in f32, each result rounded once to its dtype.
  x, w, dy = _inputs(jnp.bfloat16)
  master = np.asarray(w, np.float32)
  y, pullback = jax.vjp(dense, x, jnp.asarray(master))
  dx, dm = pullback(dy.astype(jnp.bfloat16))
  assert y.dtype == dx.dtype == jnp.bfloat16 and dm.dtype == jnp.float32
  x2 = np.asarray(x, np.float32).reshape(-1, E)
  dy2 = np.asarray(dy.astype(jnp.bfloat16), np.float32).reshape(-1, F)
  bf = lambda a: np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
  np.testing.assert_allclose(np.asarray(y, np.float32).reshape(-1, F), bf(_matmul64(x2, master)),
                             rtol=8e-3, atol=1e-2)
  np.testing.assert_allclose(np.asarray(dx, np.float32).reshape(-1, E),
                             bf(_matmul64(dy2, master.T)), rtol=8e-3, atol=1e-2)
  # The master-weight gradient is not rounded to bf16: f32-accurate from the bf16 operands
  # (a cast outside `dense` would have rounded it, as autodiff through torch autocast does).
  np.testing.assert_allclose(dm, _matmul64(x2.T, dy2), rtol=1e-5, atol=1e-5)
  assert np.abs(np.asarray(dm) - bf(dm)).max() > 0


def test_float32_out_dtype_and_its_backward():
  # The LM head: bf16 hidden and weight, float32 logits; the f32 cotangent is read in bf16.
  x, w, dy = _inputs(jnp.bfloat16)
  y, dx, dw = _vjp(x, w, dy, jnp.float32)
  assert y.dtype == jnp.float32 and dx.dtype == dw.dtype == jnp.bfloat16
  x2 = np.asarray(x, np.float32).reshape(-1, E)
  np.testing.assert_allclose(np.asarray(y).reshape(-1, F), _matmul64(x2, np.asarray(w, np.float32)),
                             rtol=1e-5, atol=1e-5)


def _eqns(jaxpr, name):
  """Equations named `name` in a jaxpr and every jaxpr nested in its equations' params."""
  for e in jaxpr.eqns:
    if e.primitive.name == name:
      yield e
    for p in e.params.values():
      for sub in (p if isinstance(p, (tuple, list)) else (p,)):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          yield from _eqns(inner, name)


def test_backward_gemms_read_bf16_and_accumulate_in_f32():
  """The property the speed rests on: no f32 x f32 GEMM and no bf16-accumulated GEMM."""
  x, w, dy = _inputs(jnp.bfloat16)
  loss = lambda x, m: jnp.sum(dense(x, m, jnp.float32) * dy)
  jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, jnp.asarray(w, jnp.float32))
  dots = list(_eqns(jaxpr.jaxpr, "dot_general"))
  assert len(dots) >= 3
  for e in dots:
    assert [v.aval.dtype for v in e.invars] == [jnp.bfloat16, jnp.bfloat16], e
    assert e.outvars[0].aval.dtype == jnp.float32, e


def test_bad_inputs_name_the_problem():
  x, w, _ = _inputs(jnp.float32)
  with pytest.raises(ValueError, match=r"w \[E, F\]"):
    dense(x, w.T)
