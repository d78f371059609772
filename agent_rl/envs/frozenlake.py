"""FrozenLake as a pure-JAX text environment (gymnasium FrozenLake-v1 dynamics, RAGEN's text).

Dynamics (gymnasium `FrozenLake-v1`): actions 0 Left, 1 Down, 2 Right, 3 Up; moves are
clamped at the border; landing on H (hole) or G (goal) ends the episode, G pays 1. With
`is_slippery` the executed direction is the intended one with probability `success_rate`
(1/3) and each perpendicular one with (1 - success_rate) / 2 — gymnasium's rule. RAGEN
(Wang et al. 2025, arXiv:2504.20073) plays it as text: grid glyphs P player, _ frozen (and
start), O hole, G goal, X player in a hole, √ player on the goal; actions are words in
`<answer>Left || Up</answer>` (up to `max_actions`; execution stops when the episode ends).
Reward terms (weighted by `reward_weights`): success (reached G), step (moves executed),
format (1 for an invalid turn: no move, counts as one step). Done at H/G or `max_steps`
(base.step_limit; `info["truncated"]`).

Tasks are maps: `sample_task(key)` draws gymnasium's `generate_random_map` (F with prob
`p`, S top-left, G bottom-right, resampled until a path exists) in JAX; `task_from_map(
["SFFF", "FHFH", ...])` takes gymnasium-style string lists. Experts: `solve` (BFS plan for
deterministic maps; for slippery ones the most-likely path of the optimal policy) and
`policy` (value iteration: actions maximizing the probability of reaching G).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import ENVS, Text, fingerprint, step_limit, validate_fields
from agent_rl.envs.actions import ActionParser
from agent_rl.envs.render import GridRenderer

GLYPHS = ("P", "_", "O", "G", "X", "√")     # RAGEN's GRID_LOOKUP codes 0..5
ACTIONS = ("Left", "Down", "Right", "Up")   # gymnasium action ids 0..3
REWARD_NAMES = ("success", "step", "format")
F, H, G, S = 0, 1, 2, 3                      # map cell codes
_LETTERS = {"F": F, "H": H, "G": G, "S": S}
_DELTA = np.array([[0, -1], [1, 0], [0, 1], [-1, 0]], np.int32)


@struct.dataclass
class FrozenLakeTask:
  """A map `desc [n, n] int32` (F=0, H=1, G=2, S=3) and the start cell `start` int32 (flat)."""
  desc: jax.Array
  start: jax.Array


@struct.dataclass
class FrozenLakeState:
  desc: jax.Array
  pos: jax.Array     # int32 flat cell index
  steps: jax.Array   # int32
  done: jax.Array    # bool
  key: jax.Array     # PRNG key for slippery moves


def random_map(key: jax.Array, size: int, p: float = 0.8, max_tries: int = 1000) -> jax.Array:
  """gymnasium's generate_random_map in JAX: `desc [size, size] int32` with an S->G path."""
  def reachable(desc):
    free = desc != H
    def grow(_, r):
      up = jnp.pad(r[1:], ((0, 1), (0, 0)))
      down = jnp.pad(r[:-1], ((1, 0), (0, 0)))
      left = jnp.pad(r[:, 1:], ((0, 0), (0, 1)))
      right = jnp.pad(r[:, :-1], ((0, 0), (1, 0)))
      return r | ((up | down | left | right) & free)
    start = jnp.zeros((size, size), bool).at[0, 0].set(True)
    return jax.lax.fori_loop(0, size * size, grow, start)[-1, -1]

  def draw(k):
    desc = jnp.where(jax.random.uniform(k, (size, size)) < p, F, H).astype(jnp.int32)
    return desc.at[0, 0].set(S).at[-1, -1].set(G)

  def body(c):
    k, _, t = c
    k, sub = jax.random.split(k)
    return k, draw(sub), t + 1

  init = (key, jnp.zeros((size, size), jnp.int32), jnp.int32(0))
  _, desc, _ = jax.lax.while_loop(lambda c: (c[2] == 0) | (~reachable(c[1]) & (c[2] < max_tries)), body, init)
  return desc


@ENVS.register("frozenlake")
@dataclasses.dataclass(frozen=True)
class FrozenLake:
  """FrozenLake text env. `make("frozenlake", tokenizer=tok, size=4, is_slippery=True)`."""
  tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)
  size: int = 4
  p: float = 0.8
  is_slippery: bool = True
  success_rate: float = 1.0 / 3.0
  max_steps: int = 100
  max_actions: int = 1
  reward_weights: tuple = (1.0, 0.0, -0.1)
  chunk: int = 4
  max_answer_bytes: int = 96
  grid: GridRenderer = dataclasses.field(init=False, repr=False)
  parser: ActionParser = dataclasses.field(init=False, repr=False)

  reward_names = REWARD_NAMES

  def __post_init__(self):
    validate_fields(self, REWARD_NAMES, ("max_steps", "max_actions", "chunk"))
    if int(self.size) < 2:
      raise ValueError(f"size must be >= 2, got {self.size}")
    if not 0.0 < self.p <= 1.0:
      raise ValueError(f"p (probability of a frozen cell) must be in (0, 1], got {self.p}")
    if not 0.0 <= self.success_rate <= 1.0:
      raise ValueError(f"success_rate must be in [0, 1], got {self.success_rate}")
    object.__setattr__(self, "grid", GridRenderer(self.tokenizer, GLYPHS, (self.size,) * 2, self.chunk))
    words = {a.lower(): i for i, a in enumerate(ACTIONS)}
    object.__setattr__(self, "parser", ActionParser(
        self.tokenizer, words, max_actions=self.max_actions, max_answer_bytes=self.max_answer_bytes))

  # -- text -----------------------------------------------------------------------------------
  @property
  def obs_len(self) -> int:
    return self.grid.obs_len

  def _codes(self, desc, pos):
    n = self.size
    at = jnp.arange(n * n).reshape(n, n) == pos
    base = jnp.where(desc == H, 2, jnp.where(desc == G, 3, 1))
    player = jnp.where(desc == H, 4, jnp.where(desc == G, 5, 0))
    return jnp.where(at, player, base)

  def render(self, state) -> Text:
    return self.grid.render(self._codes(state.desc, state.pos if hasattr(state, "pos") else state.start))

  def render_text(self, state) -> str:
    return self.grid.text(self._codes(state.desc, state.pos if hasattr(state, "pos") else state.start))

  @property
  def instruction(self) -> str:
    return ("You are walking on a frozen lake. Reach the goal (G) without falling into a hole (O). "
            "Symbols: P you, _ frozen ice, O hole, G goal, X you in a hole, √ you on the goal. "
            + ("The ice is slippery: you may move perpendicular to the chosen direction. " if self.is_slippery else "")
            + f"Actions: Left, Down, Right, Up. Answer with up to {self.max_actions} action(s) "
            "separated by ||, e.g. <answer>Down || Right</answer>.")

  # -- tasks ----------------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> FrozenLakeTask:
    return FrozenLakeTask(desc=random_map(key, self.size, self.p), start=jnp.int32(0))

  def task_from_map(self, rows: Sequence[str]) -> FrozenLakeTask:
    """gymnasium-style map, e.g. ["SFFF", "FHFH", "FFFH", "HFFG"]; exactly one S."""
    rows = list(rows)
    if len(rows) != self.size or any(len(r) != self.size for r in rows):
      raise ValueError(f"map must be {self.size}x{self.size} (env size), got {[len(r) for r in rows]}")
    bad = {c for r in rows for c in r} - set(_LETTERS)
    if bad:
      raise ValueError(f"map has unknown letters {sorted(bad)}; known: S, F, H, G")
    desc = np.array([[_LETTERS[c] for c in r] for r in rows], np.int32)
    starts = np.flatnonzero(desc == S)
    if len(starts) != 1:
      raise ValueError(f"map needs exactly one S, found {len(starts)}")
    return FrozenLakeTask(desc=jnp.asarray(desc), start=jnp.int32(starts[0]))

  # -- dynamics -------------------------------------------------------------------------------
  def reset(self, key: jax.Array, task: FrozenLakeTask):
    state = FrozenLakeState(desc=task.desc, pos=jnp.asarray(task.start, jnp.int32),
                            steps=jnp.int32(0), done=jnp.bool_(False), key=key)
    return state, self.render(state)

  def _move(self, pos, direction):
    n = self.size
    d = jnp.asarray(_DELTA)[direction]
    r = jnp.clip(pos // n + d[0], 0, n - 1)
    c = jnp.clip(pos % n + d[1], 0, n - 1)
    return r * n + c

  def step(self, state: FrozenLakeState, action: Text):
    acts = self.parser(action)
    active = ~state.done
    flat = state.desc.ravel()
    key, sub = jax.random.split(state.key)
    u = jax.random.uniform(sub, (self.max_actions,))
    fail = (1.0 - self.success_rate) / 2.0

    def one(carry, k):
      pos, ended, moves = carry
      live = active & (k < acts.count) & ~ended
      a = jnp.maximum(acts.ids[k], 0)
      if self.is_slippery:   # gymnasium's order [(a-1)%4, a, (a+1)%4] with [fail, success, fail]
        a = jnp.where(u[k] < fail, (a - 1) % 4, jnp.where(u[k] < fail + self.success_rate, a, (a + 1) % 4))
      new = self._move(pos, a)
      pos = jnp.where(live, new, pos)
      ended = ended | (live & ((flat[pos] == H) | (flat[pos] == G)))
      return (pos, ended, moves + live.astype(jnp.int32)), None

    (pos, ended, moves), _ = jax.lax.scan(   # unrolled: fuses with parse/render
        one, (state.pos, jnp.bool_(False), jnp.int32(0)), jnp.arange(self.max_actions), unroll=True)
    invalid = active & ~acts.valid
    steps, done, truncated = step_limit(state.steps, moves + invalid.astype(jnp.int32), active,
                                        ended, state.done, self.max_steps)
    success = flat[pos] == G
    new = state.replace(pos=pos, steps=steps, done=done, key=key)
    terms = jnp.stack([ended & success, moves, invalid]).astype(jnp.float32)
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    info = {
        "success": success,
        "valid_action": acts.valid,
        "state_hash": self.state_hash(new),
        "reward_terms": terms,
        "fell": flat[pos] == H,
        "truncated": truncated,
    }
    return new, self.render(new), reward, done, info

  # -- experts (host) -------------------------------------------------------------------------
  def transitions(self, task: FrozenLakeTask) -> np.ndarray:
    """`P [nS, 4, nS]` transition probabilities (terminal cells absorb)."""
    desc = np.asarray(task.desc)
    n = self.size
    P = np.zeros((n * n, 4, n * n))
    for s in range(n * n):
      for a in range(4):
        if desc.flat[s] in (H, G):
          P[s, a, s] = 1.0
          continue
        outcomes = ([((a - 1) % 4, (1 - self.success_rate) / 2), (a, self.success_rate),
                     ((a + 1) % 4, (1 - self.success_rate) / 2)] if self.is_slippery else [(a, 1.0)])
        for b, prob in outcomes:
          r = min(max(s // n + _DELTA[b, 0], 0), n - 1)
          c = min(max(s % n + _DELTA[b, 1], 0), n - 1)
          P[s, a, r * n + c] += prob
    return P

  def policy(self, task: FrozenLakeTask, tol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """Value iteration on P(reach G): `(actions [nS] int, values [nS] float)`."""
    P = self.transitions(task)
    goal = np.asarray(task.desc).ravel() == G
    v = goal.astype(float)
    for _ in range(100_000):
      q = P @ v                       # [nS, 4]
      new = np.where(goal, 1.0, q.max(axis=1))
      if np.max(np.abs(new - v)) < tol:
        v = new
        break
      v = new
    return (P @ v).argmax(axis=1), v

  def state_hash(self, state: FrozenLakeState) -> jax.Array:
    """uint32 fingerprint of (map, position): the anchor-state key of GiGPO-style credit."""
    return fingerprint(state.desc, state.pos[None])

  def solve(self, task: FrozenLakeTask) -> list[str]:
    """Deterministic: a shortest S->G plan (BFS). Slippery: the optimal policy's actions along
    its most likely successors (ties -> the intended direction), stopping at G or a repeat."""
    desc, n = np.asarray(task.desc), self.size
    start = int(task.start)
    if not self.is_slippery:
      parent = {start: None}
      queue = collections.deque([start])
      while queue:
        s = queue.popleft()
        if desc.flat[s] == G:
          plan = []
          while parent[s] is not None:
            s, a = parent[s]
            plan.append(ACTIONS[a])
          return plan[::-1]
        if desc.flat[s] == H:
          continue
        for a in range(4):
          r = min(max(s // n + _DELTA[a, 0], 0), n - 1)
          c = min(max(s % n + _DELTA[a, 1], 0), n - 1)
          t = r * n + c
          if t not in parent:
            parent[t] = (s, a)
            queue.append(t)
      raise RuntimeError("FrozenLake map has no path from S to G")
    actions, _ = self.policy(task)
    P = self.transitions(task)
    plan, s, seen = [], start, set()
    while desc.flat[s] != G and s not in seen and len(plan) < self.max_steps:
      seen.add(s)
      a = int(actions[s])
      plan.append(ACTIONS[a])
      intended = min(max(s // n + _DELTA[a, 0], 0), n - 1) * n + min(max(s % n + _DELTA[a, 1], 0), n - 1)
      best = P[s, a].max()
      s = intended if P[s, a, intended] >= best - 1e-12 else int(P[s, a].argmax())
    return plan
