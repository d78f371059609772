"""The compiled rollout for pure-JAX environments: `make_rollout(...)(params, tasks, key)`.

One `jax.jit` program: vmapped env.reset, then `lax.scan` over turns of
act -> vmapped env.step -> record -> observe (episode.py), with optional TSR search
(search.py), the selective gate (gate.py) and branched groups (branch.py) inside the
scan. Compiled once per
(config, shapes); later iterations reuse the executable (tested with chex.assert_max_traces).

Randomness: `key` -> (reset key, sample key). Task i is reset with fold_in(reset, i) (its G
members share the initial state); episode e samples with fold_in(sample, e), stored as
`episode_key`, and turn t / token j use fold_in(fold_in(episode_key, t), j). The same
params, tasks and key give a bit-identical EpisodeBatch.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple

import jax
import jax.numpy as jnp

from agent_rl.envs.base import Text
from agent_rl.rollout import branch, search
from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.rollout.carry import EpisodeCarry
from agent_rl.rollout.episode import EpisodeConfig, EpisodeLoop, action_length
from agent_rl.rollout.layout import PromptPieces
from agent_rl.rollout.policy import Policy


def raw_key(key: jax.Array) -> jax.Array:
  """uint32 `[2]` key data of a typed or raw PRNG key."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.key_data(key)
  return key


def episode_keys(key: jax.Array, n_tasks: int, group_size: int):
  """(reset keys [n_tasks, 2], episode keys [N, 2], group_id [N]) of one rollout key."""
  k_reset, k_sample = jax.random.split(raw_key(key))
  n = n_tasks * group_size
  reset = jax.vmap(jax.random.fold_in, (None, 0))(k_reset, jnp.arange(n_tasks))
  ep = jax.vmap(jax.random.fold_in, (None, 0))(k_sample, jnp.arange(n))
  return reset, ep, jnp.arange(n, dtype=jnp.int32) // group_size


def reset_groups(env: Any, tasks: Any, reset_keys: jax.Array, group_size: int):
  """vmapped env.reset per task, each result repeated for the G members of its group."""
  state, obs = jax.vmap(env.reset)(reset_keys, tasks)
  rep = lambda x: jnp.repeat(x, group_size, axis=0)
  return jax.tree.map(rep, state), jax.tree.map(rep, obs)


def _num_tasks(tasks) -> int:
  leaves = jax.tree.leaves(tasks)
  if not leaves:
    raise ValueError("tasks must be a pytree of arrays with a leading task axis")
  return leaves[0].shape[0]


def make_rollout(policy: Policy, env: Any, cfg: EpisodeConfig, pieces: PromptPieces, *,
                 jit: bool = True, teacher: Optional[Policy] = None
                 ) -> Callable[[Any, Any, jax.Array], Tuple[EpisodeBatch, dict]]:
  """A jitted `rollout(params, tasks, key) -> (EpisodeBatch, metrics)` (`jit=False`: the
  traceable function, e.g. to wrap in chex.assert_max_traces or a larger jitted step).
  `rollout(params, tasks, key, library)`: the experience library of a jitrl search
  (rollout/jitrl.py; data, so a new library does not recompile). With `cfg.intervene`, the
  `teacher` policy and `rollout(..., teacher_params=...)` its weights (intervene.py)."""

  def rollout(params, tasks, key, library=None, teacher_params=None):
    n_tasks, g = _num_tasks(tasks), cfg.group_size
    reset_keys, ep_keys, group_id = episode_keys(key, n_tasks, g)
    state, obs = reset_groups(env, tasks, reset_keys, g)
    n = n_tasks * g
    step = jax.vmap(env.step)
    loop = EpisodeLoop(policy, env, cfg, pieces, n, obs.tokens.shape[-1],
                       info_spec=info_spec(step, state, n, action_length(env, cfg)),
                       teacher=teacher)
    carry = loop.start(params, state, obs, ep_keys)
    t_max = cfg.max_turns
    b_turns = None if cfg.branch is None else branch.branch_turns(ep_keys, g, cfg.branch)

    def turn(c, t):
      if b_turns is not None:
        c = branch.branch(c, t, b_turns, g)
      if cfg.search is None:
        c, action, active = loop.act(params, c, t, teacher_params=teacher_params)
        out = step(c.env_state, action)
        c = loop.record(c, t, active, out)
      else:
        c = _search_turn(loop, params, c, t, step, library)
      return jax.lax.cond(t < t_max - 1, lambda c: loop.observe(params, c, t), lambda c: c, c)

    def body(c, t):
      return jax.lax.cond(jnp.any(c.alive), turn, lambda c, t: c, c, t), None

    carry, _ = jax.lax.scan(body, carry, jnp.arange(t_max))
    return loop.finish(carry, group_id, ep_keys)

  return jax.jit(rollout) if jit else rollout


def info_spec(step: Callable, state: Any, n: int, action_len: int) -> dict:
  """The batched `info` of `step(state, action)` as ShapeDtypeStructs (nothing runs)."""
  sds = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)
  action = Text(jax.ShapeDtypeStruct((n, action_len), jnp.int32),
                jax.ShapeDtypeStruct((n,), jnp.int32))
  return jax.eval_shape(step, jax.tree.map(sds, state), action)[4]


def _search_turn(loop: EpisodeLoop, params, c: EpisodeCarry, t, step, library=None):
  """One TSR / jitrl turn: clone rows into candidates, act and step all, keep the chosen."""
  cfg = loop.cfg.search
  n, k = loop.n, cfg.num_candidates
  keys, was_alive = c.sample_keys, c.alive
  ce, cand = search.expand(c, n, k)
  big = _Resized(loop, n, k)
  ce, action, active = big.act(params, ce, t, cand)
  ce = big.record(ce, t, active, step(ce.env_state, action))
  reward = ce.turns.reward[:, t]
  c, _ = search.select(ce, reward, jnp.repeat(was_alive, k), n, loop.cfg.group_size, cfg,
                       loop.env, library=library, keys=keys, t=t)
  return c.replace(sample_keys=keys)  # each slot keeps its own key stream, whatever its parent


class _Resized(EpisodeLoop):
  """The same loop viewed at the n*k candidate rows of TSR (k clones of each episode)."""

  def __init__(self, base: EpisodeLoop, n: int, k: int):  # pylint: disable=super-init-not-called
    self.__dict__.update(base.__dict__)
    self.n, self.clones = n * k, k
    if base.cfg.gate is not None:
      raise ValueError("TSR search and the selective gate cannot be combined in one rollout")


@functools.lru_cache(maxsize=32)
def _cached(policy, env, cfg, pieces):
  return make_rollout(policy, env, cfg, pieces)


def rollout(policy: Policy, params, env: Any, tasks: Any, key: jax.Array, cfg: EpisodeConfig,
            pieces: PromptPieces):
  """`make_rollout(policy, env, cfg, pieces)(params, tasks, key)`, the jitted program cached
  per (policy, env, cfg, pieces), all hashable."""
  return _cached(policy, env, cfg, pieces)(params, tasks, key)
