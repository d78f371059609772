"""Clipped value (critic) loss for PPO / GAE (shared/ALGORITHMS.md §1.11).

verl `compute_value_loss` (after TRL's PPO trainer); PPO, Schulman et al. 2017. The critic's
new prediction may move at most ε_v away from the rollout-time value before the clipped term
takes over:

  v_clip = clip(v̂, v_old − ε_v, v_old + ε_v)
  ℓ = max((v̂ − R)², (v_clip − R)²);   L = ½·agg(ℓ)
  clipfrac = mean[(v_clip − R)² > (v̂ − R)²]
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.losses.base import agg_loss, check_mode, float_dtype, masked_mean


def value_loss(vpreds: jax.Array, returns: jax.Array, values: jax.Array, mask: jax.Array, *,
               cliprange_value=0.5, loss_agg_mode: str = "token-mean", num_tokens=None,
               num_seqs=None, scale=None):
  """Clipped value loss.

  Args:
    vpreds: `[B, L]` current critic predictions v̂ (differentiated).
    returns: `[B, L]` targets R.
    values: `[B, L]` rollout-time critic values v_old.
    mask: `[B, L]` loss mask.
    cliprange_value: ε_v (verl default 0.5).
  Returns:
    (loss, {"vf_clipfrac", "vpred_mean"}).
  """
  check_mode(loss_agg_mode)
  for field, x in (("returns", returns), ("values", values), ("mask", mask)):
    if jnp.shape(x) != jnp.shape(vpreds):
      raise ValueError(f"value_loss: {field} has shape {jnp.shape(x)}, expected "
                       f"{jnp.shape(vpreds)} (same as vpreds)")
  dt = float_dtype(vpreds)
  v, r, old = vpreds.astype(dt), returns.astype(dt), values.astype(dt)
  v_clip = jnp.clip(v, old - cliprange_value, old + cliprange_value)
  l1 = jnp.square(v - r)
  l2 = jnp.square(v_clip - r)
  loss = 0.5 * agg_loss(jnp.maximum(l1, l2), mask, loss_agg_mode, num_tokens=num_tokens,
                        num_seqs=num_seqs, scale=scale)
  m = mask.astype(dt)
  return loss, {"vf_clipfrac": masked_mean((l2 > l1).astype(dt), m),
                "vpred_mean": masked_mean(jax.lax.stop_gradient(v), m)}
