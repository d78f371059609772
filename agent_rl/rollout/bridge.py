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
           info {success, valid_action, state_hash [, milestone, fatal, agent_id, any
                 extra key]: [N]; optional reward_terms: [N, K]}
   (rows with active False are finished episodes: their outputs are ignored.)
    optional: reward_names (names of the reward terms); info_spec(action_len) -> the
    batched info as ShapeDtypeStructs, called after reset; several agents: roles,
    first_agents() -> [N] int32 who acts turn 0 (called after reset), and info agent_id /
    next_agent; branched rollouts (EpisodeConfig.branch): clone_rows(dst, src), row dst[k]
    becomes a copy of row src[k] (JaxHostEnv gathers its state; TextHostEnv replays).

Info keys beyond the fixed ones become `EpisodeBatch.extras` exactly as in the compiled
rollout. Without `info_spec` the extras are learned from the first step: the carry gains
its extras columns then (act/observe compile once more for that structure).
"""
from __future__ import annotations

import time
from typing import Any, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text
from agent_rl.rollout import branch
from agent_rl.rollout.compiled import episode_keys, info_spec, reset_groups
from agent_rl.rollout.episode import EpisodeConfig, EpisodeLoop, action_length
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
    self.reward_names = getattr(env, "reward_names", None)
    self._specs: dict = {}
    self.state = None
    self.obs_len = None

  def info_spec(self, action_len: int) -> dict:
    """The batched info of one step from the current state (shapes only, nothing runs);
    cached per state shapes, so a rollout does not re-trace env.step on the host."""
    leaves = jax.tree.leaves(self.state)
    key = (action_len, jax.tree.structure(self.state), tuple((x.shape, x.dtype) for x in leaves))
    if key not in self._specs:
      self._specs[key] = info_spec(jax.vmap(self.env.step), self.state, leaves[0].shape[0],
                                   action_len)
    return self._specs[key]

  def reset(self, tasks, reset_keys, group_size):
    self.state, obs = self._reset(self.env, tasks, jnp.asarray(reset_keys), group_size)
    self.obs_len = obs.tokens.shape[-1]
    h = None if self._hash is None else np.asarray(self._hash(self.state))
    return np.asarray(obs.tokens), np.asarray(obs.length), h

  def first_agents(self) -> Optional[np.ndarray]:
    """`[N]` who acts turn 0 (the env's `first_agent`; None: agent 0)."""
    if not hasattr(self.env, "first_agent"):
      return None
    return np.asarray(jax.vmap(self.env.first_agent)(self.state), np.int32)

  def clone_rows(self, dst, src) -> None:
    """Row dst[k] becomes a copy of row src[k]: a gather of the state pytree."""
    rows = np.arange(jax.tree.leaves(self.state)[0].shape[0])
    rows[np.asarray(dst)] = np.asarray(src)
    self.state = jax.tree.map(lambda x: jnp.take(x, jnp.asarray(rows), axis=0), self.state)

  def step(self, action_tokens, action_length, active):
    state, obs, reward, done, info = self._step(
        self.state, Text(jnp.asarray(action_tokens), jnp.asarray(action_length)))
    m = jnp.asarray(active)
    self.state = jax.tree.map(
        lambda a, b: jnp.where(m.reshape(m.shape + (1,) * (a.ndim - 1)), a, b), state, self.state)
    info = {k: np.asarray(v) for k, v in info.items()}
    return (np.asarray(obs.tokens), np.asarray(obs.length), np.asarray(reward), np.asarray(done),
            info)


class HostRollout:
  """`HostRollout(policy, env, cfg, pieces)(params, tasks, key) -> (EpisodeBatch, metrics)`.

  `timings` (after a call) splits wall time into the envs' reset (`reset`, host), policy
  generation (`act`: decode, plus the per-turn prefill in window mode), observation prefill
  (`observe`), env stepping (`env`, host) and the rest; `totals` sums them over all calls
  (the run reads its difference across an iteration, whose strategy may roll out twice).
  """

  def __init__(self, policy: Policy, env: HostEnv, cfg: EpisodeConfig, pieces: PromptPieces):
    if cfg.search is not None:
      raise ValueError("EpisodeConfig.search needs env-state cloning at every turn; use the "
                       "compiled rollout with a JAX environment")
    if cfg.branch is not None and not callable(getattr(env, "clone_rows", None)):
      raise ValueError(f"EpisodeConfig.branch: host env {type(env).__name__} has no "
                       "clone_rows(dst, src) to copy a group root's game into its members")
    if cfg.intervene is not None:
      raise ValueError("EpisodeConfig.intervene (teacher interventions) runs in the compiled "
                       "rollout of a JAX environment; the host bridge does not carry a teacher")
    self.policy, self.env, self.cfg, self.pieces = policy, env, cfg, pieces
    self._jits: dict = {}
    # jitted once each, the turn traced: a turn's branch check is one dispatch
    self._branch = jax.jit(branch.branch, static_argnums=(3,))
    self._sources = jax.jit(branch.branch_sources, static_argnums=(3,))
    self.timings: dict = {}
    self.totals: dict = {}

  def record_timings(self, tm: dict) -> None:
    """Keeps `tm` as the last call's split and adds it to `totals`."""
    self.timings = tm
    for k, v in tm.items():
      self.totals[k] = self.totals.get(k, 0.0) + v

  def steps(self, n: int, obs_len: int, info: Optional[dict]):
    """The loop and its jitted steps for these sizes and info keys (built once each)."""
    key = (n, obs_len, None if info is None else
           tuple(sorted((k, v.shape, str(v.dtype)) for k, v in info.items())))
    if key not in self._jits:
      loop = EpisodeLoop(self.policy, self.env, self.cfg, self.pieces, n, obs_len, info_spec=info)
      self._jits[key] = (
          loop, jax.jit(loop.start), jax.jit(loop.act), jax.jit(loop.record),
          jax.jit(loop.observe), jax.jit(loop.finish))
    return self._jits[key]

  def branch_turns(self, ep_keys):
    """`[N]` the turn each episode's group branches at (None: no branching)."""
    b = self.cfg.branch
    return None if b is None else branch.branch_turns(ep_keys, self.cfg.group_size, b)

  def branch(self, carry, t: int, turns, rows: np.ndarray):
    """Branches the groups of `carry` whose turn is t (branch.py): the env copies the games
    (`clone_rows`, rows of the full batch: `rows` are carry's), then the carry its rows.
    turns: `[n]` of carry's rows (whole groups); returns the carry unchanged if none."""
    if turns is None:
      return carry
    tt, g = jnp.int32(t), self.cfg.group_size
    src, copy = jax.device_get(self._sources(carry.alive, tt, turns, g))
    if not copy.any():
      return carry
    self.env.clone_rows(rows[copy], rows[src[copy]])
    return self._branch(carry, tt, turns, g)

  def eval_shape(self, params, tasks, key):
    """The shapes of `self(params, tasks, key)` (nothing runs; the env is not reset): for an
    env whose `obs_len` and `info_spec(action_len, n)` are known before a reset."""
    n = _num_tasks(tasks) * self.cfg.group_size
    spec = self.env.info_spec(action_length(self.env, self.cfg), n)
    loop = self.steps(n, self.env.obs_len, spec)[0]
    _, ep_keys, group_id = jax.eval_shape(
        lambda k: episode_keys(k, _num_tasks(tasks), self.cfg.group_size), key)
    sds = jax.ShapeDtypeStruct
    obs = Text(sds((n, self.env.obs_len), jnp.int32), sds((n,), jnp.int32))
    return jax.eval_shape(
        lambda p, o, k, g, h: loop.finish(loop.start(p, jnp.zeros((n,), jnp.int32), o, k, h), g, k),
        params, obs, ep_keys, group_id, sds((n,), jnp.uint32))

  def __call__(self, params, tasks, key):
    g = self.cfg.group_size
    n_tasks = _num_tasks(tasks)
    reset_keys, ep_keys, group_id = episode_keys(key, n_tasks, g)
    t0 = time.perf_counter()
    obs_tok, obs_len, hash0 = self.env.reset(tasks, np.asarray(reset_keys), g)
    t_reset = time.perf_counter() - t0
    n = obs_tok.shape[0]
    if n != n_tasks * g:
      raise ValueError(f"host env reset returned {n} episodes, expected n_tasks*G = {n_tasks * g}")
    spec_fn = getattr(self.env, "info_spec", None)
    spec = spec_fn(action_length(self.env, self.cfg)) if spec_fn is not None else None
    loop, start, act, record, observe, finish = self.steps(n, obs_tok.shape[1], spec)
    dummy = jnp.zeros((n,), jnp.int32)  # the env state lives on the host
    obs = Text(jnp.asarray(obs_tok, jnp.int32), jnp.asarray(obs_len, jnp.int32))
    h0 = None if hash0 is None else jnp.asarray(hash0, jnp.uint32)
    a0 = first_agents(self.env)
    tm = dict(reset=t_reset, act=0.0, env=0.0, observe=0.0, other=0.0)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(start(params, dummy, obs, ep_keys, h0, a0))
    tm["observe"] += time.perf_counter() - t0
    b_turns = self.branch_turns(ep_keys)
    for t in range(self.cfg.max_turns):
      if not bool(np.any(np.asarray(carry.alive))):
        break
      tt = jnp.int32(t)
      t0 = time.perf_counter()
      carry = jax.block_until_ready(self.branch(carry, t, b_turns, np.arange(n)))
      tm["env"] += time.perf_counter() - t0  # the games' replay, if any branched
      t0 = time.perf_counter()
      carry, action, active = jax.block_until_ready(act(params, carry, tt))
      a_tok, a_len, a_on = jax.device_get((action.tokens, action.length, active))
      t1 = time.perf_counter()
      o_tok, o_len, reward, done, info = self.env.step(a_tok, a_len, a_on)
      t2 = time.perf_counter()
      out = (dummy, Text(jnp.asarray(o_tok, jnp.int32), jnp.asarray(o_len, jnp.int32)),
             jnp.asarray(reward, jnp.float32), jnp.asarray(done, bool),
             {k: jnp.asarray(v) for k, v in info.items()})
      if spec is None:  # learn the extras from the first step's info
        spec = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in out[4].items()}
        loop, _, act, record, observe, finish = self.steps(n, obs_tok.shape[1], spec)
        carry = carry.replace(extras={k: jnp.zeros((n, self.cfg.max_turns), d)
                                      for k, (_, _, d) in loop.extras.items()})
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
    self.record_timings(tm)
    return result


def first_agents(env) -> Optional[jax.Array]:
  """`[N]` int32 who acts turn 0 of the episodes of the env's last reset (None: agent 0)."""
  fn = getattr(env, "first_agents", None)
  a0 = fn() if callable(fn) else None
  return None if a0 is None else jnp.asarray(a0, jnp.int32)


def _num_tasks(tasks) -> int:
  return jax.tree.leaves(tasks)[0].shape[0] if jax.tree.leaves(tasks) else len(tasks)


def host_rollout(policy: Policy, params, env: HostEnv, tasks, key, cfg: EpisodeConfig,
                 pieces: PromptPieces, runner: Optional[HostRollout] = None):
  """Functional form of `HostRollout` (pass `runner` to reuse its jitted steps)."""
  runner = runner or HostRollout(policy, env, cfg, pieces)
  return runner(params, tasks, key)
