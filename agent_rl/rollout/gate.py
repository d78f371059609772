"""Selective rollout gate (ALGORITHMS.md §4.9; zhiyuanZhai20/selective-rollout).

At turn K, a group of G >= 2 trajectories is *cut* when its members' action prefixes have
barely diverged or most have already ended:

    prefix_i = first K actions of trajectory i, padded with END (one symbol per action)
    d_K = mean_{i<j} Levenshtein(prefix_i, prefix_j) / K
    t_K = fraction of trajectories that ended before step K (len <= K - 1)
    cut  iff  d_K < threshold  or  t_K >= ended_frac,   evaluated only if trajectory 0
                                                        reached K steps.

A cut terminates the group's live trajectories at rollout time and the group contributes
no loss (the episode loop zeroes its loss mask). Actions are symbols by content: the
rollout hashes each action's tokens (`action_symbols`), so equal texts are equal symbols.
"""
from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp

END = jnp.uint32(0xFFFFFFFF)


@dataclasses.dataclass(frozen=True)
class GateConfig:
  turn: int = 10  # K
  threshold: float = 0.12
  ended_frac: float = 0.9

  def __post_init__(self):
    if self.turn < 1:
      raise ValueError(f"GateConfig.turn (K) must be >= 1, got {self.turn}")


def levenshtein(a: jax.Array, b: jax.Array) -> jax.Array:
  """Edit distance of two symbol sequences `[K]` (insert/delete/substitute cost 1).

  Row recurrence D[i, j] = min(D[i-1, j] + 1, D[i-1, j-1] + [a_i != b_j], D[i, j-1] + 1);
  the last (sequential) term is a running min: D[i, j] = j + cummin_{j'<=j}(x_j' - j').
  """
  k = a.shape[0]
  cols = jnp.arange(k + 1)

  def row(i, prev):
    sub = prev[:-1] + (a[i - 1] != b).astype(jnp.int32)
    x = jnp.concatenate([jnp.array([i]), jnp.minimum(prev[1:] + 1, sub)])
    return cols + jax.lax.cummin(x - cols)

  return jax.lax.fori_loop(1, k + 1, row, cols)[k]


def gate_groups(symbols: jax.Array, num_turns: jax.Array, group_size: int, cfg: GateConfig):
  """Gate decision per group.

  Args:
    symbols: `[N, T]` uint32 action symbols (N = groups x G, members contiguous), T >= K.
    num_turns: `[N]` int32 turns taken so far (the trajectory length).
  Returns:
    cut `[N // G]` bool, d_K `[N // G]` f32, t_K `[N // G]` f32.
  """
  k, g = cfg.turn, group_size
  n = symbols.shape[0]
  if g < 2:
    z = jnp.zeros((n // g,), jnp.float32)
    return jnp.zeros((n // g,), bool), z, z
  pref = jnp.where(jnp.arange(k)[None, :] < num_turns[:, None], symbols[:, :k], END)
  pref = pref.reshape(n // g, g, k)
  pairs = jnp.asarray(list(itertools.combinations(range(g), 2)), jnp.int32)  # [P, 2]
  dist = jax.vmap(jax.vmap(levenshtein, (0, 0)), (0, 0))(pref[:, pairs[:, 0]], pref[:, pairs[:, 1]])
  d_k = jnp.mean(dist.astype(jnp.float32), axis=1) / k
  lens = num_turns.reshape(n // g, g)
  t_k = jnp.mean((lens <= k - 1).astype(jnp.float32), axis=1)
  evaluated = lens[:, 0] >= k
  cut = evaluated & ((d_k < cfg.threshold) | (t_k >= cfg.ended_frac))
  return cut, d_k, t_k
