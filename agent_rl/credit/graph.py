"""State graphs of a rollout group, built and solved on device (shared/ALGORITHMS.md §4.4–§4.6).

The graph credit methods (RewardFlow, GraphGPO, Gated-BEPO) see each task group's
rollouts as one directed graph: nodes are distinct states within the group (exact
`(group_id, hash)` equality), edges are the sampled transitions `state_hash -> next_hash`
of the valid turns. Node tables come from `dense_ids` (sort + unique) with a static size,
edges are index arrays, and every propagation is a bounded `lax.while_loop` of
segment_max / segment_min / segment_sum to a fixed point — no Python dicts, no loops over
groups; all groups are solved at once because no edge crosses a group.

Shapes: with N episodes and T turns, E = N*T edges (one per turn slot, `edge_valid`
masks padding) and V = 2*E node slots (each turn contributes its state and its next state;
an episode has at most T+1 distinct states, so N*T slots would not always suffice), plus
one SUCCESS sink slot at index V where a method asks for it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

import jax
import jax.numpy as jnp

from agent_rl.credit.segments import dense_ids


class StateGraph(NamedTuple):
  """Edges of the group state graphs. All `[E]` with E = N*T (turn (i, t) -> edge i*T + t)."""
  src: jax.Array  # i32 node of state_hash (the anchor state of the turn)
  dst: jax.Array  # i32 node of next_hash (or the sink, see `redirect`)
  edge_valid: jax.Array  # bool, the turn is valid
  num_nodes: int  # static node-table size (2*E, +1 with a sink)


def build(group_id: jax.Array, state_hash: jax.Array, next_hash: jax.Array,
          valid: jax.Array, *, sink: bool = False) -> StateGraph:
  """Node ids for `(group_id, state)` over the states and next states of all valid turns.

  Args:
    group_id: `[N]` i32; state_hash, next_hash: `[N, T]` u32; valid: `[N, T]` bool.
    sink: reserve node slot 2*E for a SUCCESS sink (shared by all groups: it only has
      in-edges, so it never links two groups).
  """
  n, t = valid.shape
  e = n * t
  g = jnp.broadcast_to(group_id.astype(jnp.int32)[:, None], (n, t)).reshape(-1)
  v = valid.reshape(-1)
  ids, _ = dense_ids(
      (jnp.concatenate([g, g]), jnp.concatenate([state_hash.reshape(-1), next_hash.reshape(-1)])),
      jnp.concatenate([v, v]))
  return StateGraph(src=ids[:e], dst=ids[e:], edge_valid=v, num_nodes=2 * e + int(sink))


def sink_id(graph: StateGraph) -> int:
  return graph.num_nodes - 1


def redirect(graph: StateGraph, to_sink: jax.Array) -> StateGraph:
  """Points the edges with `to_sink` `[E]` bool at the sink node (needs `sink=True`)."""
  return graph._replace(dst=jnp.where(to_sink, sink_id(graph), graph.dst))


def node_max(graph: StateGraph, edge_values: jax.Array, at: str = "dst",
             fill: float = 0.0) -> jax.Array:
  """`[V]` max of `edge_values` `[E]` over valid edges ending (`at="dst"`) or starting at
  each node; nodes without such an edge get `fill`."""
  idx = graph.dst if at == "dst" else graph.src
  vals = jnp.where(graph.edge_valid, edge_values.astype(jnp.float32), -jnp.inf)
  m = jax.ops.segment_max(vals, idx, num_segments=graph.num_nodes)
  return jnp.where(jnp.isfinite(m), m, fill)


def max_propagate(graph: StateGraph, value0: jax.Array, gamma, *, max_iters: int = 1000) -> jax.Array:
  """RewardFlow's decay propagation `V <- max(V, gamma * max_{s' in succ(s)} V(s'))`.

  value0: `[V]` initial node values. Iterates until nothing changes or `max_iters`
  (RewardFlow runs a fixed 1000 sweeps; with gamma < 1 and non-negative rewards the fixed
  point max_{s' reachable} gamma^dist(s,s') r(s') is reached within the graph diameter).
  """
  src = jnp.where(graph.edge_valid, graph.src, graph.num_nodes)  # invalid -> dropped segment

  def body(state):
    v, _, it = state
    prop = jax.ops.segment_max(gamma * v[graph.dst], src, num_segments=graph.num_nodes)
    new = jnp.maximum(v, prop)
    return new, jnp.any(new != v), it + 1

  def cond(state):
    return state[1] & (state[2] < max_iters)

  v, _, _ = jax.lax.while_loop(cond, body, (value0.astype(jnp.float32), jnp.array(True), 0))
  return v


def distance_to(graph: StateGraph, target: jax.Array, *, max_iters: int | None = None) -> jax.Array:
  """Unit-cost shortest-path distance from every node to the nearest `target` node.

  target: `[V]` bool. Returns `[V]` f32, +inf where no target is reachable. Bellman-Ford
  sweeps `d(s) <- min(d(s), 1 + min_{s'} d(s'))` (the reverse Dijkstra of GraphGPO), run until
  nothing changes; `max_iters` defaults to the node count (a shortest path never needs more).
  """
  max_iters = graph.num_nodes if max_iters is None else max_iters
  src = jnp.where(graph.edge_valid, graph.src, graph.num_nodes)
  d0 = jnp.where(target, 0.0, jnp.inf).astype(jnp.float32)

  def body(state):
    d, _, it = state
    via = jax.ops.segment_min(d[graph.dst] + 1.0, src, num_segments=graph.num_nodes)
    new = jnp.minimum(d, via)
    return new, jnp.any(new != d), it + 1

  d, _, _ = jax.lax.while_loop(lambda s: s[1] & (s[2] < max_iters), body, (d0, jnp.array(True), 0))
  return d


def mean_backup(graph: StateGraph, reward: jax.Array, cont: jax.Array, gamma, *,
                tol: float = 1e-6, max_iters: int = 1000) -> jax.Array:
  """Empirical Bellman expectation over the sampled transitions (Gated-BEPO's backup).

  V(s) = sum_{e: s -> s'} [r_e + gamma * cont_e * V(s')] / n(s), summing over every sampled
  transition, i.e. the count-weighted mean over distinct successors n(s, s')/n(s).
  reward, cont: `[E]` per edge (cont = 0 on terminal transitions, whose V(s') is 0).
  Nodes without out-edges keep V = 0. Fixed-point iteration (a gamma-contraction) until the
  largest change is <= tol or `max_iters`. Returns `[V]` f32.
  """
  w = graph.edge_valid.astype(jnp.float32)
  n_out = jax.ops.segment_sum(w, graph.src, num_segments=graph.num_nodes)
  inv = jnp.where(n_out > 0, 1.0 / jnp.maximum(n_out, 1.0), 0.0)
  r = jnp.where(graph.edge_valid, reward, 0.0).astype(jnp.float32)
  c = (gamma * cont * w).astype(jnp.float32)

  def body(state):
    v, _, it = state
    new = jax.ops.segment_sum(r + c * v[graph.dst], graph.src, num_segments=graph.num_nodes) * inv
    return new, jnp.max(jnp.abs(new - v)), it + 1

  v0 = jnp.zeros((graph.num_nodes,), jnp.float32)
  v, _, _ = jax.lax.while_loop(lambda s: (s[1] > tol) & (s[2] < max_iters), body,
                               (v0, jnp.array(jnp.inf, jnp.float32), 0))
  return v


def distinct_successors(graph: StateGraph) -> jax.Array:
  """`[V]` i32 number of distinct successor nodes observed from each node."""
  e = graph.src.shape[0]
  pair, _ = dense_ids((graph.src, graph.dst), graph.edge_valid)
  pos = jnp.arange(e, dtype=jnp.int32)
  first = jax.ops.segment_min(jnp.where(graph.edge_valid, pos, e), pair, num_segments=e)
  is_rep = graph.edge_valid & (first[pair] == pos)
  return jax.ops.segment_sum(is_rep.astype(jnp.int32), graph.src, num_segments=graph.num_nodes)


def _mix(a: jax.Array, b: jax.Array) -> jax.Array:
  """A 32-bit mix of two u32 words (murmur3 fmix32 of a combined word)."""
  h = a * jnp.uint32(0x9E3779B1) ^ (b + jnp.uint32(0x7F4A7C15)) * jnp.uint32(0x85EBCA77)
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def hash_ids(group: jax.Array, key: jax.Array, valid: jax.Array, *, table_factor: int = 2) -> tuple[jax.Array, int]:
  """Ids for `(group, key)` pairs by a scatter-min hash table with linear probing (no sort).

  A sort-free alternative to `segments.dense_ids` for the hot (group_id, state_hash) case:
  XLA's CPU sort dominates GiGPO's runtime, while a few scatter rounds do not. Each
  unresolved row looks at its probe slot: an empty slot is claimed by the smallest row index
  aiming at it (segment_min); a row resolves at a slot whose owner has its own key, and
  probes the next slot otherwise. Equal keys move in lockstep, so they always share a slot;
  a slot never changes owner, so distinct keys never share one.

  Args:
    group, key: `[R]` integer arrays (cast to u32); valid: `[R]` bool.
  Returns:
    ids `[R]` i32 in `[0, M)` (equal ids <-> equal keys among valid rows; invalid rows all
    get slot M - 1, which a valid key may also own, so give them weight 0) and the static
    table size M (a power of two >= table_factor * R).
  """
  r = valid.shape[0]
  m = 1 << max(1, int(np.ceil(np.log2(max(table_factor * r, 2)))))
  g = group.astype(jnp.uint32)
  k = key.astype(jnp.uint32)
  rows = jnp.arange(r, dtype=jnp.int32)
  slot0 = (_mix(g, k) & jnp.uint32(m - 1)).astype(jnp.int32)
  empty = jnp.int32(r)

  def body(state):
    owner, slot, done, _ = state
    claim = jax.ops.segment_min(jnp.where(done, empty, rows), jnp.where(done, m, slot), num_segments=m)
    owner = jnp.where(owner == empty, jnp.minimum(claim, empty), owner)  # no claimant: stays empty
    o = owner[slot]
    oc = jnp.clip(o, 0, r - 1)
    same = (o != empty) & (g[oc] == g) & (k[oc] == k)
    new_done = done | same
    slot = jnp.where(new_done, slot, (slot + 1) & (m - 1))
    return owner, slot, new_done, jnp.any(~new_done)

  init = (jnp.full((m,), empty, jnp.int32), slot0, ~valid, jnp.any(valid))
  _, slot, _, _ = jax.lax.while_loop(lambda s: s[3], body, init)
  return jnp.where(valid, slot, m - 1), m
