"""Decoder building blocks: RMSNorm, token embedding, SwiGLU MLP and rotary embeddings.

RMSNorm (Zhang & Sennrich, 2019), SwiGLU (Shazeer, 2020), RoPE (Su et al., 2021) in the
Hugging Face `rotate_half` convention used by Qwen2 and Llama checkpoints. Every parameter
carries logical axis names (NNX `out_sharding` metadata, formerly `sharding_names`) that `agent_rl.parallel` maps to
mesh axes; `eager_sharding=False` because the names are logical, not mesh axes.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models.dense import dense

Initializer = Callable[..., jax.Array]


def make_param(rngs: nnx.Rngs, init: Initializer, shape: Sequence[int],
               names: Sequence[str | None], dtype) -> nnx.Param:
  """An `nnx.Param` of `shape` with logical axis `names` (one per dimension)."""
  if len(names) != len(shape):
    raise ValueError(f"axis names {tuple(names)} do not match shape {tuple(shape)}")
  value = init(rngs.params(), tuple(shape), dtype)
  return nnx.Param(value, out_sharding=tuple(names), eager_sharding=False)


def dense_init(fan_in: int) -> Initializer:
  """Normal(0, 1/sqrt(fan_in)) for weights whose contracted size is `fan_in`."""
  return nnx.initializers.normal(stddev=fan_in ** -0.5)


class RMSNorm(nnx.Module):
  """y = x / sqrt(mean(x^2) + eps) * scale, statistics in float32 (as HF Llama/Qwen2)."""

  def __init__(self, dim: int, *, eps: float, dtype, param_dtype, rngs: nnx.Rngs):
    self.eps = eps
    self.dtype = dtype
    self.scale = make_param(rngs, nnx.initializers.ones, (dim,), ("embed",), param_dtype)

  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [..., E] -> [..., E] in the compute dtype."""
    x32 = x.astype(jnp.float32)
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    y = (x32 * jax.lax.rsqrt(var + self.eps)).astype(self.dtype)
    return self.scale[...].astype(self.dtype) * y


class Embed(nnx.Module):
  """Token embedding table `embedding: [V, E]` ('vocab', 'embed').

  Init normal(1/sqrt(E)): with a tied head, initial logits then have unit scale.
  """

  def __init__(self, vocab: int, dim: int, *, dtype, param_dtype, rngs: nnx.Rngs):
    self.dtype = dtype
    self.embedding = make_param(rngs, dense_init(dim), (vocab, dim),
                                ("vocab", "embed"), param_dtype)

  def __call__(self, tokens: jax.Array) -> jax.Array:
    """tokens: [...] int32 -> [..., E]."""
    return jnp.take(self.embedding[...], tokens, axis=0).astype(self.dtype)


class MLP(nnx.Module):
  """SwiGLU: down(silu(x @ gate) * (x @ up)); gate/up [E, M] ('embed','mlp'), down [M, E]."""

  def __init__(self, dim: int, hidden: int, *, dtype, param_dtype, rngs: nnx.Rngs):
    self.dtype = dtype
    self.gate = make_param(rngs, dense_init(dim), (dim, hidden), ("embed", "mlp"), param_dtype)
    self.up = make_param(rngs, dense_init(dim), (dim, hidden), ("embed", "mlp"), param_dtype)
    self.down = make_param(rngs, dense_init(hidden), (hidden, dim), ("mlp", "embed"), param_dtype)

  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [..., E] -> [..., E]."""
    x = x.astype(self.dtype)
    g = dense(x, self.gate[...])
    u = dense(x, self.up[...])
    return dense(jax.nn.silu(g) * u, self.down[...])


def rope_cos_sin(positions: jax.Array, inv_freq) -> tuple[jax.Array, jax.Array]:
  """positions: [...] int32, inv_freq: [D/2] -> cos, sin: [..., D/2] float32."""
  freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq, jnp.float32)
  return jnp.cos(freqs), jnp.sin(freqs)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotates x: [..., N, D] (N heads) by cos/sin: [..., D/2] (HF rotate_half halves layout).

  Equals x * cat(cos, cos) + rotate_half(x) * cat(sin, sin) with rotate_half(x) = cat(-x2, x1).
  """
  half = x.shape[-1] // 2
  x1, x2 = x[..., :half], x[..., half:]
  c = cos[..., None, :].astype(x.dtype)
  s = sin[..., None, :].astype(x.dtype)
  return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
