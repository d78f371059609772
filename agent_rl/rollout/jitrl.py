"""JitRL: training-free test-time improvement of a frozen policy from an experience library
(issue 22 §3; ALGORITHMS.md has no section: the method is built from the issue's spec).

A frozen policy pi plays; every finished episode adds its transitions to a library of
(state, action, return-to-go). At a state s the library's non-parametric estimate
Q^(s, a) modulates the policy in closed form, the KL-regularized improvement

    pi'(a|s) = pi(a|s) exp(Q^(s, a) / beta) / Z(s)
             = argmax_q  E_q[Q^(s, .)] - beta KL(q || pi(.|s)),

with no gradient step. Actions are text of any length, so pi' is sampled by sampling
importance resampling over the TSR candidates (search.py): each turn every episode draws
`num_candidates` actions a_1..a_k ~ pi(.|s) (per-candidate keys) and keeps a_i with
probability softmax_i(Q^(s, a_i) / beta). As k grows the kept action's law tends to pi'; with
an empty library every Q^ ties and the kept action is distributed exactly as pi (a uniform
pick among i.i.d. draws), so the frozen policy is the beta -> inf / no-experience limit.

Keys (exact matches, what `state_hash` gives: equal states -> equal hashes): an action is
identified by its transition (s, s'), the env's `state_hash` before and `next_hash` after it
(in the deterministic worlds of this repo, actions with the same outcome are the same action
for Q; every invalid action leaves s' = s and shares one entry). Q^(s, a) is the mean
return-to-go G_t = sum_{j >= t} gamma^(j - t) r_j over the library's (s, s') transitions; an
action the library has not seen at a known state gets V^(s), the mean G_t of the state's
transitions (pi's own value there: no preference); an unknown state gives every candidate 0.

The library is a fixed-capacity table of sorted keys (`Library`, a pytree passed to the
rollout as data: a new round's library does not recompile anything); lookups are
`searchsorted`. Built on the host from EpisodeBatches (`LibraryBuilder`), the same way for
compiled and host rollouts.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.credit.gigpo import discounted_returns

EMPTY = np.uint32(0xFFFFFFFF)  # the sentinel key of unused slots (sorts last)


def transition_key(s: jax.Array, s2: jax.Array) -> jax.Array:
  """uint32 key of a transition (s, s') (`[...]` uint32 each): a murmur3-style mix; the
  sentinel value is mapped away so a real key never reads as an empty slot."""
  x = s.astype(jnp.uint32) * jnp.uint32(0x9E3779B1) ^ (s2.astype(jnp.uint32) + jnp.uint32(0x7F4A7C15))
  x = (x ^ (x >> 16)) * jnp.uint32(0x85EBCA6B)
  x = (x ^ (x >> 13)) * jnp.uint32(0xC2B2AE35)
  x = x ^ (x >> 16)
  return jnp.where(x == jnp.uint32(EMPTY), jnp.uint32(EMPTY - 1), x)


def _state_key(s: jax.Array) -> jax.Array:
  s = s.astype(jnp.uint32)
  return jnp.where(s == jnp.uint32(EMPTY), jnp.uint32(EMPTY - 1), s)


@struct.dataclass
class Library:
  """Sorted transition keys `[M]` with their mean return-to-go, and sorted state keys `[S]`
  with theirs (unused slots: key EMPTY, value 0). `num_transitions`: how many went in."""
  keys: jax.Array    # u32 [M]
  q: jax.Array       # f32 [M]
  states: jax.Array  # u32 [S]
  v: jax.Array       # f32 [S]
  num_transitions: jax.Array  # i32 []

  @classmethod
  def empty(cls, capacity: int) -> "Library":
    return cls(keys=jnp.full((capacity,), EMPTY, jnp.uint32), q=jnp.zeros((capacity,), jnp.float32),
               states=jnp.full((capacity,), EMPTY, jnp.uint32),
               v=jnp.zeros((capacity,), jnp.float32), num_transitions=jnp.int32(0))


def _lookup(keys: jax.Array, values: jax.Array, x: jax.Array):
  """(value, found) of each key in x from a sorted table."""
  i = jnp.clip(jnp.searchsorted(keys, x), 0, keys.shape[0] - 1)
  hit = (keys[i] == x) & (x != jnp.uint32(EMPTY))
  return jnp.where(hit, values[i], 0.0), hit


def q_values(lib: Library, s: jax.Array, s2: jax.Array) -> jax.Array:
  """Q^(s, a) `[...]` f32 of transitions (s, s'): the library's mean return-to-go of (s, s'),
  else V^(s), else 0 (module docstring)."""
  q, hit = _lookup(lib.keys, lib.q, transition_key(s, s2))
  v, _ = _lookup(lib.states, lib.v, _state_key(s))
  return jnp.where(hit, q, v)


def select(q: jax.Array, live: jax.Array, key: jax.Array, beta: float) -> jax.Array:
  """Resampling step: `[n]` the kept candidate of each row, drawn with probability
  softmax(q / beta) over its live candidates. q, live: `[n, k]`; a row with no live
  candidate keeps candidate 0; key: one PRNG key per row `[n]`."""
  logits = jnp.where(live, q / beta, -jnp.inf)
  logits = jnp.where(jnp.any(live, axis=1, keepdims=True), logits,
                     jnp.where(jnp.arange(q.shape[1])[None, :] == 0, 0.0, -jnp.inf))
  return jax.vmap(jax.random.categorical)(key, logits)


@dataclasses.dataclass
class LibraryBuilder:
  """Accumulates transitions on the host; `library()` is the fixed-capacity table.

  capacity: slots of each table (a library over capacity keeps the most visited keys and
  says so in `dropped`); gamma: the return-to-go discount."""
  capacity: int = 4096
  gamma: float = 1.0
  _t_sum: dict = dataclasses.field(default_factory=dict)
  _t_n: dict = dataclasses.field(default_factory=dict)
  _s_sum: dict = dataclasses.field(default_factory=dict)
  _s_n: dict = dataclasses.field(default_factory=dict)
  dropped: int = 0
  transitions: int = 0

  def __post_init__(self):
    if self.capacity < 1:
      raise ValueError(f"jitrl.capacity must be >= 1, got {self.capacity}")
    if not 0.0 <= self.gamma <= 1.0:
      raise ValueError(f"jitrl.gamma must be in [0, 1], got {self.gamma}")

  def add(self, batch) -> None:
    """Every valid turn of an EpisodeBatch: key (state_hash, next_hash), value G_t."""
    g = np.asarray(discounted_returns(batch.reward, batch.valid, self.gamma))
    valid = np.asarray(batch.valid)
    tk = np.asarray(transition_key(batch.state_hash, batch.next_hash))[valid]
    sk = np.asarray(_state_key(batch.state_hash))[valid]
    for k, s, x in zip(tk.tolist(), sk.tolist(), g[valid].astype(np.float64).tolist()):
      self._t_sum[k] = self._t_sum.get(k, 0.0) + x
      self._t_n[k] = self._t_n.get(k, 0) + 1
      self._s_sum[s] = self._s_sum.get(s, 0.0) + x
      self._s_n[s] = self._s_n.get(s, 0) + 1
    self.transitions += int(valid.sum())

  def _table(self, sums: dict, counts: dict):
    keys = sorted(counts, key=lambda k: (-counts[k], k))  # most visited first if over capacity
    self.dropped += max(len(keys) - self.capacity, 0)
    keys = sorted(keys[:self.capacity])
    out_k = np.full((self.capacity,), EMPTY, np.uint32)
    out_v = np.zeros((self.capacity,), np.float32)
    out_k[:len(keys)] = keys
    out_v[:len(keys)] = [sums[k] / counts[k] for k in keys]
    return jnp.asarray(out_k), jnp.asarray(out_v)

  def library(self) -> Library:
    self.dropped = 0
    keys, q = self._table(self._t_sum, self._t_n)
    states, v = self._table(self._s_sum, self._s_n)
    return Library(keys=keys, q=q, states=states, v=v,
                   num_transitions=jnp.int32(self.transitions))


def check_config(beta: float, capacity: Optional[int] = None) -> None:
  if not beta > 0 or not np.isfinite(beta):
    raise ValueError(f"jitrl.beta must be a finite float > 0, got {beta}")
  if capacity is not None and capacity < 1:
    raise ValueError(f"jitrl.capacity must be >= 1, got {capacity}")
