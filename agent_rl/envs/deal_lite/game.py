"""DealLite's game: tasks, private values, allocations and the bargaining solutions.

Deal or No Deal (Lewis et al. 2017, arXiv:1706.05125, §2): a pool of items of 3 types with
counts `c_j` in [1, max_count]; each of the two roles (ROLES = alice, bob) has private
integer values `v^k_j >= 0` with `sum_j v^k_j c_j = total` (10 in the paper). The paper's
value rule, which we keep: (1) every item type is worth something to at least one role, and
(2) at least one type is worth something to both (there is something to bargain over).
An *allocation* `x [3]` is what alice gets (0 <= x_j <= c_j); bob gets `c - x`. Raw
utilities are `u_a = v^a . x`, `u_b = v^b . (c - x)` (the disagreement point is 0, walking
away); rewards are `u / total` in [0, 1].

Solutions (host-side NumPy over all allocations; the JAX versions act on `GameTables.alloc`):
  nash_allocation   argmax_x u_a * u_b (the Nash bargaining solution with a zero disagreement
                    point; ties -> the lexicographically smallest x)
  pareto_frontier   allocations no other allocation weakly dominates with one strict gain
  upper_bounds      per role, its best value over allocations leaving the other role > 0

Task sampling (`GameTables`, exact and replayable): the valid count vectors (those with at
least one valid value pair; e.g. (4, 4, 4) has none for total 10) in lexicographic order,
each with its valid `(v^a, v^b)` pairs in lexicographic order of (v^a, v^b); a task draws
`u [2] ~ U[0, 1)`: count vector `floor(u0 * NC)`, then pair `floor(u1 * n_pairs)` of it, so
counts are uniform over valid count vectors and values uniform over that vector's pairs.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import Digest, digest

NUM_TYPES = 3
ROLES = ("alice", "bob")


@struct.dataclass
class DealTask:
  """counts: [3] int32 item counts; values: [2, 3] int32 private values (row k = role k)."""
  counts: jax.Array
  values: jax.Array


def value_vectors(counts, total: int) -> list[tuple[int, ...]]:
  """All `v >= 0` (lexicographic) with `v . counts == total`."""
  ranges = [range(total // int(c) + 1) for c in counts]
  return [v for v in itertools.product(*ranges) if sum(a * int(c) for a, c in zip(v, counts)) == total]


def valid_pair(va, vb) -> bool:
  """The paper's value rule: every type worth > 0 to someone, some type worth > 0 to both."""
  return all(a + b > 0 for a, b in zip(va, vb)) and any(a > 0 and b > 0 for a, b in zip(va, vb))


class GameTables(Digest):
  """Jit-static tables for `max_count`, `total`.

  counts [NC, 3] int32 valid count vectors; pair_offset, pair_count [NC] int32 into
  pair_values [NP, 2, 3] int32; alloc [NA, 3] int32 every x in [0, max_count]^3
  (lexicographic, NA = (max_count + 1)^3).
  """

  def __init__(self, max_count: int, total: int):
    counts, offsets, sizes, pairs = [], [], [], []
    for c in itertools.product(range(1, max_count + 1), repeat=NUM_TYPES):
      vs = value_vectors(c, total)
      ok = [(a, b) for a in vs for b in vs if valid_pair(a, b)]
      if ok:
        counts.append(c)
        offsets.append(len(pairs))
        sizes.append(len(ok))
        pairs += ok
    if not pairs:
      raise ValueError(f"DealLite: no valid tasks for max_count={max_count}, total={total} "
                       "(no value vectors satisfy the value rule)")
    self.counts = np.asarray(counts, np.int32)
    self.pair_offset = np.asarray(offsets, np.int32)
    self.pair_count = np.asarray(sizes, np.int32)
    self.pair_values = np.asarray(pairs, np.int32)
    self.alloc = np.asarray(list(itertools.product(range(max_count + 1), repeat=NUM_TYPES)), np.int32)
    self.total = int(total)
    self._digest = digest(self.counts, self.pair_values, self.alloc, self.total)

  def sample(self, key: jax.Array) -> DealTask:
    u = jax.random.uniform(key, (2,))
    nc = self.counts.shape[0]
    ci = jnp.minimum(jnp.floor(u[0] * nc).astype(jnp.int32), nc - 1)
    n = jnp.asarray(self.pair_count)[ci]
    pi = jnp.asarray(self.pair_offset)[ci] + jnp.minimum(
        jnp.floor(u[1] * n.astype(jnp.float32)).astype(jnp.int32), n - 1)
    return DealTask(counts=jnp.asarray(self.counts)[ci], values=jnp.asarray(self.pair_values)[pi])

  # -- JAX, one task -------------------------------------------------------------------------
  def utilities(self, task: DealTask) -> tuple[jax.Array, jax.Array]:
    """`(feasible [NA] bool, u [NA, 2] int32)`: raw utilities of every allocation."""
    x = jnp.asarray(self.alloc)
    feasible = jnp.all(x <= task.counts[None], axis=1)
    ua = x @ task.values[0]
    ub = (task.counts[None] - x) @ task.values[1]
    return feasible, jnp.stack([ua, ub], axis=1).astype(jnp.int32)

  def nash_max(self, task: DealTask) -> jax.Array:
    """int32 max_x u_a * u_b over feasible allocations."""
    feasible, u = self.utilities(task)
    return jnp.max(jnp.where(feasible, u[:, 0] * u[:, 1], 0))

  def is_pareto(self, task: DealTask, x: jax.Array) -> jax.Array:
    """bool: allocation `x [3]` (alice's items) is Pareto-optimal."""
    feasible, u = self.utilities(task)
    ux = jnp.stack([x @ task.values[0], (task.counts - x) @ task.values[1]])
    dom = feasible & jnp.all(u >= ux[None], axis=1) & jnp.any(u > ux[None], axis=1)
    return ~jnp.any(dom)


# -- host side (NumPy) -------------------------------------------------------------------------
def _host_utils(counts, values) -> tuple[np.ndarray, np.ndarray]:
  """`(x [A, 3], u [A, 2])` over the feasible allocations of `counts`, lexicographic."""
  counts, values = np.asarray(counts, np.int64), np.asarray(values, np.int64)
  x = np.asarray(list(itertools.product(*[range(int(c) + 1) for c in counts])), np.int64)
  return x, np.stack([x @ values[0], (counts[None] - x) @ values[1]], axis=1)


def nash_allocation(counts, values) -> tuple[int, ...]:
  """Alice's items under the Nash bargaining solution (ties: lexicographically smallest)."""
  x, u = _host_utils(counts, values)
  return tuple(int(a) for a in x[int(np.argmax(u[:, 0] * u[:, 1]))])


def pareto_frontier(counts, values) -> list[tuple[int, ...]]:
  """The Pareto-optimal allocations (alice's items), lexicographic."""
  x, u = _host_utils(counts, values)
  dom = np.all(u[None] >= u[:, None], axis=2) & np.any(u[None] > u[:, None], axis=2)  # [i, j]: j dominates i
  return [tuple(int(a) for a in x[i]) for i in np.flatnonzero(~dom.any(axis=1))]


def upper_bounds(counts, values) -> tuple[int, int]:
  """Each role's best raw value over the allocations that leave the other role > 0."""
  _, u = _host_utils(counts, values)
  return (int(np.max(np.where(u[:, 1] > 0, u[:, 0], 0))), int(np.max(np.where(u[:, 0] > 0, u[:, 1], 0))))
