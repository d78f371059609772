"""BEACON (MiGPO): milestone-segment rewards and a dual-scale, GiGPO-style advantage.

Paper: BEACON (ZJU-REAL/BEACON, whose code calls it MiGPO, `migpo/core_migpo.py`); spec in
shared/ALGORITHMS.md §4.3. Two ways to get segments:
- on device from the per-step `batch.milestone` flag (WebShop / SciWorld variant);
- on the host from an ordered milestone list matched to action strings with difflib
  similarity (ALFWorld variant, `milestone_segments`), passed in as arrays.
"""
from __future__ import annotations

from difflib import SequenceMatcher
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.credit.base import Credit, register
from agent_rl.credit.needs import Needs, optional_extra
from agent_rl.credit.gigpo import check_norm, episode_advantage, row_groups, step_advantage
from agent_rl.credit.segments import dense_ids


def flag_segments(milestone: jax.Array, valid: jax.Array, gamma_m, scale: float = 10.0):
  """Per-step-flag segments (`compute_migpo_step_rewards_dynamic`), `[N, T]` each.

  Steps in (t_{k-1}, t_k] before the k-th flag get scale * gamma_m^(t_k - t) (the flagged step
  gets `scale`); steps after the last flag get 0. Segment id = number of flags on earlier
  turns. Assumes valid turns form a prefix of each row (turn index = step index).
  Returns (segment_reward f32, segment_id i32).
  """
  n, t = valid.shape
  flag = milestone & valid
  pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (n, t))
  nxt = jax.lax.cummin(jnp.where(flag, pos, t), axis=1, reverse=True)
  rew = jnp.where(valid & (nxt < t), scale * jnp.power(jnp.float32(gamma_m), (nxt - pos).astype(jnp.float32)), 0.0)
  seg = (jnp.cumsum(flag, axis=1) - flag).astype(jnp.int32)
  return rew, seg


def match_milestones(actions: Sequence[str], milestones: Sequence[str], threshold: float = 0.85) -> list[int]:
  """BEACON's sequential matcher: a pointer k walks the ordered milestones; action t matches
  milestone k when difflib ratio >= threshold. Unmatched milestones are -1."""
  k, out = 0, []
  for t, a in enumerate(actions):
    if k >= len(milestones):
      break
    if SequenceMatcher(None, a, milestones[k]).ratio() >= threshold:
      out.append(t)
      k += 1
  return out + [-1] * (len(milestones) - len(out))


def milestone_segments(actions: Sequence[Sequence[str]], milestones: Sequence[Optional[Sequence[str]]],
                       num_turns: int, *, threshold: float = 0.85, gamma_m: float = 0.99,
                       scale: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
  """Host preprocessing for the ordered-list variant (ALFWorld): `[N, T]` arrays to pass to
  `beacon(segment_reward=..., segment_id=...)`.

  Per episode i with action strings `actions[i]` (one per valid turn) and its ordered
  milestone list (None = no annotation: rewards 0, segment 0): matched milestone k at step
  t_k gives steps in (t_{k-1}, t_k] reward scale * gamma_m^(t_k - t) and segment k; at the
  first unmatched milestone the remaining steps get 0 and segment k; after the last matched
  milestone of a fully matched list, reward 0 and segment -1.
  """
  if len(actions) != len(milestones):
    raise ValueError(f"actions has {len(actions)} episodes but milestones has {len(milestones)}")
  n = len(actions)
  rew = np.zeros((n, num_turns), np.float32)
  seg = np.zeros((n, num_turns), np.int32)
  for i, (acts, ms) in enumerate(zip(actions, milestones)):
    if len(acts) > num_turns:
      raise ValueError(f"actions[{i}] has {len(acts)} steps > num_turns={num_turns}")
    if ms is None:
      continue
    seg[i, :len(acts)] = -1
    prev = -1
    for k, m in enumerate(match_milestones(acts, ms, threshold)):
      if m == -1:
        seg[i, prev + 1:len(acts)] = k
        break
      for t in range(prev + 1, m + 1):
        seg[i, t] = k
        rew[i, t] = scale * gamma_m ** (m - t)
      prev = m
  return rew, seg


@register("beacon", needs=Needs(env_fields=("milestone",),
                                 optional_extras=("segment_reward", "segment_id")))
def beacon(batch, *, gamma_m: float = 0.99, reward_scale: float = 10.0, step_weight: float = 1.0,
           norm: str = "mean_norm", cross_steps: bool = True, invalid_penalty: float = 0.1,
           eps: float = 1e-6) -> Credit:
  """BEACON / MiGPO turn advantages A = A^E + step_weight * A^seg (ALGORITHMS.md §4.3).

  Inputs (`[N, T]`): reward, valid, valid_action, milestone; group_id `[N]`. Optional
  extras `segment_reward` f32 / `segment_id` i32 `[N, T]` (both or neither) from
  `milestone_segments` replace the on-device `flag_segments(batch.milestone)` (a host env
  that sends them still declares the `milestone` flags they were matched from).
  - A^seg: segment rewards (minus invalid_penalty on invalid-action turns, as verl-agent's
    penalty on step rewards) normalised within (group_id, segment_id) groups; singletons
    give 0. Segment id -1 (after a fully matched list) is a group of its own.
  - A^E: GiGPO's episode term (cross-step statistics by default).
  A batch without milestones has all segment rewards 0, so A = A^E (the reference's fallback).
  Zero-variance groups give 0 at that level; padding turns get 0. The script's w is 10;
  the code default (1.0) is kept here.
  """
  check_norm(norm)
  segment_reward = optional_extra(batch, "segment_reward", "beacon")
  segment_id = optional_extra(batch, "segment_id", "beacon")
  if (segment_reward is None) != (segment_id is None):
    raise ValueError("beacon: pass both segment_reward and segment_id, or neither")
  n, t = batch.valid.shape
  valid = batch.valid
  if segment_reward is None:
    segment_reward, segment_id = flag_segments(batch.milestone, valid, gamma_m, reward_scale)
  r = jnp.asarray(segment_reward, jnp.float32) - invalid_penalty * (valid & ~batch.valid_action)
  gid = row_groups(batch.group_id, t).reshape(-1)
  key, _ = dense_ids((gid, jnp.asarray(segment_id, jnp.int32).reshape(-1)), valid.reshape(-1))
  a_seg = step_advantage(r, batch, norm=norm, eps=eps, key=key.reshape(n, t))
  a_e = episode_advantage(batch, norm=norm, cross_steps=cross_steps,
                          invalid_penalty=invalid_penalty, eps=eps)
  adv = jnp.where(valid, a_e + step_weight * a_seg, 0.0)
  return Credit(turn=adv, returns=adv)
