"""Covariance-based entropy control: Clip-Cov and KL-Cov (shared/ALGORITHMS.md §1.9).

Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (arXiv 2505.22617; PRIME-RL/Entropy-Mechanism-of-RL, verl `clip_cov` / `kl_cov`).
The tokens whose centred covariance cov_t = (A_t − Ā)·(logπ_t − mean logπ) is large drive
entropy collapse; Clip-Cov drops the gradient of a few of them at random, KL-Cov adds a
|Δ| penalty to the top-k of them.

The selections are data-dependent counts; to stay jittable with static shapes they are rank
masks: sort once, keep the positions whose rank is below the (traced) count k.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.losses.base import (agg_loss, check_policy_inputs, masked_mean, ratio_metrics,
                                  register, resolve_clip)

sg = jax.lax.stop_gradient


def _rank_below(score: jax.Array, k: jax.Array) -> jax.Array:
  """Bool mask of the k smallest entries of `score` (ties broken by flat position)."""
  flat = score.reshape(-1)
  order = jnp.argsort(flat, stable=True)
  ranks = jnp.zeros(flat.shape, jnp.int32).at[order].set(jnp.arange(flat.size, dtype=jnp.int32))
  return (ranks < k).reshape(score.shape)


def token_covariance(logprobs: jax.Array, advantages: jax.Array, m: jax.Array) -> jax.Array:
  """cov_t = (A_t − Ā)·(logπ_t − mean logπ), both means over the batch's masked tokens."""
  lp = sg(logprobs)
  return (advantages - masked_mean(advantages, m)) * (lp - masked_mean(lp, m))


def clip_cov_selection(logprobs, old_logprobs, advantages, mask, key, *, clip_ratio=0.2,
                       clip_ratio_low=None, clip_ratio_high=None, clip_cov_ratio=2e-4,
                       clip_cov_lb=1.0, clip_cov_ub=5.0) -> jax.Array:
  """The `[B, L]` bool tokens whose gradient Clip-Cov removes.

  Candidates: m = 1, not clipped by the PPO clip (L2 > L1), and lb < cov < ub. Exactly
  k = min(max(⌊r·Σm⌋, 1), #candidates) of them are drawn uniformly without replacement,
  deterministically for a given `key`.
  """
  lp, old, adv, m, _ = check_policy_inputs("clip_cov", logprobs, old_logprobs, advantages, mask)
  lo, hi = resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high)
  ratio = jnp.exp(sg(lp) - old)
  clipped_by_origin = (-adv * jnp.clip(ratio, 1.0 - lo, 1.0 + hi) > -adv * ratio) & (m > 0)
  cov = token_covariance(lp, adv, m)
  cand = (m > 0) & ~clipped_by_origin & (cov > clip_cov_lb) & (cov < clip_cov_ub)
  k = jnp.maximum(jnp.floor(clip_cov_ratio * jnp.sum(m)), 1.0)
  k = jnp.minimum(k, jnp.sum(cand)).astype(jnp.int32)
  # Random 31-bit priorities for candidates and a larger value for the rest: candidates
  # always rank first, so exactly k of them are picked even if priorities collide.
  bits = jax.random.bits(key, lp.shape, jnp.uint32) >> 1
  score = jnp.where(cand, bits, jnp.uint32(2**31) + (bits >> 1))
  return _rank_below(score, k) & cand


@register("clip_cov")
def clip_cov(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
             turn_index=None, weights=None, clip_ratio=0.2, clip_ratio_low=None,
             clip_ratio_high=None, clip_cov_ratio=2e-4, clip_cov_lb=1.0, clip_cov_ub=5.0,
             num_tokens=None, num_seqs=None, scale=None):
  """Clip-Cov (§1.9 `clip_cov`): PPO without dual clip, a random few high-cov tokens zeroed.

    ρ = e^Δ (no clamp);  L1 = −A·ρ;  L2 = −A·clip(ρ, 1−ε_low, 1+ε_high)
    ℓ = max(L1, L2)·corr,  corr = 0 on `clip_cov_selection`, 1 elsewhere.
  `key` (a PRNG key) is required. Defaults r = 2e-4, lb = 1, ub = 5.
  Metrics: clipfrac = mean[corr = 0] (verl's definition), cov_selected = Σ[corr = 0].
  """
  del turn_index
  if key is None:
    raise ValueError("clip_cov: `key` (a jax PRNG key) is required for the random token selection")
  lp, old, adv, m, w = check_policy_inputs("clip_cov", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  lo, hi = resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high)
  delta = lp - old
  ratio = jnp.exp(delta)
  l1 = -adv * ratio
  l2 = -adv * jnp.clip(ratio, 1.0 - lo, 1.0 + hi)
  sel = clip_cov_selection(lp, old, adv, m, key, clip_ratio=clip_ratio,
                           clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high,
                           clip_cov_ratio=clip_cov_ratio, clip_cov_lb=clip_cov_lb,
                           clip_cov_ub=clip_cov_ub)
  loss_mat = jnp.where(sel, 0.0, jnp.maximum(l1, l2))
  if w is not None:
    loss_mat = loss_mat * w
  loss = agg_loss(loss_mat, m, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                  scale=scale)
  metrics = ratio_metrics(delta, m, masked_mean(sel.astype(lp.dtype), m))
  metrics["cov_selected"] = jnp.sum(sel).astype(lp.dtype)
  return loss, metrics


def kl_cov_selection(logprobs, advantages, mask, *, kl_cov_ratio=2e-4) -> jax.Array:
  """The `[B, L]` bool top-k tokens by cov among m = 1, k = min(max(1, ⌊N·r⌋), N), N = Σm."""
  lp, _, adv, m, _ = check_policy_inputs("kl_cov", logprobs, logprobs, advantages, mask)
  valid = m > 0
  cov = token_covariance(lp, adv, m)
  n = jnp.sum(valid)
  k = jnp.minimum(jnp.maximum(jnp.floor(n * kl_cov_ratio), 1.0), n).astype(jnp.int32)
  return _rank_below(jnp.where(valid, -cov, jnp.inf), k) & valid


@register("kl_cov")
def kl_cov(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
           turn_index=None, weights=None, kl_cov_ratio=2e-4, ppo_kl_coef=0.1, num_tokens=None,
           num_seqs=None, scale=None):
  """KL-Cov (§1.9 `kl_cov`): unclipped −A·ρ plus κ·|Δ| on the top-k covariance tokens.

    ρ = e^Δ (no clamp);  ℓ = −A·ρ + κ·|Δ|·[t ∈ top-k cov]
  κ = `ppo_kl_coef`: 0.1 is verl's yaml default (its code fallback is 1.0).
  Metrics: ppo_kl_abs = mean|Δ| (what verl logs as ppo_kl), cov_selected = k.
  """
  del key, turn_index
  lp, old, adv, m, w = check_policy_inputs("kl_cov", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  delta = lp - old
  sel = kl_cov_selection(lp, adv, m, kl_cov_ratio=kl_cov_ratio)
  loss_mat = -adv * jnp.exp(delta) + jnp.where(sel, ppo_kl_coef * jnp.abs(delta), 0.0)
  if w is not None:
    loss_mat = loss_mat * w
  loss = agg_loss(loss_mat, m, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                  scale=scale)
  metrics = ratio_metrics(delta, m)
  metrics["ppo_kl_abs"] = masked_mean(jnp.abs(sg(delta)), m)
  metrics["cov_selected"] = jnp.sum(sel).astype(lp.dtype)
  return loss, metrics
