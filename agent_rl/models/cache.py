"""Explicit KV-cache pytree for prefill/decode (a contract shared with rollout and envs).

One array per layer, updated in place with `lax.dynamic_update_slice` (a stacked
[layers, ...] cache updated with `.at[l].set` measured ~46 ms/step slower on CPU). K is
stored transposed, `[B, KVH, D, S]`, so decode scores are a plain batched `[G, D] @ [D, S]`.
All rows write the same slots (`index`); ragged rows mark their padding slots invalid.
Models with sliding-window layers also keep each slot's position (`pos`): their window is
measured in positions, which padding slots inside a cache do not advance.
"""
from __future__ import annotations

from typing import Optional, Tuple

import flax.struct
import jax
import jax.numpy as jnp

from agent_rl.models.config import ModelConfig
from agent_rl.parallel.rules import constrain


@flax.struct.dataclass
class KVCache:
  """Attention cache of a decoder with `len(k)` layers.

  Attributes:
    k: per layer `[B, KVH, D, S]` (keys, transposed).
    v: per layer `[B, KVH, S, D]`.
    valid: `[B, S]` bool, slot holds a real token of that row.
    index: int32 scalar, next slot to write (shared by all rows).
    pos: `[B, S]` int32 position of each slot's token, or None (models without sliding
      layers; a None is no pytree leaf, so their caches are unchanged).
  """
  k: Tuple[jax.Array, ...]
  v: Tuple[jax.Array, ...]
  valid: jax.Array
  index: jax.Array
  pos: Optional[jax.Array] = None

  @property
  def batch(self) -> int:
    return self.valid.shape[0]

  @property
  def max_len(self) -> int:
    return self.valid.shape[1]


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=None) -> KVCache:
  """An empty cache: zeros, nothing valid, index 0 (and slot positions when `cfg` has
  sliding-window layers).

  dtype: of K and V, default the compute dtype. The attention rounds K and V to it before
  they are written and reads them back in it, so a wider cache holds the same values in
  more bytes (a float32 cache under bfloat16 compute: twice the memory, same logits).
  """
  dtype = cfg.compute_dtype if dtype is None else dtype
  if batch <= 0 or max_len <= 0:
    raise ValueError(f"init_cache needs positive batch and max_len, got {batch}, {max_len}")
  kvh, d = cfg.num_kv_heads, cfg.head_dim
  # Under a mesh the cache is laid out by the logical rules (episodes over data x fsdp, KV
  # heads over tensor, like the k/v projections that fill it); the in-place updates keep it.
  k = tuple(constrain(jnp.zeros((batch, kvh, d, max_len), dtype),
                      ("batch", "kv_heads", "head_dim", "length")) for _ in range(cfg.num_layers))
  v = tuple(constrain(jnp.zeros((batch, kvh, max_len, d), dtype),
                      ("batch", "kv_heads", "length", "head_dim")) for _ in range(cfg.num_layers))
  pos = None
  if cfg.has_sliding:
    pos = constrain(jnp.zeros((batch, max_len), jnp.int32), ("batch", "length"))
  return KVCache(k=k, v=v, valid=constrain(jnp.zeros((batch, max_len), jnp.bool_),
                                           ("batch", "length")),
                 index=jnp.zeros((), jnp.int32), pos=pos)
