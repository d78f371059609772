"""Decoder building blocks: RMSNorm, token embedding, gated MLP and rotary embeddings.

RMSNorm (Zhang & Sennrich, 2019), SwiGLU / GeGLU (Shazeer, 2020), RoPE (Su et al., 2021) in
the Hugging Face `rotate_half` convention used by Qwen2, Llama, Qwen3 and Gemma checkpoints. Every parameter
carries logical axis names (NNX `out_sharding` metadata, formerly `sharding_names`) that `agent_rl.parallel` maps to
mesh axes; `eager_sharding=False` because the names are logical, not mesh axes.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agent_rl.models import lora
from agent_rl.models.dense import dense
from agent_rl.registry import Registry

Initializer = Callable[..., jax.Array]

# Gate activations of the GLU MLP, by `ModelConfig.mlp_activation`. 'gelu_tanh' is HF's
# `gelu_pytorch_tanh` (Gemma): the tanh approximation, not the erf GELU.
ACTIVATIONS = Registry("MLP activation")
ACTIVATIONS.register("silu", jax.nn.silu)
ACTIVATIONS.register("gelu_tanh", functools.partial(jax.nn.gelu, approximate=True))


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
  """y = x / sqrt(mean(x^2) + eps) * scale, statistics in float32 (as HF Llama/Qwen2).

  plus_one: y = x / rms * (1 + scale), `scale` initialized to zero, the product taken in
  float32 before the cast (HF Gemma3RMSNorm; Llama casts first, then multiplies).
  """

  def __init__(self, dim: int, *, eps: float, dtype, param_dtype, rngs: nnx.Rngs,
               plus_one: bool = False, axis_name: str = "embed"):
    self.eps = eps
    self.dtype = dtype
    self.plus_one = plus_one
    init = nnx.initializers.zeros if plus_one else nnx.initializers.ones
    self.scale = make_param(rngs, init, (dim,), (axis_name,), param_dtype)

  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [..., E] -> [..., E] in the compute dtype."""
    x32 = x.astype(jnp.float32)
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    y = x32 * jax.lax.rsqrt(var + self.eps)
    if self.plus_one:
      return (y * (1.0 + self.scale[...].astype(jnp.float32))).astype(self.dtype)
    return self.scale[...].astype(self.dtype) * y.astype(self.dtype)


class Embed(nnx.Module):
  """Token embedding table `embedding: [V, E]` ('vocab', 'embed').

  Init normal(1/sqrt(E)): with a tied head, initial logits then have unit scale.
  scale: outputs multiplied by sqrt(E), rounded to the storage dtype first as HF Gemma does
  (sqrt(3072) = 55.43 becomes 55.5 in bf16).
  """

  def __init__(self, vocab: int, dim: int, *, dtype, param_dtype, rngs: nnx.Rngs,
               scale: bool = False):
    self.dtype = dtype
    self.multiplier = float(np.asarray(dim ** 0.5, jnp.dtype(param_dtype))) if scale else None
    self.embedding = make_param(rngs, dense_init(dim), (vocab, dim),
                                ("vocab", "embed"), param_dtype)

  def __call__(self, tokens: jax.Array) -> jax.Array:
    """tokens: [...] int32 -> [..., E]."""
    x = jnp.take(self.embedding[...], tokens, axis=0)
    if self.multiplier is not None:
      x = x * jnp.asarray(self.multiplier, x.dtype)
    return x.astype(self.dtype)


class MLP(nnx.Module):
  """Gated MLP: down(act(x @ gate) * (x @ up)); gate/up [E, M] ('embed','mlp'), down [M, E].

  act = silu (SwiGLU) or tanh-GELU (GeGLU), by name in `ACTIVATIONS`.
  """

  def __init__(self, dim: int, hidden: int, *, dtype, param_dtype, rngs: nnx.Rngs,
               activation: str = "silu", lora_cfg=None):
    self.dtype = dtype
    self.activation = activation
    self.gate = make_param(rngs, dense_init(dim), (dim, hidden), ("embed", "mlp"), param_dtype)
    self.up = make_param(rngs, dense_init(dim), (dim, hidden), ("embed", "mlp"), param_dtype)
    self.down = make_param(rngs, dense_init(hidden), (hidden, dim), ("mlp", "embed"), param_dtype)
    # LoRA adapters (models.lora) on the targeted projections of this MLP.
    self.lora_targets = ()
    if lora_cfg is not None:
      self.lora_targets = tuple(t for t in ("gate", "up", "down") if t in lora_cfg.targets)
      self.lora_scale = lora_cfg.scale
      self.lora_dropout = lora_cfg.dropout
      for t in self.lora_targets:
        lora.add_adapters(self, t, lora_cfg, 1, rngs)

  def _dense(self, x: jax.Array, name: str, key=None) -> jax.Array:
    y = dense(x, getattr(self, name)[...])
    if name in self.lora_targets:
      y = y + lora.delta(self, name, x, self.lora_scale, y.dtype, key)
    return y

  def __call__(self, x: jax.Array, key=None) -> jax.Array:
    """x: [..., E] -> [..., E]. key: the layer's LoRA dropout key (training only) or None."""
    x = x.astype(self.dtype)
    g = self._dense(x, "gate", key)
    u = self._dense(x, "up", key)
    return self._dense(ACTIVATIONS.get(self.activation)(g) * u, "down", key)


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
