"""PiCA: per-turn process-reward advantages (GRPO variant) from PRM step scores.

Paper: PiCA (novdream/PiCA, `Search-R1/verl/trainer/{main_ppo.py, ppo/core_algos.py}`);
spec in shared/ALGORITHMS.md §4.7. The PRM (PiCA-RM) is an extra model: its step scores
come in as an input array.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.needs import Needs, extra, optional_extra
from agent_rl.credit.gigpo import normalize, row_groups


def step_rewards(prm_scores: jax.Array, scored: jax.Array, *, baseline: float = 0.5,
                 scale: float = 0.6, late_start: int = 3, late_coef: float = 0.3,
                 late_base: float = 1.5) -> jax.Array:
  """PiCA's intermediate rewards `[N, T]`: (1 + scale) * (1 - p_i - baseline - pen_i) on scored
  turns, 0 elsewhere; i = 0-based index of the scored step in its episode and
  pen_i = late_coef * late_base^(i - late_start + 1) for i >= late_start (0.3 * 1.5^(i-2)).
  The (1 + scale) multiplier is the reference's effective one (in-place aliasing)."""
  i = jnp.cumsum(scored, axis=1) - 1
  pen = jnp.where(i >= late_start, late_coef * jnp.power(late_base, (i - late_start + 1).astype(jnp.float32)), 0.0)
  return jnp.where(scored, (1.0 + scale) * (1.0 - prm_scores - baseline - pen), 0.0)


@register("pica", needs=Needs(extras=("prm_score",), optional_extras=("step_mask",)))
def pica(batch, *, gamma: float = 1.0,
         baseline: float = 0.5, scale: float = 0.6, outcome_scale: float = 1.5,
         joint: bool = False, norm_by_std: bool = True, outcome_weight: float = 1.0,
         step_weight: float = 1.0, eps: float = 1e-6) -> Credit:
  """PiCA GRPO-variant turn advantages (ALGORITHMS.md §4.7, "Alternative GRPO variant").

  Inputs: reward, valid `[N, T]`, group_id `[N]`; extras (`batch.extras`): `prm_score`
  `[N, T]` f32 PRM score p of each turn; optional `step_mask` `[N, T]` bool of the scored
  (search) turns — default every valid turn but the last. The last valid turn is the outcome turn.
  - Outcome o = outcome_scale * sum of rewards, times outcome_weight; step rewards r_k from
    `step_rewards`, times step_weight (the curriculum weights).
  - Normalised per group_id separately (outcome: one per episode; steps: all scored turns of
    the group), or jointly with `joint=True`: x_hat = (x - mu) / (sigma + eps), sigma the
    population std sqrt(var + 1e-8), count <= 1 -> sigma = 1 (and mu = x: 0).
  - A_k = sum_{scored j >= k} gamma^(#scored steps between) r_hat_j + o_hat on scored turns,
    A = o_hat on the outcome turn; other turns take the next boundary's advantage (their
    tokens belong to its span in the reference). A zero-variance group gives 0 at that level.
  Padding turns get 0.
  """
  n, t = batch.valid.shape
  valid = batch.valid
  last = valid & (jnp.cumsum(valid, axis=1) == jnp.sum(valid, axis=1, keepdims=True))
  step_mask = optional_extra(batch, "step_mask", "pica")
  scored = valid & ~last & (True if step_mask is None else step_mask.astype(bool))
  r_step = step_weight * step_rewards(extra(batch, "prm_score", "pica").astype(jnp.float32), scored,
                                      baseline=baseline, scale=scale)
  out = outcome_weight * outcome_scale * jnp.sum(jnp.where(valid, batch.reward, 0.0), 1, keepdims=True)
  x = jnp.where(last, out, r_step)
  gid = row_groups(batch.group_id, t)
  norm = "mean_std_norm" if norm_by_std else "mean_norm"
  nz = lambda v, w: normalize(v, gid, n, w, norm=norm, eps=eps, singleton="zero", std="pop")
  if joint:
    x_hat = nz(x, last | scored)
  else:
    x_hat = jnp.where(last, nz(x, last), nz(x, scored))
  o_hat = jnp.sum(jnp.where(last, x_hat, 0.0), axis=1)  # [N]

  def step(carry, inp):
    acc, nxt = carry
    xh, is_last, is_scored, ok = inp
    acc = jnp.where(is_last, 0.0, jnp.where(is_scored, xh + gamma * acc, acc))
    adv = jnp.where(is_last, o_hat, jnp.where(is_scored, acc + o_hat, nxt))
    adv = jnp.where(ok, adv, 0.0)
    return (acc, jnp.where(ok, adv, nxt)), adv

  init = (jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.float32))
  _, adv = jax.lax.scan(step, init, (x_hat.T, last.T, scored.T, valid.T), reverse=True)
  adv = adv.T
  return Credit(turn=adv, returns=adv)
