"""Overlapped host rollout: two half-batches in flight, so env stepping hides behind decoding.

The host loop of bridge.py runs a turn as act (policy) then env.step (host), so a turn costs
env + policy. Here the batch is split at a task boundary into halves A and B with a carry
each, and the turn is software-pipelined:

    act A(t) -> submit A's step        | B's step (t-1) runs in the pool
    wait B(t-1), record, observe B     |
    act B(t) -> submit B's step        | A's step (t) runs in the pool
    wait A(t), record, observe A       |

so while one half's games step in the worker processes (envs/host/pool.py) the other half
decodes, and a turn costs about max(env, policy). The per-turn functions are HostRollout's
jitted act / record / observe at the half size (not a copy of the loop); at the end the two
carries are joined row-wise and the full-size `finish` builds the EpisodeBatch.

Same EpisodeBatch as the plain host loop for the same key, bit for bit (tested): every row
samples from its own episode key, resets and steps are per row, and group ids and keys are
sliced from the full batch's. What differs: `rollout/decode_steps` (token steps summed over
both halves' decode loops) and the carry's `action_symbols` of turns a whole half had
already finished (the plain loop still runs those turns for the other rows; nothing in the
batch reads them). A half whose episodes all ended stops acting, as the plain loop does.

Branched groups (EpisodeConfig.branch): a half holds whole groups, so each half branches at
the start of its own turn (HostRollout.branch: the games' replay, then the carry's gather).

The env needs `step_async(rows, tokens, lengths, active) -> handle` and `step_wait(handle)`
(text_env.py's TextHostEnv); with fewer than two tasks the plain loop runs.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text
from agent_rl.rollout.bridge import HostRollout, _num_tasks, first_agents
from agent_rl.rollout.compiled import episode_keys
from agent_rl.rollout.episode import EpisodeConfig, action_length
from agent_rl.rollout.layout import PromptPieces
from agent_rl.rollout.policy import Policy


@dataclasses.dataclass
class _Half:
  rows: np.ndarray          # [n_h] episode rows of the full batch
  fns: tuple                # HostRollout.steps at this size: loop, start, act, record, ...
  carry: Any = None
  pending: Optional[tuple] = None  # (turn, active, env handle) of a submitted step


class OverlapRollout:
  """`OverlapRollout(policy, env, cfg, pieces)(params, tasks, key) -> (EpisodeBatch, metrics)`;
  `timings` and `totals` as HostRollout's: `env` is the time spent *waiting* for the pool's
  steps."""

  def __init__(self, policy: Policy, env: Any, cfg: EpisodeConfig, pieces: PromptPieces):
    for f in ("step_async", "step_wait"):
      if not callable(getattr(env, f, None)):
        raise ValueError(f"OverlapRollout: env {type(env).__name__} has no {f}(); use HostRollout")
    self.base = HostRollout(policy, env, cfg, pieces)
    self.env, self.cfg = env, cfg

  @property
  def timings(self) -> dict:
    return self.base.timings

  @property
  def totals(self) -> dict:
    return self.base.totals

  def eval_shape(self, params, tasks, key):
    return self.base.eval_shape(params, tasks, key)

  def __call__(self, params, tasks, key):
    n_tasks, g = _num_tasks(tasks), self.cfg.group_size
    if n_tasks < 2:
      return self.base(params, tasks, key)
    tm = dict(reset=0.0, act=0.0, env=0.0, observe=0.0, other=0.0)
    reset_keys, ep_keys, group_id = episode_keys(key, n_tasks, g)
    t0 = time.perf_counter()
    obs_tok, obs_len, hash0 = self.env.reset(tasks, np.asarray(reset_keys), g)
    tm["reset"] += time.perf_counter() - t0
    n, o = n_tasks * g, obs_tok.shape[1]
    alen = action_length(self.env, self.cfg)
    cut = (n_tasks // 2) * g
    halves = [self._half(np.arange(lo, hi), o, alen) for lo, hi in ((0, cut), (cut, n))]
    a0 = first_agents(self.env)
    t0 = time.perf_counter()
    for h in halves:
      r = h.rows
      obs = Text(jnp.asarray(obs_tok[r], jnp.int32), jnp.asarray(obs_len[r], jnp.int32))
      h0 = None if hash0 is None else jnp.asarray(np.asarray(hash0)[r], jnp.uint32)
      h.carry = h.fns[1](params, jnp.zeros((len(r),), jnp.int32), obs,
                         jnp.asarray(ep_keys)[r], h0, None if a0 is None else a0[r])
    jax.block_until_ready([h.carry for h in halves])
    tm["observe"] += time.perf_counter() - t0
    b_turns = self.base.branch_turns(ep_keys)
    h_turns = [None if b_turns is None else b_turns[h.rows] for h in halves]
    for t in range(self.cfg.max_turns):
      for h, turns in zip(halves, h_turns):
        if h.pending is not None:
          self._land(params, h, tm)
        if not bool(np.any(np.asarray(h.carry.alive))):
          continue
        if turns is not None:  # halves are whole groups: a half branches on its own
          t0 = time.perf_counter()
          h.carry = jax.block_until_ready(self.base.branch(h.carry, t, turns, h.rows))
          tm["env"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        h.carry, action, active = h.fns[2](params, h.carry, jnp.int32(t))
        a_tok, a_len, a_on = jax.device_get((action.tokens, action.length, active))
        tm["act"] += time.perf_counter() - t0
        h.pending = (t, active, self.env.step_async(h.rows, a_tok, a_len, a_on))
    for h in halves:
      if h.pending is not None:
        self._land(params, h, tm)
    t0 = time.perf_counter()
    result = self._finish(halves, n, o, alen, group_id, ep_keys)
    tm["other"] += time.perf_counter() - t0
    self.base.record_timings(tm)
    return result

  def _half(self, rows: np.ndarray, obs_len: int, alen: int) -> _Half:
    spec = self.env.info_spec(alen, len(rows))
    return _Half(rows=rows, fns=self.base.steps(len(rows), obs_len, spec))

  def _land(self, params, h: _Half, tm: dict) -> None:
    """Waits for h's submitted step, records it and appends the next observation."""
    t, active, handle = h.pending
    h.pending = None
    t0 = time.perf_counter()
    o_tok, o_len, reward, done, info = self.env.step_wait(handle)
    t1 = time.perf_counter()
    out = (jnp.zeros((len(h.rows),), jnp.int32),
           Text(jnp.asarray(o_tok, jnp.int32), jnp.asarray(o_len, jnp.int32)),
           jnp.asarray(reward, jnp.float32), jnp.asarray(done, bool),
           {k: jnp.asarray(v) for k, v in info.items()})
    tt = jnp.int32(t)
    h.carry = h.fns[3](h.carry, tt, active, out)
    if t < self.cfg.max_turns - 1:
      h.carry = h.fns[4](params, h.carry, tt)
    jax.block_until_ready(h.carry)
    tm["env"] += t1 - t0
    tm["observe"] += time.perf_counter() - t1

  def _finish(self, halves, n: int, obs_len: int, alen: int, group_id, ep_keys):
    """Joins the halves' carries row-wise and runs the full-size `finish` once."""
    a, b = halves[0].carry, halves[1].carry
    windowed = halves[0].fns[0].history.segment_len > 0
    join = lambda x, y: x + y if jnp.ndim(x) == 0 else jnp.concatenate([x, y], axis=0)  # noqa: E731
    # The concatenated layout's KV cache is not read by finish; windowed samples are rows.
    layout = jax.tree.map(join, a.layout, b.layout) if windowed else None
    carry = jax.tree.map(join, a.replace(layout=None), b.replace(layout=None)).replace(layout=layout)
    spec = self.env.info_spec(alen, n)
    finish = self.base.steps(n, obs_len, spec)[5]
    return jax.block_until_ready(finish(carry, group_id, ep_keys))


def make_host_rollout(policy: Policy, env: Any, cfg: EpisodeConfig, pieces: PromptPieces, *,
                      overlap: bool = True):
  """The host rollout of `env`: `OverlapRollout` when `overlap` (and the env can step
  asynchronously), else the plain `HostRollout`. Both have `eval_shape` and `timings`."""
  if overlap and callable(getattr(env, "step_async", None)):
    return OverlapRollout(policy, env, cfg, pieces)
  return HostRollout(policy, env, cfg, pieces)
