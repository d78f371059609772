"""attention_core (hand-written FlashAttention-style backward) vs NumPy and plain autodiff."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import attention
from agent_rl.models.attention import MASK_BIAS, attention_core

from conftest import init_model

B, K, R, G, S, D = 2, 2, 5, 3, 7, 4


def _inputs(seed=0, dtype=jnp.float32):
  ks = jax.random.split(jax.random.key(seed), 5)
  q = jax.random.normal(ks[0], (B, K, R, G, D), dtype)
  k = jax.random.normal(ks[1], (B, K, S, D), dtype)
  v = jax.random.normal(ks[2], (B, K, S, D), dtype)
  # Causal over the last R of S keys, plus random padding keys (never all of a row's keys).
  causal = np.arange(S)[None, :] <= np.arange(S - R, S)[:, None]
  pad = np.asarray(jax.random.bernoulli(ks[3], 0.8, (B, S))) | (np.arange(S) == 0)
  mask = causal[None] & pad[:, None, :]
  bias = jnp.asarray(np.where(mask, 0.0, MASK_BIAS), jnp.float32)[:, None, :, None, :]
  dy = jax.random.normal(ks[4], (B, K, R, G, D), dtype)
  return q, k, v, bias, dy


def _numpy_attention(q, k, v, bias):
  q, k, v, bias = (np.asarray(a, np.float64) for a in (q, k, v, bias))
  out = np.zeros(q.shape)
  for b in range(B):
    for h in range(K):
      for r in range(R):
        for g in range(G):
          s = k[b, h] @ q[b, h, r, g] + bias[b, 0, r, 0]
          p = np.exp(s - s.max())
          out[b, h, r, g] = (p / p.sum()) @ v[b, h]
  return out


def _autodiff_reference(q, k, v, bias):
  s = jnp.einsum("bkrgd,bksd->bkrgs", q, k) + bias
  return jnp.einsum("bkrgs,bksd->bkrgd", jax.nn.softmax(s, axis=-1), v)


def test_forward_matches_numpy():
  q, k, v, bias, _ = _inputs()
  np.testing.assert_allclose(np.asarray(jax.jit(attention_core)(q, k, v, bias)),
                             _numpy_attention(q, k, v, bias), rtol=1e-5, atol=1e-5)


def test_gradients_match_autodiff_of_plain_softmax():
  q, k, v, bias, dy = _inputs(1)

  def grads(fn):
    y, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, bias), q, k, v)
    return vjp(dy)

  ours, ref = jax.jit(lambda: (grads(attention_core), grads(_autodiff_reference)))()
  for name, a, b in zip("qkv", ours, ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5, err_msg=name)


def test_gradient_matches_finite_differences():
  q, k, v, bias, dy = _inputs(2)
  loss = lambda q: jnp.sum(attention_core(q, k, v, bias) * dy)
  g = np.asarray(jax.grad(loss)(q))
  eps, idx = 1e-2, (1, 0, 2, 1, 3)
  e = jnp.zeros_like(q).at[idx].set(eps)
  fd = (float(loss(q + e)) - float(loss(q - e))) / (2 * eps)
  assert g[idx] == pytest.approx(fd, rel=2e-2, abs=2e-3)


def test_bfloat16_close_to_float32():
  q, k, v, bias, dy = _inputs(3)
  f = jax.jit(lambda q, k, v: jax.vjp(lambda *a: attention_core(*a, bias), q, k, v))
  y32, vjp32 = f(q, k, v)
  cast = lambda a: a.astype(jnp.bfloat16)
  y16, vjp16 = f(cast(q), cast(k), cast(v))
  assert y16.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(y16, np.float32), np.asarray(y32), atol=5e-2)
  for a, b in zip(vjp16(cast(dy)), vjp32(dy)):
    assert a.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b), atol=1e-1)


@pytest.mark.parametrize("chunks", [1, 3])
def test_model_gradients_do_not_depend_on_query_chunks(small_config, monkeypatch, chunks):
  """The chunked causal path and its backward give the unchunked gradients (valid rows)."""
  cfg = small_config(tie_embeddings=False)
  graphdef, state = init_model(cfg)
  tokens = jax.random.randint(jax.random.key(1), (2, 11), 0, cfg.vocab_size)
  valid = jnp.arange(11)[None, :] < jnp.array([[11], [8]])

  def grads():
    def loss(state):
      logits = nnx.merge(graphdef, state)(tokens, None, valid)
      return jnp.sum(jnp.where(valid[..., None], jax.nn.log_softmax(logits), 0.0)[..., 0])
    return jax.jit(jax.grad(loss))(state)

  monkeypatch.setattr(attention, "QUERY_CHUNKS", 4)
  base = grads()
  monkeypatch.setattr(attention, "QUERY_CHUNKS", chunks)
  other = grads()
  for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(other)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=2e-5)


def test_contract_rows_matches_numpy():
  """dV/dK's product a^T b over the query rows (a transposed GEMM with barriers on CPU)."""
  ks = jax.random.split(jax.random.key(4), 2)
  a = jax.random.normal(ks[0], (B, K, R * G, S))
  b = jax.random.normal(ks[1], (B, K, R * G, D))
  ref = np.einsum("bkqs,bkqd->bksd", np.asarray(a, np.float64), np.asarray(b, np.float64))
  np.testing.assert_allclose(np.asarray(jax.jit(attention._contract_rows)(a, b)), ref,
                             rtol=1e-5, atol=1e-5)
