"""Token-level policy-gradient losses (shared/ALGORITHMS.md §1.7, §1.9, §4.9).

verl `core_algos.py` (volcengine/verl) restated in JAX; the symbols map to fields as
  logπθ = `logprobs`, logπold = `old_logprobs`, A = `advantages`, m = `mask`,
  Δ = logπθ − logπold, ρ = exp(Δ), ε_low / ε_high = `clip_ratio_low` / `clip_ratio_high`
  (both default to `clip_ratio`), sg = stop-gradient.

Papers: PPO (Schulman et al. 2017, arXiv 1707.06347), dual-clip PPO (Ye et al. 2019,
arXiv 1912.09729), DAPO clip-higher (arXiv 2503.14476), GSPO (arXiv 2507.18071),
SAPO (arXiv 2511.20347), CISPO (MiniMax-M1, arXiv 2506.13585), GMPO (arXiv 2507.20673),
GPG (arXiv 2504.02546), selective rollout REINFORCE (zhiyuanZhai20/selective-rollout).

All losses share the signature documented in `agent_rl.losses.base`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.losses.base import (agg_loss, check_policy_inputs, local_counts, masked,
                                  masked_mean, ratio_metrics, register, resolve_clip,
                                  segment_sum, turn_items)

sg = jax.lax.stop_gradient


def _weighted(loss_mat, weights):
  return loss_mat if weights is None else loss_mat * weights


@register("vanilla")
def vanilla(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
            turn_index=None, weights=None, clip_ratio=0.2, clip_ratio_low=None,
            clip_ratio_high=None, clip_ratio_c=3.0, num_tokens=None, num_seqs=None, scale=None):
  """PPO clipped surrogate with dual-clip and asymmetric clip-higher (§1.9 `vanilla`).

    Δ ← clamp(Δ, −20, 20);  L1 = −A·ρ;  L2 = −A·clip(ρ, 1−ε_low, 1+ε_high);  Lc = max(L1, L2)
    ℓ = min(−A·c, Lc) where A < 0 (dual clip, c = `clip_ratio_c` > 1), else Lc.
  `clip_ratio_c=None` turns the dual clip off. DAPO's clip-higher: ε_low=0.2, ε_high=0.28.
  Metrics: clipfrac = mean[L2 > L1]; clipfrac_lower = mean[(Lc > −A·c) ∧ A < 0].
  """
  del key, turn_index
  if clip_ratio_c is not None and isinstance(clip_ratio_c, (int, float)) and clip_ratio_c <= 1.0:
    raise ValueError(f"vanilla: clip_ratio_c must be > 1 for dual-clip PPO, got {clip_ratio_c}")
  lp, old, adv, m, w = check_policy_inputs("vanilla", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  lo, hi = resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high)
  delta = jnp.clip(lp - old, -20.0, 20.0)
  ratio = jnp.exp(delta)
  l1 = -adv * ratio
  l2 = -adv * jnp.clip(ratio, 1.0 - lo, 1.0 + hi)
  lc = jnp.maximum(l1, l2)
  clipfrac = masked_mean((l2 > l1).astype(lp.dtype), m)
  if clip_ratio_c is None:
    loss_mat, clipfrac_lower = lc, jnp.zeros((), lp.dtype)
  else:
    l3 = -adv * clip_ratio_c
    neg = adv < 0
    loss_mat = jnp.where(neg, jnp.minimum(l3, lc), lc)
    clipfrac_lower = masked_mean(((lc > l3) & neg).astype(lp.dtype), m)
  loss = agg_loss(_weighted(loss_mat, w), m, loss_agg_mode, num_tokens=num_tokens,
                  num_seqs=num_seqs, scale=scale)
  return loss, ratio_metrics(delta, m, clipfrac, clipfrac_lower)


@register("gspo")
def gspo(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
         turn_index=None, weights=None, clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None,
         num_tokens=None, num_seqs=None, scale=None):
  """GSPO, sequence-level ratio (§1.9 `gspo`); aggregation forced to seq-mean-token-mean.

    ℓ̄_i = Σ_t m·Δ / max(|y_i|, 1)
    log s_{i,t} = min(sg(ℓ̄_i) + logπθ_t − sg(logπθ_t), 10);  s = exp(log s)
    ℓ = max(−A·s, −A·clip(s, 1−ε_low, 1+ε_high))   (no dual clip)
  The value of s is the sequence's geometric-mean ratio; its gradient flows per token.
  `loss_agg_mode` is validated but ignored (the paper's and verl's choice). Paper scripts use
  ε_low = 3e-4, ε_high = 4e-4.
  """
  del key, turn_index, num_tokens, scale
  lp, old, adv, m, w = check_policy_inputs("gspo", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  lo, hi = resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high)
  delta = lp - old
  seq_delta = jnp.sum(masked(delta, m), axis=-1) / jnp.maximum(jnp.sum(m, axis=-1), 1.0)
  log_s = jnp.minimum(sg(seq_delta)[:, None] + lp - sg(lp), 10.0)
  s = jnp.exp(log_s)
  l1 = -adv * s
  l2 = -adv * jnp.clip(s, 1.0 - lo, 1.0 + hi)
  loss_mat = jnp.maximum(l1, l2)
  loss = agg_loss(_weighted(loss_mat, w), m, "seq-mean-token-mean", num_seqs=num_seqs)
  clipfrac = masked_mean((l2 > l1).astype(lp.dtype), m)
  return loss, ratio_metrics(delta, m, clipfrac)


@register("sapo")
def sapo(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
         turn_index=None, weights=None, tau_pos=1.0, tau_neg=1.05, num_tokens=None,
         num_seqs=None, scale=None):
  """SAPO soft gate (§1.9 `sapo`); aggregation forced to seq-mean-token-mean.

    Δ ← clamp(Δ, ±20);  τ = τ_pos if A > 0 else τ_neg
    f = σ(τ·(ρ − 1))·4/τ;  ℓ = −f·A
  The smooth gate replaces the hard clip (clipfrac is 0). `loss_agg_mode` is ignored.
  """
  del key, turn_index, num_tokens, scale
  lp, old, adv, m, w = check_policy_inputs("sapo", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  delta = jnp.clip(lp - old, -20.0, 20.0)
  ratio = jnp.exp(delta)
  tau = jnp.where(adv > 0, jnp.asarray(tau_pos, lp.dtype), jnp.asarray(tau_neg, lp.dtype))
  gate = jax.nn.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
  loss = agg_loss(_weighted(-gate * adv, w), m, "seq-mean-token-mean", num_seqs=num_seqs)
  return loss, ratio_metrics(delta, m)


@register("cispo")
def cispo(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
          turn_index=None, weights=None, clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None,
          num_tokens=None, num_seqs=None, scale=None):
  """CISPO clipped IS-weight REINFORCE (§1.9 `cispo`).

    Δ ← clamp(Δ, ±20);  w = sg(clip(ρ, 1−ε_low, 1+ε_high));  ℓ = −w·A·logπθ
  Every token keeps a gradient (the clip bounds its weight instead of dropping it).
  Metrics: clipfrac = mean[ρ ≠ clip(ρ)].
  """
  del key, turn_index
  lp, old, adv, m, w = check_policy_inputs("cispo", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  lo, hi = resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high)
  delta = jnp.clip(lp - old, -20.0, 20.0)
  ratio = jnp.exp(delta)
  clipped = jnp.clip(ratio, 1.0 - lo, 1.0 + hi)
  loss_mat = -sg(clipped) * adv * lp
  loss = agg_loss(_weighted(loss_mat, w), m, loss_agg_mode, num_tokens=num_tokens,
                  num_seqs=num_seqs, scale=scale)
  clipfrac = masked_mean((ratio != clipped).astype(lp.dtype), m)
  return loss, ratio_metrics(delta, m, clipfrac)


@register("geo_mean")
@local_counts("rows")
def geo_mean(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
             turn_index=None, weights=None, clip_ratio=0.4, clip_ratio_low=None,
             clip_ratio_high=None, num_tokens=None, num_seqs=None, scale=None):
  """GMPO geometric-mean policy optimization (§1.9 `geo_mean`); ignores `loss_agg_mode`.

    Δc = clip(Δ, −ε_low, ε_high)          (the clip is in log space)
    Δ* = sgn(A)·min(sgn(A)·Δ, sgn(A)·Δc)
    ρ_i = exp(Σ_t m·Δ* / (Σ_t m + 1e-8)),  Ā_i = Σ_t m·A / (Σ_t m + 1e-8)
    loss = mean_i(−Ā_i·ρ_i)   over all B rows (empty rows add 0 to the mean), as in verl.
  IS weights enter per sequence as their geometric mean exp(Σ m·log(w + 1e-10) / (Σm + 1e-8))
  (verl's rule). GMPO's paper uses ε = 0.4 (e^±0.4), hence the default here.
  Metrics: clipfrac = mean[Δ ≠ Δc ∧ A > 0], clipfrac_lower = mean[Δ ≠ Δc ∧ A < 0].
  """
  del key, turn_index, num_tokens, num_seqs, scale
  lp, old, adv, m, w = check_policy_inputs("geo_mean", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  lo, hi = resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high)
  delta = lp - old
  delta_c = jnp.clip(delta, -lo, hi)
  sgn = jnp.sign(adv)
  delta_star = sgn * jnp.minimum(sgn * delta, sgn * delta_c)
  n = jnp.sum(m, axis=-1) + 1e-8
  ratio = jnp.exp(jnp.sum(masked(delta_star, m), axis=-1) / n)
  adv_seq = jnp.sum(masked(adv, m), axis=-1) / n
  seq_loss = -adv_seq * ratio
  if w is not None:
    seq_loss = seq_loss * jnp.exp(jnp.sum(masked(jnp.log(w + 1e-10), m), axis=-1) / n)
  loss = jnp.mean(seq_loss)
  was_clipped = delta != delta_c
  clipfrac = masked_mean((was_clipped & (adv > 0)).astype(lp.dtype), m)
  clipfrac_lower = masked_mean((was_clipped & (adv < 0)).astype(lp.dtype), m)
  return loss, ratio_metrics(delta, m, clipfrac, clipfrac_lower)


@register("gpg")
def gpg(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
        turn_index=None, weights=None, num_tokens=None, num_seqs=None, scale=None):
  """GPG / plain policy gradient (§1.7): ℓ = −A·logπθ, no ratio, no clip.

  `old_logprobs` only feed the diagnostics (ppo_kl, approx_kl).
  """
  del key, turn_index
  lp, old, adv, m, w = check_policy_inputs("gpg", logprobs, old_logprobs, advantages, mask,
                                           weights, None, loss_agg_mode)
  loss = agg_loss(_weighted(-adv * lp, w), m, loss_agg_mode, num_tokens=num_tokens,
                  num_seqs=num_seqs, scale=scale)
  return loss, ratio_metrics(lp - old, m)


@register("reinforce")
@local_counts("turns")
def reinforce(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
              turn_index=None, weights=None, num_tokens=None, num_seqs=None, scale=None):
  """REINFORCE of the selective-rollout gate's trainer (§4.9); aggregation forced per step.

  The reference trains one item per (trajectory, step) with loss −A·mean_token(logπθ)/n, n the
  number of items. Here an item is a (row, turn) pair when `turn_index` is given (concatenated
  history: each turn's tokens are averaged, then turns are averaged over the batch), or a row
  otherwise (windowed history: one turn per row, i.e. seq-mean-token-mean):

    loss = (1/n) Σ_items −Σ_{t∈item} m·w·A·logπθ / Σ_{t∈item} m,   n = #non-empty items

  Tokens with `turn_index < 0` (prompt) never count. `loss_agg_mode` is validated but ignored;
  use `gpg` for −A·logπθ under any aggregation mode. `num_seqs` overrides n only when
  `turn_index` is None (a global row count).
  """
  del key, num_tokens, scale
  lp, old, adv, m, w = check_policy_inputs("reinforce", logprobs, old_logprobs, advantages, mask,
                                           weights, turn_index, loss_agg_mode)
  loss_mat = _weighted(-adv * lp, w)
  if turn_index is None:
    loss = agg_loss(loss_mat, m, "seq-mean-token-mean", num_seqs=num_seqs)
  else:
    tm, seg, n_k = turn_items(m, turn_index)
    item = segment_sum(masked(loss_mat, tm), seg) / jnp.where(n_k > 0, n_k, 1.0)
    n_items = jnp.sum(n_k > 0)
    loss = jnp.sum(item) / jnp.maximum(n_items, 1)
  return loss, ratio_metrics(lp - old, m)
