"""Host bridge: the episode loop for Python environments (TextWorld, code execution, ...).

The loop runs on the host; each turn calls the *same* jitted steps as the compiled rollout
(EpisodeLoop.act / record / observe, jitted once each with the turn index as a traced
argument), with a Python environment stepping in between. Same EpisodeBatch out, and with
a JAX environment wrapped as a host one (`JaxHostEnv`) the same batch as `make_rollout`
for the same key (tested).

A host environment is a batched object with the obs/action token contract:

    obs_len: int; action_len: int
    reset(tasks, reset_keys [n_tasks, 2] uint32, group_size)
        -> obs_tokens [N, obs_len] int32, obs_length [N] int32, state_hash [N] uint32 | None
    step(action_tokens [N, action_len] int32, action_length [N] int32, active [N] bool)
        -> obs_tokens, obs_length, reward [N] f32, done [N] bool,
           info {success, valid_action, state_hash [, milestone, fatal, agent_id]: [N]}
   (rows with active False are finished episodes: their outputs are ignored.)
"""
from __future__ import annotations

import time
from typing import Any, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text
from agent_rl.rollout.compiled import episode_keys, reset_groups
from agent_rl.rollout.episode import EpisodeConfig, EpisodeLoop
from agent_rl.rollout.layout import PromptPieces
from agent_rl.rollout.policy import Policy


class HostEnv(Protocol):
  obs_len: int
  action_len: int

  def reset(self, tasks: Any, reset_keys: np.ndarray, group_size: int): ...

  def step(self, action_tokens: np.ndarray, action_length: np.ndarray, active: np.ndarray): ...


class JaxHostEnv:
  """A pure-JAX env driven from the host like a Python env framework would: state kept in
  the object, one jitted batched step per turn, numpy in and out."""

  def __init__(self, env: Any):
    self.env = env
    self.action_len = getattr(env, "action_len", None)  # None: the env takes any length
    self._reset = jax.jit(reset_groups, static_argnums=(0, 3))
    self._step = jax.jit(jax.vmap(env.step))
    self._hash = jax.jit(jax.vmap(env.state_hash)) if hasattr(env, "state_hash") else None
    self.state = None
    self.obs_len = None

  def reset(self, tasks, reset_keys, group_size):
    self.state, obs = self._reset(self.env, tasks, jnp.asarray(reset_keys), group_size)
    self.obs_len = obs.tokens.shape[-1]
    h = None if self._hash is None else np.asarray(self._hash(self.state))
    return np.asarray(obs.tokens), np.asarray(obs.length), h

  def step(self, action_tokens, action_length, active):
    state, obs, reward, done, info = self._step(
        self.state, Text(jnp.asarray(action_tokens), jnp.asarray(action_length)))
    m = jnp.asarray(active)
    self.state = jax.tree.map(
        lambda a, b: jnp.where(m.reshape(m.shape + (1,) * (a.ndim - 1)), a, b), state, self.state)
    info = {k: np.asarray(v) for k, v in info.items() if k != "reward_terms"}
    return (np.asarray(obs.tokens), np.asarray(obs.length), np.asarray(reward), np.asarray(done),
            info)


class HostRollout:
  """`HostRollout(policy, env, cfg, pieces)(params, tasks, key) -> (EpisodeBatch, metrics)`.

  `timings` (after a call) splits wall time into policy generation (`act`: decode, plus
  the per-turn prefill in window mode), observation prefill (`observe`), env stepping
  (`env`, host) and the rest.
  """

  def __init__(self, policy: Policy, env: HostEnv, cfg: EpisodeConfig, pieces: PromptPieces):
    if cfg.search is not None:
      raise ValueError("EpisodeConfig.search (TSR) needs env-state cloning; use the compiled "
                       "rollout with a JAX environment")
    self.policy, self.env, self.cfg, self.pieces = policy, env, cfg, pieces
    self._jits: dict = {}
    self.timings: dict = {}

  def _fns(self, n: int, obs_len: int):
    if (n, obs_len) not in self._jits:
      loop = EpisodeLoop(self.policy, self.env, self.cfg, self.pieces, n, obs_len)
      self._jits[(n, obs_len)] = (
          loop, jax.jit(loop.start), jax.jit(loop.act), jax.jit(loop.record),
          jax.jit(loop.observe), jax.jit(loop.finish))
    return self._jits[(n, obs_len)]

  def __call__(self, params, tasks, key):
    g = self.cfg.group_size
    n_tasks = jax.tree.leaves(tasks)[0].shape[0] if jax.tree.leaves(tasks) else len(tasks)
    reset_keys, ep_keys, group_id = episode_keys(key, n_tasks, g)
    obs_tok, obs_len, hash0 = self.env.reset(tasks, np.asarray(reset_keys), g)
    n = obs_tok.shape[0]
    if n != n_tasks * g:
      raise ValueError(f"host env reset returned {n} episodes, expected n_tasks*G = {n_tasks * g}")
    loop, start, act, record, observe, finish = self._fns(n, obs_tok.shape[1])
    dummy = jnp.zeros((n,), jnp.int32)  # the env state lives on the host
    obs = Text(jnp.asarray(obs_tok, jnp.int32), jnp.asarray(obs_len, jnp.int32))
    h0 = None if hash0 is None else jnp.asarray(hash0, jnp.uint32)
    tm = dict(act=0.0, env=0.0, observe=0.0, other=0.0)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(start(params, dummy, obs, ep_keys, h0))
    tm["observe"] += time.perf_counter() - t0
    for t in range(self.cfg.max_turns):
      if not bool(np.any(np.asarray(carry["alive"]))):
        break
      tt = jnp.int32(t)
      t0 = time.perf_counter()
      carry, action, active = jax.block_until_ready(act(params, carry, tt))
      a_tok, a_len, a_on = jax.device_get((action.tokens, action.length, active))
      t1 = time.perf_counter()
      o_tok, o_len, reward, done, info = self.env.step(a_tok, a_len, a_on)
      t2 = time.perf_counter()
      out = (dummy, Text(jnp.asarray(o_tok, jnp.int32), jnp.asarray(o_len, jnp.int32)),
             jnp.asarray(reward, jnp.float32), jnp.asarray(done, bool),
             {k: jnp.asarray(v) for k, v in info.items()})
      carry = record(carry, tt, active, out)
      if t < self.cfg.max_turns - 1:
        carry = jax.block_until_ready(observe(params, carry, tt))
      t3 = time.perf_counter()
      tm["act"] += t1 - t0
      tm["env"] += t2 - t1
      tm["observe"] += t3 - t2
    t0 = time.perf_counter()
    result = jax.block_until_ready(finish(carry, group_id, ep_keys))
    tm["other"] += time.perf_counter() - t0
    self.timings = tm
    return result


def host_rollout(policy: Policy, params, env: HostEnv, tasks, key, cfg: EpisodeConfig,
                 pieces: PromptPieces, runner: Optional[HostRollout] = None):
  """Functional form of `HostRollout` (pass `runner` to reuse its jitted steps)."""
  runner = runner or HostRollout(policy, env, cfg, pieces)
  return runner(params, tasks, key)
