"""Scripted bargainers: the held-out counterparts DealLite plays role 1 with (`opponent=`).

Rule-based partners in the spirit of Lewis et al. 2017's evaluation against fixed agents
(arXiv:1706.05125 §6); IB-RL evaluates a policy trained in self-play against them. Each is a
`Bargainer`: on its turn it
  1. accepts the other role's standing offer when that gives it at least `accept_pct`% of
     its total (integer test `100 * u_self >= accept_pct * total`);
  2. else, when `walk_after > 0` and it has already made `walk_after` offers, walks away;
  3. else offers its `offer` allocation (a fixed function of the task; the scripted partner
     sees both value vectors: it is part of the env, not a player with private information).
Registered offers (`BARGAINERS`):
  fair    accepts >= 50%; offers the allocation maximizing min(u_self, u_other) (ties: the
          larger u_self + u_other, then the lexicographically smallest alice allocation)
  greedy  accepts >= 80%; offers itself every item of the types it values (> 0), the rest
          to the other role
  walker  accepts >= 60%; offers the allocation best for the other role among those giving it
          >= 60% (ties: larger u_self, then lexicographic); walks instead of a 3rd offer
Pure JAX, one example (vmap for batches); never raises.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from agent_rl.envs.deal_lite.game import DealTask, GameTables
from agent_rl.registry import Registry

BARGAINERS = Registry("scripted bargainer")

# Action kinds shared with the env's parser.
OFFER, ACCEPT, WALK, INVALID = 0, 1, 2, -1


def _first(mask: jax.Array) -> jax.Array:
  return jnp.argmax(mask).astype(jnp.int32)


def _views(tables: GameTables, task: DealTask, role: int):
  """`(feasible [NA], u_self [NA], u_other [NA])` for `role` (0 alice, 1 bob)."""
  feasible, u = tables.utilities(task)
  return feasible, u[:, role], u[:, 1 - role]


def _keep(tables: GameTables, task: DealTask, role: int, idx: jax.Array) -> jax.Array:
  """What `role` keeps `[3]` under allocation row idx (rows are alice's items)."""
  x = jnp.asarray(tables.alloc)[idx]
  return x if role == 0 else task.counts - x


def fair_offer(tables: GameTables, task: DealTask, role: int, accept_pct: int) -> jax.Array:
  del accept_pct
  feasible, us, uo = _views(tables, task, role)
  lo = jnp.where(feasible, jnp.minimum(us, uo), -1)
  m = feasible & (lo == jnp.max(lo))
  s = jnp.where(m, us + uo, -1)
  return _keep(tables, task, role, _first(m & (s == jnp.max(s))))


def greedy_offer(tables: GameTables, task: DealTask, role: int, accept_pct: int) -> jax.Array:
  del tables, accept_pct
  return jnp.where(task.values[role] > 0, task.counts, 0).astype(jnp.int32)


def demand_offer(tables: GameTables, task: DealTask, role: int, accept_pct: int) -> jax.Array:
  feasible, us, uo = _views(tables, task, role)
  m = feasible & (100 * us >= accept_pct * tables.total)   # keeping everything always qualifies
  o = jnp.where(m, uo, -1)
  m &= o == jnp.max(o)
  s = jnp.where(m, us, -1)
  return _keep(tables, task, role, _first(m & (s == jnp.max(s))))


@dataclasses.dataclass(frozen=True)
class Bargainer:
  """accept_pct: int percent of its total it accepts; walk_after: offers made before it walks
  (0 = never); offer: `(tables, task, role, accept_pct) -> keep [3] int32`."""
  accept_pct: int
  walk_after: int
  offer: Callable

  def act(self, tables: GameTables, task: DealTask, role: int, offer_by: jax.Array,
          alloc: jax.Array, offers_made: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(kind int32, keep [3] int32)` on `role`'s turn. offer_by: int32 who made the standing
    offer (-1 none); alloc: [3] its alice allocation; offers_made: int32 this role's offers."""
    mine = jnp.where(role == 0, alloc @ task.values[0], (task.counts - alloc) @ task.values[1])
    accept = (offer_by == 1 - role) & (100 * mine >= self.accept_pct * tables.total)
    walk = ~accept & (self.walk_after > 0) & (offers_made >= self.walk_after)
    kind = jnp.where(accept, ACCEPT, jnp.where(walk, WALK, OFFER)).astype(jnp.int32)
    return kind, self.offer(tables, task, role, self.accept_pct).astype(jnp.int32)


BARGAINERS.register("fair", Bargainer(accept_pct=50, walk_after=0, offer=fair_offer))
BARGAINERS.register("greedy", Bargainer(accept_pct=80, walk_after=0, offer=greedy_offer))
BARGAINERS.register("walker", Bargainer(accept_pct=60, walk_after=2, offer=demand_offer))
