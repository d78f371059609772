"""The credit-kernel contract and registry.

A credit kernel is a pure, jittable function

    credit = kernel(batch: EpisodeBatch, **hparams) -> Credit

registered by name (`agent_rl.credit.get("gigpo")`) with a declaration of the inputs it needs
beyond the always-present batch fields (`Needs`, credit/needs.py; checked at start-up by
`credit.check_inputs`). Turn-aware kernels return turn-level
advantages `[N, T]`, which the loss broadcasts to tokens through `turn_index` inside the
jitted step (the `[N, L]` array need not be materialized); token-level estimators (GAE,
verl's outcome estimators) return `[N, L]`.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from flax import struct

from agent_rl.credit.needs import NEEDS, Needs
from agent_rl.registry import Registry

CREDIT = Registry("credit kernel")
get = CREDIT.get
names = CREDIT.names


def register(name: str, obj: Optional[Any] = None, *,
             needs: Needs = Needs()) -> Callable[[Any], Any] | Any:
  """Registers a kernel under `name` with its `Needs` (default: nothing beyond the fields
  every env provides); usable as a decorator when `obj` is None."""
  if not isinstance(needs, Needs):
    raise TypeError(f"credit kernel {name!r}: needs= must be a Needs, got {type(needs).__name__}")

  def _add(o: Any) -> Any:
    CREDIT.register(name, o)
    NEEDS[name] = needs
    return o

  return _add if obj is None else _add(obj)


def needs_of(name: str) -> Needs:
  """The declared `Needs` of a registered kernel (KeyError listing the known ones)."""
  get(name)
  return NEEDS[name]


@struct.dataclass
class Credit:
  """Advantages (and optional returns) at turn or token level.

  turn: `[N, T]` f32 per-turn advantages (0 on invalid turns), or None.
  token: `[N, L]` f32 per-token advantages (0 off the loss mask), or None.
  returns: `[N, T]` or `[N, L]` value targets for a critic, or None.
  mask: optional `[N]` or `[N, T]` f32 that multiplies the loss mask (e.g. fatal-aware
    masking, cut groups of the selective-rollout gate); None keeps the mask as is.
  """
  turn: Optional[jax.Array] = None
  token: Optional[jax.Array] = None
  returns: Optional[jax.Array] = None
  mask: Optional[jax.Array] = None


def turn_to_token(turn_values: jax.Array, turn_index: jax.Array, loss_mask: jax.Array) -> jax.Array:
  """Broadcasts `[N, T]` turn values to `[N, L]` tokens via `turn_index` (-1 -> 0)."""
  idx = jnp.clip(turn_index, 0, turn_values.shape[1] - 1)
  vals = jnp.take_along_axis(turn_values, idx, axis=1)
  return jnp.where(turn_index >= 0, vals, 0.0) * loss_mask


def token_advantages(credit: Credit, turn_index: jax.Array, loss_mask: jax.Array) -> jax.Array:
  """The `[N, L]` advantages the loss consumes, whichever level the kernel produced."""
  if credit.token is not None:
    return credit.token * loss_mask
  return turn_to_token(credit.turn, turn_index, loss_mask)
