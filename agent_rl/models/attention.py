"""Grouped-query self-attention (Ainslie et al., 2023) with RoPE and an explicit KV cache.

Three paths share the projections: `full` (no cache, causal by sequence order), `cached`
(a block of L tokens written at `cache.index`, attending to the whole cache) and `decode`
(one token, 4-D einsums, which XLA:CPU runs faster than the L=1 case of `cached`). Masks are
additive biases (`MASK_BIAS`) computed once per call and shared across layers, cheaper than
`jnp.where` inside every softmax. Query heads h = k * G + g use KV head k, as HF `repeat_kv`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models.config import ModelConfig
from agent_rl.models.layers import apply_rope, dense_init, make_param

# Large but finite: fully masked rows (padding queries) stay NaN-free.
MASK_BIAS = -1e30


def mask_to_bias(mask: jax.Array) -> jax.Array:
  """bool mask (True = attend) -> float32 additive bias (0 or MASK_BIAS)."""
  return jnp.where(mask, 0.0, MASK_BIAS).astype(jnp.float32)


def _softmax(scores: jax.Array, bias: jax.Array) -> jax.Array:
  s = scores + bias
  s = s - jnp.max(s, axis=-1, keepdims=True)
  e = jnp.exp(s)
  return e / jnp.sum(e, axis=-1, keepdims=True)


class Attention(nnx.Module):
  """Weights: q [E,H,D], k/v [E,KVH,D], o [H,D,E]; optional q/k/v biases (Qwen2)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    e, h, kvh, d = cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    pd = cfg.params_dtype
    self.num_heads, self.num_kv_heads, self.head_dim = h, kvh, d
    self.dtype = cfg.compute_dtype
    self.q = make_param(rngs, dense_init(e), (e, h, d), ("embed", "heads", "head_dim"), pd)
    self.k = make_param(rngs, dense_init(e), (e, kvh, d), ("embed", "kv_heads", "head_dim"), pd)
    self.v = make_param(rngs, dense_init(e), (e, kvh, d), ("embed", "kv_heads", "head_dim"), pd)
    self.o = make_param(rngs, dense_init(h * d), (h, d, e), ("heads", "head_dim", "embed"), pd)
    self.qkv_bias = cfg.qkv_bias
    if cfg.qkv_bias:
      zeros = nnx.initializers.zeros
      self.q_bias = make_param(rngs, zeros, (h, d), ("heads", "head_dim"), pd)
      self.k_bias = make_param(rngs, zeros, (kvh, d), ("kv_heads", "head_dim"), pd)
      self.v_bias = make_param(rngs, zeros, (kvh, d), ("kv_heads", "head_dim"), pd)

  def _proj(self, x: jax.Array, name: str) -> jax.Array:
    """x: [..., E] -> [..., N, D] as one 2-D GEMM (params reshaped, a free bitcast)."""
    w = getattr(self, name)[...].astype(self.dtype)
    y = x @ w.reshape(w.shape[0], -1)
    y = y.reshape(*x.shape[:-1], w.shape[1], w.shape[2])
    if self.qkv_bias:
      y = y + getattr(self, name + "_bias")[...].astype(self.dtype)
    return y

  def _qkv(self, x, cos, sin):
    """x: [..., E] -> q [..., KVH, G, D] (roped, pre-scaled), k [..., KVH, D] (roped), v."""
    q = apply_rope(self._proj(x, "q"), cos, sin) * jnp.asarray(self.head_dim ** -0.5, self.dtype)
    k = apply_rope(self._proj(x, "k"), cos, sin)
    v = self._proj(x, "v")
    q = q.reshape(*q.shape[:-2], self.num_kv_heads, -1, self.head_dim)
    return q, k, v

  def _out(self, y: jax.Array) -> jax.Array:
    """y: [..., H, D] -> [..., E]."""
    w = self.o[...].astype(self.dtype)
    return y.reshape(*y.shape[:-2], -1) @ w.reshape(-1, w.shape[-1])

  def full(self, x, cos, sin, bias):
    """x: [B,L,E], cos/sin: [B,L,D/2], bias: [B,1,1,L,L] -> [B,L,E]."""
    q, k, v = self._qkv(x, cos, sin)
    s = jnp.einsum("blkgd,bskd->bkgls", q, k, preferred_element_type=jnp.float32)
    p = _softmax(s, bias).astype(self.dtype)
    y = jnp.einsum("bkgls,bskd->blkgd", p, v)
    return self._out(y.reshape(*y.shape[:2], -1, self.head_dim))

  def cached(self, x, cos, sin, k_cache, v_cache, index, bias):
    """Block of L tokens written at slot `index`.

    x: [B,L,E]; k_cache [B,KVH,D,S]; v_cache [B,KVH,S,D]; bias [B,1,1,L,S].
    Returns y [B,L,E] and the updated caches.
    """
    q, k, v = self._qkv(x, cos, sin)
    zero = jnp.zeros((), jnp.int32)
    k_cache = jax.lax.dynamic_update_slice(
        k_cache, jnp.transpose(k, (0, 2, 3, 1)).astype(k_cache.dtype), (zero, zero, zero, index))
    v_cache = jax.lax.dynamic_update_slice(
        v_cache, jnp.transpose(v, (0, 2, 1, 3)).astype(v_cache.dtype), (zero, zero, index, zero))
    kc, vc = k_cache.astype(self.dtype), v_cache.astype(self.dtype)
    s = jnp.einsum("blkgd,bkds->bkgls", q, kc, preferred_element_type=jnp.float32)
    p = _softmax(s, bias).astype(self.dtype)
    y = jnp.einsum("bkgls,bksd->blkgd", p, vc)
    return self._out(y.reshape(*y.shape[:2], -1, self.head_dim)), k_cache, v_cache

  def decode(self, x, cos, sin, k_cache, v_cache, index, bias):
    """One token per row. x: [B,E]; cos/sin [B,D/2]; bias [B,1,1,S] -> y [B,E], caches."""
    q, k, v = self._qkv(x, cos, sin)  # q [B,KVH,G,D]; k, v [B,KVH,D]
    zero = jnp.zeros((), jnp.int32)
    k_cache = jax.lax.dynamic_update_slice(
        k_cache, k[..., None].astype(k_cache.dtype), (zero, zero, zero, index))
    v_cache = jax.lax.dynamic_update_slice(
        v_cache, v[:, :, None, :].astype(v_cache.dtype), (zero, zero, index, zero))
    kc, vc = k_cache.astype(self.dtype), v_cache.astype(self.dtype)
    s = jnp.einsum("bkgd,bkds->bkgs", q, kc, preferred_element_type=jnp.float32)
    p = _softmax(s, bias).astype(self.dtype)
    y = jnp.einsum("bkgs,bksd->bkgd", p, vc)
    return self._out(y.reshape(y.shape[0], -1, self.head_dim)), k_cache, v_cache
