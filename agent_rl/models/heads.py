"""Value and reward heads on the decoder's final hidden states.

`ValueHead`: per-token state value V(s_t) for PPO's critic (Schulman et al., 2017,
arXiv:1707.06347). `RewardHead`: one scalar per sequence read at its last valid token, the
Bradley-Terry reward model of Ouyang et al., 2022 (arXiv:2203.02155). Both are a single
linear map [E, 1] ('embed', None) + bias; init normal(1/sqrt(E+1)) as TRL's value head.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models.dense import dense
from agent_rl.models.layers import make_param


class _ScalarHead(nnx.Module):

  def __init__(self, embed: int, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32):
    if not isinstance(embed, int) or embed <= 0:
      raise ValueError(f"embed must be a positive int, got {embed!r}")
    self.dtype = jnp.dtype(dtype)
    init = nnx.initializers.normal(stddev=(embed + 1) ** -0.5)
    self.kernel = make_param(rngs, init, (embed, 1), ("embed", None), param_dtype)
    self.bias = make_param(rngs, nnx.initializers.zeros, (1,), (None,), param_dtype)

  def _project(self, hidden: jax.Array) -> jax.Array:
    """hidden: [..., E] -> [...] float32."""
    y = dense(hidden.astype(self.dtype), self.kernel[...], out_dtype=jnp.float32)
    return y[..., 0] + self.bias[...].astype(jnp.float32)[0]


class ValueHead(_ScalarHead):
  """values = hidden @ kernel + bias, one per token."""

  def __call__(self, hidden: jax.Array) -> jax.Array:
    """hidden: [B, L, E] (or [B, E]) -> values [B, L] (or [B]) float32."""
    return self._project(hidden)


def last_valid_index(valid: jax.Array) -> jax.Array:
  """valid: [B, L] bool -> [B] int32 index of the last True (-1 when none)."""
  l = valid.shape[-1]
  idx = jnp.where(valid, jnp.arange(l, dtype=jnp.int32), -1)
  return jnp.max(idx, axis=-1)


class RewardHead(_ScalarHead):
  """reward = hidden[b, last valid token] @ kernel + bias, one per sequence."""

  def __call__(self, hidden: jax.Array, valid: jax.Array) -> jax.Array:
    """hidden: [B, L, E], valid: [B, L] bool -> rewards [B] float32 (0 for an all-pad row)."""
    if hidden.ndim != 3 or valid.shape != hidden.shape[:2]:
      raise ValueError(f"RewardHead needs hidden [B,L,E] and valid [B,L], got {hidden.shape}, "
                       f"{valid.shape}")
    last = last_valid_index(valid.astype(jnp.bool_))
    h = jnp.take_along_axis(hidden, jnp.maximum(last, 0)[:, None, None], axis=1)[:, 0]
    return jnp.where(last >= 0, self._project(h), 0.0)
