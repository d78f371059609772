"""The episode loop's carry: typed records of what a rollout holds between turns.

`EpisodeCarry` is the state of `lax.scan` over turns (compiled rollout) and what the host
bridge passes between its jitted steps. N episodes, T turns, O observation tokens, Lb
history slots. Its `layout` field belongs to the history layout (history.py): the KV cache
and last logits for concatenated history, the per-turn samples for windowed history.

Env `info` becomes two kinds of turn-level columns `[N, T]`: the fixed fields of
`TurnRecord` (read from info when the env emits them, zeros otherwise) and `extras`, one
column per other info key (dtype kept) plus one per reward term (`reward_terms/<name>`,
names from `env.reward_names`, or the term's index when the env has none).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
from flax import struct

from agent_rl.envs.base import Text
from agent_rl.rollout.layout import TokenBuffer

# info keys with a fixed place in the EpisodeBatch; every other key is an extra.
FIXED_INFO = ("success", "valid_action", "state_hash", "reward_terms", "agent_id", "milestone",
              "fatal", "next_agent")


@struct.dataclass
class TurnRecord:
  """The fixed turn-level fields of the EpisodeBatch, `[N, T]` each (see batch.py)."""
  reward: jax.Array        # f32
  done: jax.Array          # bool
  valid: jax.Array         # bool
  success: jax.Array       # bool
  valid_action: jax.Array  # bool
  state_hash: jax.Array    # u32, state before the action
  next_hash: jax.Array     # u32, state after the action
  agent_id: jax.Array      # i32
  milestone: jax.Array     # bool
  fatal: jax.Array         # bool

  @classmethod
  def zeros(cls, n: int, t: int) -> "TurnRecord":
    return cls(**{f.name: jnp.zeros((n, t), d) for f, d in zip(dataclasses.fields(cls), _DTYPES)})

  def write(self, t, mask: jax.Array, values: Mapping[str, jax.Array]) -> "TurnRecord":
    """Column t set to `values[name]` where `mask [N]`, 0 elsewhere (dtypes kept)."""
    fields = zip(dataclasses.fields(self), _DTYPES)
    return self.replace(**{f.name: getattr(self, f.name).at[:, t].set(
        jnp.where(mask, values[f.name], 0).astype(d)) for f, d in fields})

  def as_dict(self) -> dict:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


_DTYPES = (jnp.float32, bool, bool, bool, bool, jnp.uint32, jnp.uint32, jnp.int32, bool, bool)


@struct.dataclass
class EpisodeCarry:
  """What the episode loop carries from turn to turn (shapes per field)."""
  env_state: Any              # the env state pytree, leading axis N
  obs: Text                   # last observation: tokens [N, O] int32, length [N] int32
  history: TokenBuffer        # packed episode history [N, Lb]
  cursor: jax.Array           # [N] i32: next free history slot
  turn_start: jax.Array       # [N, T] i32: history slot where turn t's block starts
  turns: TurnRecord           # [N, T] fixed turn-level fields
  extras: dict                # name -> [N, T]: every other info key (see module docstring)
  action_symbols: jax.Array   # [N, T] u32: fingerprint of each action's tokens (gate.py)
  alive: jax.Array            # [N] bool: the episode still plays
  context_truncated: jax.Array  # [N] bool: ended by the concatenated context budget
  gate_cut: jax.Array         # [N] bool: its group was cut by the selective gate
  shared_turns: jax.Array     # [N] i32: first turns copied from its group's root (branch.py)
  teacher_turns: jax.Array    # [N, T] bool: turns the teacher took over (intervene.py)
  episode_return: jax.Array   # [N] f32: sum of rewards so far (TSR beam score)
  num_turns: jax.Array        # [N] i32: turns played
  window_dropped_turns: jax.Array      # [N] i32: window turns dropped for the token budget
  window_truncated_samples: jax.Array  # [N] i32: samples that dropped at least one turn
  action_budget_hit: jax.Array  # [N] i32: actions that ran out of tokens before a stop
  state_hash: jax.Array       # [N] u32: fingerprint of the current env state
  sample_keys: jax.Array      # [N, 2] u32: per-episode sampling keys
  decode_steps: jax.Array     # [] i32: decode steps run (all rows together)
  agent: jax.Array            # [N] i32: the agent who acts the next turn (multi-agent envs)
  layout: Any                 # the history layout's own state (history.py)


def map_rows(tree: Any, n: int, fn) -> Any:
  """Applies `fn` to every leaf with a leading episode axis of size n (scalars pass): how TSR
  clones and selects candidates and how a branch copies its root (search.py, branch.py)."""
  return jax.tree.map(lambda x: fn(x) if (x.ndim >= 1 and x.shape[0] == n) else x, tree)


def extra_columns(info: Mapping[str, Any], n: int,
                  reward_names: Optional[Sequence[str]] = None) -> dict[str, tuple]:
  """`{extra name: (info key, term index or None, dtype)}` of a batched info `[N, ...]`.

  Works on arrays and on `jax.ShapeDtypeStruct`s (the spec from `jax.eval_shape`). Errors
  name the key: an extra must be one value per episode, `reward_terms` `[N, K]`.
  """
  cols = {}
  for key in sorted(info):
    v = info[key]
    if key == "reward_terms":
      if len(v.shape) != 2 or v.shape[0] != n:
        raise ValueError(f"env info['reward_terms'] must be [N, K] = [{n}, K], got {v.shape}")
      k = v.shape[1]
      if reward_names is not None and len(reward_names) != k:
        raise ValueError(f"env reward_names {tuple(reward_names)} do not match the {k} "
                         "reward_terms the env emits")
      names = tuple(reward_names) if reward_names is not None else tuple(map(str, range(k)))
      for i, name in enumerate(names):
        cols[f"reward_terms/{name}"] = ("reward_terms", i, v.dtype)
    elif key not in FIXED_INFO:
      if tuple(v.shape) != (n,):
        raise ValueError(f"env info[{key!r}] must hold one value per episode ([N] = [{n}]) to "
                         f"become a turn-level extra, got shape {tuple(v.shape)}")
      cols[key] = (key, None, v.dtype)
  return cols


def extra_values(info: Mapping[str, jax.Array], columns: Mapping[str, tuple]) -> dict:
  """The `[N]` value of each extra column in `info` (KeyError naming a missing key)."""
  missing = sorted({src for src, _, _ in columns.values()} - set(info))
  if missing:
    raise KeyError(f"env info lacks {missing}, which it emitted when the rollout was built; "
                   "every step must emit the same info keys")
  return {name: info[src] if i is None else info[src][:, i]
          for name, (src, i, _) in columns.items()}
