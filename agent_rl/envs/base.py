"""The pure-JAX text-environment contract (shared/DESIGN.md, "Environment").

An environment is a frozen (hashable, hence jit-static) dataclass with pure methods:

    task             = env.sample_task(key)            # a pytree of arrays; or built by the env's
                                                       # host-side `task_from_*` constructors
    state, obs       = env.reset(key, task)
    state, obs, reward, done, info = env.step(state, action)

- `obs` is a `Text`: `tokens [obs_len] int32` (padded with the tokenizer's pad id) and
  `length` int32; `action` is a `Text` of at most `action_len` tokens (the generated turn).
- `reward` f32 scalar: the config-weighted sum of `info["reward_terms"]`.
- `done` bool scalar. `info` holds at least: `success` bool, `valid_action` bool,
  `state_hash` uint32 (`env.state_hash(state)` of the state after the step; equal states -> equal
  hashes), `reward_terms` f32 `[K]` (e.g. success, format, step cost; names in
  `env.reward_names`). Optional: `milestone` bool, `fatal` bool, `agent_id` int32.
- Everything is fixed-shape and vmappable; no Python control flow on traced values.
  A malformed action never raises: it is an invalid action with the configured penalty.
- States are pytrees, so cloning a state (tree-search rollouts) is free.
- `env.solve(task) -> list[str]` is a host-side expert (BFS/A*/search) returning the action
  strings of an optimal plan; used for demonstrations, SFT warm starts and upper bounds.
- `env.instruction` is the host-side task description text (system/user prompt).
- Every `info` key beyond the fixed ones (`success, valid_action, state_hash, reward_terms,
  milestone, fatal, agent_id`) must be one value per episode; the rollout stores it as a
  turn-level extra `EpisodeBatch.extras[key] [N, T]` that credit kernels can read.
- Several agents (agent_rl.agents): `env.roles` names the roles; every step emits
  `info["agent_id"]` (who acted) and `info["next_agent"]` (who acts next; the loop routes the
  next turn to that agent's weights), `env.first_agent(state)` says who acts turn 0 (default
  0), observations are the next agent's view, and `env.role_reward_terms` may name one reward
  term per role (its own reward). envs/roles.py puts any env's turns on a role schedule.
- Episode limits: an env whose episodes end after a budget of steps (or turns) counts them in
  its state and applies `step_limit`, the one shared max-steps rule; it reports
  `info["truncated"]` (ended by the budget, not by the task).

Tokenizer-facing helpers shared by the text modules: `TokenizerLike` (what envs need from a
tokenizer) and `Digest` (content-digest hashing, so envs holding numpy tables stay cheap
jit-static keys). Text rendering is in render.py, byte scanning in byte_scan.py, word-action
parsing in actions.py.
"""
from __future__ import annotations

import hashlib
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.registry import Registry

ENVS = Registry("environment")


@struct.dataclass
class Text:
  """A padded token sequence: `tokens [..., L] int32`, `length [...] int32`."""
  tokens: jax.Array
  length: jax.Array


class TokenizerLike(Protocol):
  """What envs need from a tokenizer (agent_rl.tokenizers.Tokenizer implements it)."""
  pad_id: int

  def encode(self, text: str) -> list[int]: ...

  def decode(self, ids) -> str: ...

  def byte_table(self) -> tuple[np.ndarray, np.ndarray]:
    """`(bytes [V, K] uint8, lengths [V] int32)`: the surface bytes of every token id."""
    ...


class Digest:
  """Hash/equality by a content digest, so envs holding tables stay cheap jit-static keys."""
  _digest: str

  def __hash__(self) -> int:
    return hash(self._digest)

  def __eq__(self, other) -> bool:
    return type(other) is type(self) and other._digest == self._digest


def digest(*parts) -> str:
  h = hashlib.sha1()
  for p in parts:
    h.update(np.ascontiguousarray(p).tobytes() if isinstance(p, np.ndarray) else repr(p).encode())
  return h.hexdigest()



def step_limit(count: jax.Array, used: jax.Array, live: jax.Array, terminated: jax.Array,
               done: jax.Array, limit: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The shared max-steps rule of a step-limited env (one example; vmap for batches).

  count: int32 steps (or turns) taken before this step; used: int32 steps this step adds;
  live: bool the episode was running before the step (a finished state stays as it is);
  terminated: bool the task ended this step (solved, fell in a hole, ...); done: bool the
  episode had already ended. Returns `(count', done', truncated)`: count' = count + used
  where live; done' = done | terminated | count' >= limit; truncated = the budget, not the
  task, ended a live episode this step.
  """
  count = jnp.where(live, count + used, count).astype(jnp.int32)
  hit = count >= limit
  return count, done | terminated | hit, live & ~terminated & hit


def make(name: str, **kwargs: Any):
  """Builds a registered environment: `make("sokoban", tokenizer=tok, size=6, boxes=1)`."""
  return ENVS.get(name)(**kwargs)


def fingerprint(*arrays: jax.Array) -> jax.Array:
  """uint32 fingerprint of integer arrays (equal contents -> equal hashes).

  Vectorized: each element is mixed with its position (murmur3-style finalizer), the
  mixes are summed modulo 2^32 and finalized again. No sequential scan, so hashing a
  state costs a few elementwise ops.
  """
  flat = jnp.concatenate([jnp.ravel(a).astype(jnp.uint32) for a in arrays])
  pos = jnp.arange(flat.shape[0], dtype=jnp.uint32)
  x = _mix(flat * jnp.uint32(0x9E3779B1) + pos * jnp.uint32(0x85EBCA77) + jnp.uint32(0x165667B1))
  return _mix(jnp.sum(x, dtype=jnp.uint32) + jnp.uint32(flat.shape[0]))


def _mix(x: jax.Array) -> jax.Array:
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  return x ^ (x >> 16)


def validate_fields(env: Any, reward_names: tuple, positive: tuple[str, ...]) -> None:
  """Start-up checks shared by the grid envs; errors name the env and the field.

  Requires a tokenizer, normalizes `env.reward_weights` to a float tuple with one weight per
  reward term, and checks that each field in `positive` is an integer >= 1.
  """
  kind = type(env).__name__
  if env.tokenizer is None:
    raise ValueError(f"{kind} needs tokenizer= (anything with encode/decode/pad_id/byte_table)")
  object.__setattr__(env, "reward_weights", tuple(float(x) for x in env.reward_weights))
  if len(env.reward_weights) != len(reward_names):
    raise ValueError(f"{kind}.reward_weights needs {len(reward_names)} values {reward_names}, "
                     f"got {env.reward_weights}")
  for name in positive:
    if int(getattr(env, name)) < 1:
      raise ValueError(f"{kind}.{name} must be >= 1, got {getattr(env, name)}")
