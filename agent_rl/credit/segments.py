"""Group statistics as segment ops over integer group ids (shared/ALGORITHMS.md §0).

Every "group by uid" in the credit methods is a `segment_sum` over integer ids: count, sum
and sum of squares per group, gathered back to the rows. Never a Python loop over groups.
Group ids must lie in `[0, num_groups)`; rows with weight 0 (padding) do not count.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp


class GroupStats(NamedTuple):
  """Per-row statistics of the row's group (each `[...]` like the input rows)."""
  count: jax.Array  # number (or total weight) of members of the row's group
  mean: jax.Array  # group mean
  std: jax.Array  # Bessel-corrected std (torch.std); 0 where count <= 1
  pop_std: jax.Array  # population std (divide by n)


def group_stats(x: jax.Array, group_id: jax.Array, num_groups: int,
                weight: Optional[jax.Array] = None) -> GroupStats:
  """Mean and stds of `x` within groups, gathered back per row.

  Args:
    x: `[R]` f32 values (any shape; flattened together with group_id and weight).
    group_id: `[R]` i32 group of each row, in `[0, num_groups)`.
    num_groups: static number of segments.
    weight: `[R]` f32/bool row weights (1 = counted once, 0 = padding). Default all ones.

  Returns:
    GroupStats with arrays shaped like `x`. Empty groups never gather back to a row.
  """
  shape = x.shape
  x = x.reshape(-1).astype(jnp.float32)
  gid = group_id.reshape(-1)
  w = jnp.ones_like(x) if weight is None else weight.reshape(-1).astype(jnp.float32)
  seg = lambda v: jax.ops.segment_sum(v, gid, num_segments=num_groups)
  n = seg(w)
  s = seg(w * x)
  mean_g = s / jnp.maximum(n, 1e-30)
  # Two-pass variance (sum of squared deviations) is stabler than E[x^2] - E[x]^2.
  dev = jnp.where(w > 0, x - mean_g[gid], 0.0)
  ss = seg(w * dev * dev)
  var_unb = ss / jnp.maximum(n - 1.0, 1e-30)
  var_pop = ss / jnp.maximum(n, 1e-30)
  std_g = jnp.where(n > 1, jnp.sqrt(jnp.maximum(var_unb, 0.0)), 0.0)
  pstd_g = jnp.sqrt(jnp.maximum(var_pop, 0.0))
  r = lambda v: v[gid].reshape(shape)
  return GroupStats(count=r(n), mean=r(mean_g), std=r(std_g), pop_std=r(pstd_g))


def combine_ids(a: jax.Array, b: jax.Array, b_size: int) -> jax.Array:
  """A joint group id for the pair (a, b), with b in `[0, b_size)`: `a * b_size + b`."""
  return a.astype(jnp.int32) * b_size + b.astype(jnp.int32)


def dense_ids(keys: tuple[jax.Array, ...], valid: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Relabels rows by a tuple of integer keys to dense ids in `[0, R)` (sort + unique).

  This is how node tables are built on device: e.g. `keys=(group_id, state_hash)` gives
  one id per distinct state within each group, with a static size R (no Python dicts).

  Args:
    keys: tuple of `[R]` integer arrays; rows with equal keys (all components) share an id.
    valid: `[R]` bool; each invalid row gets an id of its own, shared with no other row
      (callers exclude them via weights).

  Returns:
    ids: `[R]` i32 in `[0, R)`; valid rows with equal keys <-> equal ids.
    num_unique: scalar i32, the number of distinct keys among valid rows (they take ids
      `[0, num_unique)`; invalid rows come after).
  """
  r = valid.shape[0]
  # lexsort: the last key is primary. Invalid rows go last.
  order = jnp.lexsort(tuple(reversed(keys)) + (~valid,))
  v_sorted = valid[order]
  diff = jnp.zeros((r - 1,), bool)
  for k in keys:
    ks = k[order]
    diff = diff | (ks[1:] != ks[:-1])
  new = jnp.concatenate([jnp.ones((1,), bool), diff]) | ~v_sorted
  dense_sorted = (jnp.cumsum(new) - 1).astype(jnp.int32)
  ids = jnp.zeros((r,), jnp.int32).at[order].set(dense_sorted)
  num_unique = jnp.sum(new & v_sorted).astype(jnp.int32)
  return ids, num_unique
