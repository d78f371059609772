"""SORL turn-level ratio PPO, SO-PPO / SO-GRPO (shared/ALGORITHMS.md §4.12) [abstract].

"SORL: Stabilizing Off-policy RL for long-horizon agents" (arXiv 2511.20718). No code was
found; this is derived from the abstract and a secondary summary. What the spec fixes:

  ρ_k = exp(mean_{t ∈ turn k} Δ_t)            geometric mean of the token ratios of turn k
  ℓ_k = max(−Ā_k·ρ_k, −Ā_k·clip(ρ_k, 1−ε_low, 1+ε_high))   one PPO clip per turn, shared
                                               by the turn's tokens
  loss = Σ_k w̄_k·ℓ_k / N_turns                 aggregated per turn

with Ā_k, w̄_k the masked token means of the advantages and IS weights over turn k (turn-level
credit is constant within a turn, so Ā_k is that constant). The gradient of ρ_k reaches every
token of the turn (∂ρ_k/∂logπ_t = ρ_k/n_k). An optional dual clip (`clip_ratio_c`) is offered
as in `vanilla`, off by default.

**Clipping-triggered normalization — design proposal (the paper's exact rule was not found).**
A clipped turn (L2 > L1) contributes no gradient, so with plain turn-mean the update shrinks
as the clipped fraction f = N_clipped / N_turns grows. When f exceeds `clip_norm_threshold`:
  clip_norm="unclipped": divide by the number of unclipped turns, max(N_turns − N_clipped, 1),
      instead of N_turns, so each still-informative turn keeps its usual weight (default);
  clip_norm="shrink": multiply the loss by (1 − f), i.e. trust the batch less when much of it
      is off-policy enough to be clipped;
  clip_norm="none": plain turn-mean always.
The counts are stop-gradient constants, so the rule rescales the surrogate gradient only.

Turns are identified by `turn_index [B, L]` (any integer labels; -1 = prompt, never counted).
Rows without turn structure can pass `turn_index = zeros` (one turn per row, i.e. GSPO-like
sequence ratio with a true geometric-mean gradient).
"""
from __future__ import annotations

from typing import Callable, Dict

import jax
import jax.numpy as jnp

from agent_rl.losses.base import (check_policy_inputs, local_counts, masked, ratio_metrics,
                                  register, resolve_clip, segment_sum, turn_items)

sg = jax.lax.stop_gradient

# name -> (turn-loss sum, n_turns, n_clipped, triggered) -> loss
CLIP_NORMS: Dict[str, Callable[..., jax.Array]] = {
    "none": lambda total, n, nc, trig: total / jnp.maximum(n, 1.0),
    "unclipped": lambda total, n, nc, trig: total / jnp.where(trig, jnp.maximum(n - nc, 1.0),
                                                              jnp.maximum(n, 1.0)),
    "shrink": lambda total, n, nc, trig: (total / jnp.maximum(n, 1.0)
                                          * jnp.where(trig, (n - nc) / jnp.maximum(n, 1.0), 1.0)),
}


@register("sorl")
@local_counts("turns")
def sorl(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode="token-mean", key=None,
         turn_index=None, weights=None, clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None,
         clip_ratio_c=None, clip_norm="unclipped", clip_norm_threshold=0.2, num_tokens=None,
         num_seqs=None, scale=None):
  """SO-PPO turn-level ratio loss (module docstring); aggregation forced per turn.

  Args (beyond the common contract):
    turn_index: `[B, L]` int turn of each token (required).
    clip_ratio / clip_ratio_low / clip_ratio_high: PPO ε on the turn ratio.
    clip_ratio_c: dual-clip constant (> 1) or None (off).
    clip_norm: one of `CLIP_NORMS` ("unclipped", "shrink", "none"), the design proposal.
    clip_norm_threshold: the clipped-turn fraction above which `clip_norm` applies.
  `loss_agg_mode`, `num_tokens`, `num_seqs`, `scale` are validated/accepted but unused: the
  turn counts are local to the batch.
  Metrics: clipfrac / clipfrac_lower over turns; ppo_kl / approx_kl over tokens; num_turns;
  norm_triggered (0/1); norm_factor (loss / plain turn-mean loss).
  """
  del key, num_tokens, num_seqs, scale
  if turn_index is None:
    raise ValueError("sorl: `turn_index` [B, L] is required (the turn of each token)")
  if clip_norm not in CLIP_NORMS:
    raise ValueError(f"sorl: unknown clip_norm {clip_norm!r}; known: {', '.join(CLIP_NORMS)}")
  if isinstance(clip_ratio_c, (int, float)) and clip_ratio_c <= 1.0:
    raise ValueError(f"sorl: clip_ratio_c must be > 1 (or None), got {clip_ratio_c}")
  lp, old, adv, m, w = check_policy_inputs("sorl", logprobs, old_logprobs, advantages, mask,
                                           weights, turn_index, loss_agg_mode)
  lo, hi = resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high)
  delta = lp - old
  tm, seg, n_k = turn_items(m, turn_index)
  valid = n_k > 0
  denom = jnp.where(valid, n_k, 1.0)
  mean_k = lambda x: segment_sum(masked(x, tm), seg) / denom
  ratio = jnp.exp(jnp.clip(mean_k(delta), -20.0, 20.0))
  adv_k = sg(mean_k(adv))
  l1 = -adv_k * ratio
  l2 = -adv_k * jnp.clip(ratio, 1.0 - lo, 1.0 + hi)
  turn_loss = jnp.maximum(l1, l2)
  clipped = (l2 > l1) & valid
  clipped_lower = jnp.zeros_like(clipped)
  if clip_ratio_c is not None:
    l3 = -adv_k * clip_ratio_c
    neg = adv_k < 0
    clipped_lower = (turn_loss > l3) & neg & valid
    turn_loss = jnp.where(neg, jnp.minimum(l3, turn_loss), turn_loss)
  if w is not None:
    turn_loss = turn_loss * sg(mean_k(w))
  dt = lp.dtype
  n = jnp.sum(valid).astype(dt)
  nc = jnp.sum(clipped).astype(dt)
  frac = nc / jnp.maximum(n, 1.0)
  trig = frac > clip_norm_threshold
  total = jnp.sum(jnp.where(valid, turn_loss, 0.0))
  loss = CLIP_NORMS[clip_norm](total, n, nc, trig)
  metrics = ratio_metrics(delta, m, frac, jnp.sum(clipped_lower).astype(dt) / jnp.maximum(n, 1.0))
  metrics["num_turns"] = n
  metrics["norm_triggered"] = trig.astype(dt)
  one = jnp.ones((), dt)
  metrics["norm_factor"] = (CLIP_NORMS[clip_norm](one, n, nc, trig)
                            / CLIP_NORMS["none"](one, n, nc, trig))
  return loss, metrics
