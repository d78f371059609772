"""Multi-agent credit: Dr. MAS agent-wise normalisation and per-agent isolated advantages.

Papers: Dr. MAS (langfengQ/DrMAS, ALGORITHMS.md §4.1); PA-MAGRPO (arXiv 2608.01425) and
IB-RL (arXiv 2608.06735), §4.15 [abstract]. Turns carry `agent_id`; (group, agent) keys are
`dense_ids((group_id, agent_id))`, so the number of agents need not be static.

Per-agent rewards: an env with per-role reward terms (`env.role_reward_terms`) gets the
optional extra `agent_return [N, T]` from the run (`agents.rewards.attach_agent_return`): on
each turn, the episode return of the agent acting at that turn. Both kernels score an agent by
it when present (the agents' own, differently scaled rewards that Dr. MAS studies); without it
the team return (drmas) or the reward on the agent's own turns (per_agent).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.needs import Needs, optional_extra
from agent_rl.credit.gigpo import first_valid, normalize, row_groups
from agent_rl.credit.segments import dense_ids


def _team_return(batch) -> jax.Array:
  ret = jnp.sum(jnp.where(batch.valid, batch.reward, 0.0), axis=1, keepdims=True)
  return jnp.broadcast_to(ret, batch.valid.shape)


@register("drmas", needs=Needs(env_fields=("agent_id",),
                               optional_extras=("row_scores", "agent_return")))
def drmas(batch, *, group_by_agent: bool = True, pooled_rows: bool = False,
          norm_by_std: bool = True, eps: float = 1e-6) -> Credit:
  """Dr. MAS GRPO advantages (ALGORITHMS.md §4.1).

  Inputs: valid, reward, agent_id `[N, T]`, group_id `[N]`; optional extra
  `batch.extras["row_scores"]` `[N, T]` (default: `agent_return` when the run attached it,
  else the team episode return on every row).
  - group_by_agent=True: every valid turn (each invocation of an agent) enters the
    (group_id, agent_id) statistics; A = (s - mu)/(sigma + eps) (Bessel), or s - mu without
    std (Dr.GRPO style, norm_by_std=False).
  - group_by_agent=False: rows are averaged per episode first; each episode counts once in
    its group_id statistics and all its rows get that episode's advantage (DrMAS's flag off).
  - group_by_agent=False, pooled_rows=True: every valid row enters its group_id statistics
    with its own score, all agents pooled: the global normalization of vanilla GRPO over a
    multi-agent system whose agents' reward distributions differ (the baseline Dr. MAS's
    analysis is about, arXiv:2602.08847 §3).
  Singleton group: mu = 0, sigma = 1 (A = raw score, verl's GRPO). Zero-variance groups give
  0. Padding turns get 0.
  """
  n, t = batch.valid.shape
  valid = batch.valid
  rs = optional_extra(batch, "row_scores", "drmas")
  if rs is None:
    rs = optional_extra(batch, "agent_return", "drmas")
  s = _team_return(batch) if rs is None else rs.astype(jnp.float32)
  norm = "mean_std_norm" if norm_by_std else "mean_norm"
  gid = row_groups(batch.group_id, t)
  if group_by_agent:
    key, _ = dense_ids((gid.reshape(-1), batch.agent_id.reshape(-1)), valid.reshape(-1))
    a = normalize(s, key.reshape(n, t), n * t, valid, norm=norm, eps=eps, singleton="raw")
  elif pooled_rows:
    a = normalize(s, gid, n, valid, norm=norm, eps=eps, singleton="raw")
  else:
    cnt = jnp.sum(valid, axis=1, keepdims=True)
    avg = jnp.sum(jnp.where(valid, s, 0.0), axis=1, keepdims=True) / jnp.maximum(cnt, 1)
    avg = jnp.broadcast_to(avg, (n, t))
    a = normalize(avg, gid, n, first_valid(valid), norm=norm, eps=eps, singleton="raw")
  adv = jnp.where(valid, a, 0.0)
  return Credit(turn=adv, returns=adv)


@register("per_agent", needs=Needs(env_fields=("agent_id",), optional_extras=("agent_return",)))
def per_agent(batch, *, norm_by_std: bool = True, eps: float = 1e-6) -> Credit:
  """PA-MAGRPO / IB-RL per-agent isolated GRPO advantages (§4.15, design proposal from the
  abstracts).

  Inputs: reward, valid, agent_id `[N, T]`, group_id `[N]`. Agent k's reward in episode i is
  R^(k)_i = sum of rewards on the turns agent k acted (or, when the run attached
  `agent_return`, that agent's own return from its role's reward term); each (episode, agent)
  pair counts
  once in the (group_id, k) statistics: A^(k)_i = (R^(k)_i - mu^(k)) / (sigma^(k) + eps).
  Every turn of agent k in episode i gets A^(k)_i. The per-role update is the learner's:
  it selects agent k's tokens by `agent_id` (this kernel never mixes agents' statistics).
  Singleton (group, agent): A = raw R (verl's GRPO); zero-variance groups give 0; padding 0.
  """
  n, t = batch.valid.shape
  valid = batch.valid
  fv = valid.reshape(-1)
  ep = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[:, None], (n, t)).reshape(-1)
  agent = batch.agent_id.reshape(-1)
  pair, _ = dense_ids((ep, agent), fv)
  r = jnp.where(fv, batch.reward.reshape(-1), 0.0)
  r_pair = jax.ops.segment_sum(r, pair, num_segments=n * t)[pair]
  own = optional_extra(batch, "agent_return", "per_agent")
  if own is not None:  # the same value on every turn of the pair
    r_pair = jnp.where(fv, own.reshape(-1).astype(jnp.float32), 0.0)
  pos = jnp.arange(n * t, dtype=jnp.int32)
  first = jax.ops.segment_min(jnp.where(fv, pos, n * t), pair, num_segments=n * t)
  once = fv & (first[pair] == pos)
  key, _ = dense_ids((row_groups(batch.group_id, t).reshape(-1), agent), fv)
  norm = "mean_std_norm" if norm_by_std else "mean_norm"
  a = normalize(r_pair, key, n * t, once, norm=norm, eps=eps, singleton="raw")
  adv = jnp.where(valid, a.reshape(n, t), 0.0)
  return Credit(turn=adv, returns=adv)
