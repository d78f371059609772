"""Skill-conditioned credit: SkillC dual-stream bonus and Skill-R1 bi-level advantages.

Papers: SkillC (arXiv 2605.27899, ALGORITHMS.md §4.13) and Skill-R1 (arXiv 2605.09359,
§4.14). Both are [abstract]: no code was found, so both kernels are design proposals from
the abstracts, with the unknown parts configurable.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.needs import Needs, episode_extra
from agent_rl.credit.gigpo import normalize
from agent_rl.credit.segments import dense_ids


def _episode(batch):
  valid = batch.valid
  s = jnp.sum(jnp.where(valid, batch.reward, 0.0), axis=1)
  return s, jnp.any(valid, axis=1)


def _to_turns(a: jax.Array, valid: jax.Array) -> jax.Array:
  return jnp.where(valid, a[:, None], 0.0)


@register("skillc", needs=Needs(extras=("skill_injected",)))
def skillc(batch, *, lam=1.0, norm_by_std: bool = True,
           eps: float = 1e-6) -> Credit:
  """SkillC dual-stream advantages (§4.13; design proposal).

  Inputs: reward, valid, success `[N, T]`, group_id `[N]`; the extra `skill_injected`
  `[N, T]` bool (the stream of each rollout, read on turn 0); `lam` the curriculum weight
  (float or traced scalar: changing it does not retrace).
  - Base: GRPO of the episode return over the union of both streams of a task (Bessel std,
    eps; singleton -> raw score; zero-variance -> 0).
  - Bonus: A_i += lam * [skill-free and success] * max(0, c_task), c_task = SR_skill - SR_free
    per group (success = any valid turn with success); c_task = 0 when a stream is empty.
  Padding turns get 0.
  """
  n = batch.valid.shape[0]
  s, has = _episode(batch)
  stream = episode_extra(batch, "skill_injected", "skillc").astype(bool)
  inj = stream & has
  free = ~stream & has
  succ = jnp.any(batch.success & batch.valid, axis=1).astype(jnp.float32)
  norm = "mean_std_norm" if norm_by_std else "mean_norm"
  a = normalize(s, batch.group_id, n, has, norm=norm, eps=eps, singleton="raw")
  seg = lambda v: jax.ops.segment_sum(v.astype(jnp.float32), batch.group_id, num_segments=n)
  n_inj, n_free = seg(inj), seg(free)
  sr_inj = seg(succ * inj) / jnp.maximum(n_inj, 1.0)
  sr_free = seg(succ * free) / jnp.maximum(n_free, 1.0)
  c = jnp.where((n_inj > 0) & (n_free > 0), sr_inj - sr_free, 0.0)[batch.group_id]
  a = a + lam * (free & (succ > 0)) * jnp.maximum(c, 0.0)
  adv = _to_turns(a, batch.valid)
  return Credit(turn=adv, returns=adv)


@register("skill_r1", needs=Needs(extras=("generation",), optional_extras=("parent", "skill_return")))
def skill_r1(batch, *, beta: float = 1.0, norm_by_std: bool = True, eps: float = 1e-6) -> Credit:
  """Skill-R1 bi-level advantages A = A_intra + beta * A_inter (§4.14; design proposal).

  Each episode is one sampled skill z (the policy is the skill generator). Inputs: reward,
  valid `[N, T]`, group_id `[N]` (task); episode-level extras (`[N, T]`, read on turn 0):
  `generation` i32 g of each skill; optional `skill_return` f32 R_bar, the mean verified
  reward of the frozen task LLM's rollouts with the skill (default R_bar = the episode
  return); optional `parent` i32 index of the skill z_{g-1} it refines (-1 = none).
  - A_intra: GRPO of R_bar within (task, generation) (Bessel std, eps; singleton -> raw).
  - A_inter = R_bar(z_g) - R_bar(z_{g-1}): the parent's R_bar when `parent` is given, else the
    mean R_bar of the same task's generation g-1 in the batch; 0 when there is none.
  Zero-variance groups give A_intra = 0. Padding turns get 0.
  """
  n = batch.valid.shape[0]
  s, has = _episode(batch)
  rr = episode_extra(batch, "skill_return", "skill_r1", optional=True)
  rbar = s if rr is None else rr.astype(jnp.float32)
  g = episode_extra(batch, "generation", "skill_r1").astype(jnp.int32)
  parent = episode_extra(batch, "parent", "skill_r1", optional=True)
  gid = batch.group_id.astype(jnp.int32)
  key, _ = dense_ids((jnp.concatenate([gid, gid]), jnp.concatenate([g, g - 1])),
                     jnp.concatenate([has, has]))
  norm = "mean_std_norm" if norm_by_std else "mean_norm"
  a_intra = normalize(rbar, key[:n], 2 * n, has, norm=norm, eps=eps, singleton="raw")
  if parent is not None:
    p = jnp.asarray(parent, jnp.int32)
    a_inter = jnp.where(p >= 0, rbar - rbar[jnp.clip(p, 0, n - 1)], 0.0)
  else:
    w = has.astype(jnp.float32)
    tot = jax.ops.segment_sum(w * rbar, key[:n], num_segments=2 * n)
    cnt = jax.ops.segment_sum(w, key[:n], num_segments=2 * n)
    prev = key[n:]
    a_inter = jnp.where(cnt[prev] > 0, rbar - tot[prev] / jnp.maximum(cnt[prev], 1.0), 0.0)
  a = a_intra + beta * a_inter
  adv = _to_turns(a, batch.valid)
  return Credit(turn=adv, returns=adv)
