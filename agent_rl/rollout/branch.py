"""Branched rollouts: a group's G episodes share the first b turns of one episode, then go
their own ways from the state that episode reached (FutureBridge-OPD's branching from
intermediate student states; TreeRL-style prefix sharing).

Plain GRPO groups compare G episodes from the same *initial* state, so late turns are
compared across different histories. Branching puts the group's comparison (and, for
on-policy distillation, the teacher's scoring) at a state the student itself reached b turns
in: at the start of turn b, every member of a group whose root (member 0) is still playing
becomes a copy of the root (env state, history, KV cache or window samples, turn records:
the whole episode carry is gathered by rows, as TSR's search does), keeping its own sampling
key stream, so the continuations differ. A JAX env's state is a pytree, so the branch is a
gather and costs no env replay. A host env's state lives in its worker: the host loops
(bridge.py, overlap.py) ask it to `clone_rows(dst, src)` at the same turn, rows from
`branch_sources` (the one rule for both), and a text game replays the root's reset and
commands into the copy's game (envs/host/text_env.py).

Turn b per group is drawn uniformly from [min_turn, max_turn] with the group root's episode
key (deterministic per rollout key). A group whose root ended before b is not branched. The
copies' first b turns are the root's tokens: they stay in the batch (the episode's return and
turn records are whole) but leave the loss (`EpisodeCarry.shared_turns`: their tokens get loss
mask 0 in `EpisodeLoop.finish`), so the shared prefix is trained once, through the root.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from agent_rl.rollout.carry import map_rows

_SALT = 0xB4A9C4  # the branch-turn draw's stream, apart from the sampling keys' turns


@dataclasses.dataclass(frozen=True)
class BranchConfig:
  min_turn: int = 1
  max_turn: int = 1

  def __post_init__(self):
    if not 1 <= self.min_turn <= self.max_turn:
      raise ValueError(f"BranchConfig: need 1 <= min_turn <= max_turn, got min_turn="
                       f"{self.min_turn}, max_turn={self.max_turn} (turn 0 has no prefix)")


def branch_turns(episode_keys: jax.Array, group_size: int, cfg: BranchConfig) -> jax.Array:
  """`[N]` i32: the turn at which each episode's group branches (from its root's key)."""
  root = episode_keys[::group_size]
  draw = jax.vmap(lambda k: jax.random.randint(
      jax.random.fold_in(k, _SALT), (), cfg.min_turn, cfg.max_turn + 1))(root)
  return jnp.repeat(draw.astype(jnp.int32), group_size)


def branch_sources(alive: jax.Array, t, turns: jax.Array, group_size: int):
  """`([N] i32, [N] bool)`: the row each episode becomes at turn t (itself where it does not
  branch) and whether it is a copy: members (not the root) of a group with `turns == t` whose
  root is alive. alive, turns: `[N]` (groups are G consecutive rows, the root first)."""
  n = alive.shape[0]
  idx = jnp.arange(n, dtype=jnp.int32)
  root = idx - idx % group_size
  copy = (turns == t) & alive[root] & (idx != root)
  return jnp.where(copy, root, idx), copy


def branch(c, t, turns: jax.Array, group_size: int):
  """The carry after branching the groups whose turn is t: copies (`branch_sources`) become
  their root's carry row, keeping their sample keys; their `shared_turns` is set to t.
  c: EpisodeCarry with leading axis N; turns: `[N]`."""
  rows, copy = branch_sources(c.alive, t, turns, group_size)
  out = map_rows(c, c.alive.shape[0], lambda x: jnp.take(x, rows, axis=0))
  return out.replace(sample_keys=c.sample_keys,
                     shared_turns=jnp.where(copy, jnp.asarray(t, jnp.int32), c.shared_turns))


