"""Functional inference API over `(graphdef, state)` with an explicit KV cache.

This is the contract that rollout, envs and learners code against:

  forward(graphdef, state, tokens, positions, valid)          -> logits, hidden
  prefill(graphdef, state, tokens, positions, valid, cache, rows=None) -> logits, hidden, cache
  decode_step(graphdef, state, tokens, positions, cache, valid=None) -> logits, hidden, cache

Each is `jax.jit`-ed with `graphdef` static (`nnx.merge` runs at trace time only), so they
can be called directly or inside other jitted code (scan over turns, fori_loop over tokens).
No object with hidden state crosses the jit boundary (DESIGN.md "Model" contract).
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import jax
from flax import nnx

from agent_rl.models.cache import KVCache


def _merge(graphdef, state):
  model = nnx.merge(graphdef, state)
  if not hasattr(model, "decode") or not hasattr(model, "apply"):
    raise ValueError(f"graphdef must describe a Transformer, got {type(model).__name__}")
  return model


@functools.partial(jax.jit, static_argnums=0)
def forward(graphdef, state, tokens: jax.Array, positions: jax.Array, valid: jax.Array
            ) -> Tuple[jax.Array, jax.Array]:
  """Causal forward without a cache (causal by sequence order, keys masked by `valid`).

  tokens, positions: [B,L] int32; valid: [B,L] bool (left or right padding).
  Returns logits [B,L,V] float32 and hidden [B,L,E] (after the final norm).
  """
  logits, hidden, _ = _merge(graphdef, state).apply(tokens, positions, valid)
  return logits, hidden


@functools.partial(jax.jit, static_argnums=0)
def prefill(graphdef, state, tokens: jax.Array, positions: jax.Array, valid: jax.Array,
            cache: KVCache, rows: Optional[jax.Array] = None
            ) -> Tuple[jax.Array, jax.Array, KVCache]:
  """Writes a block of L tokens at `cache.index` and returns its logits.

  Each query attends to earlier valid cache slots and causally within the block, so the
  same call serves the first prompt and every appended observation of a multi-turn rollout
  (ragged per row through `valid`). The block must fit: index + L <= cache.max_len.
  tokens, positions: [B,L] int32; valid: [B,L] bool.
  Returns logits [B,L,V] f32, hidden [B,L,E], cache with index += L.
  rows: optional [B] int32 (e.g. each row's last valid token): then only that row of the
  block is returned, logits [B,V] and hidden [B,E], and the last layer's attention output,
  MLP and head run on it alone (the cheap way to start sampling after a prompt).
  """
  return _merge(graphdef, state).apply(tokens, positions, valid, cache, rows)


@functools.partial(jax.jit, static_argnums=0)
def decode_step(graphdef, state, tokens: jax.Array, positions: jax.Array, cache: KVCache,
                valid: Optional[jax.Array] = None) -> Tuple[jax.Array, jax.Array, KVCache]:
  """One token per row: tokens, positions [B] int32; valid [B] bool or None (all True).

  A row with valid False writes an invalid slot (finished episodes stay unpolluted).
  Returns logits [B,V] f32, hidden [B,E], cache with index += 1.
  """
  return _merge(graphdef, state).decode(tokens, positions, cache, valid)
