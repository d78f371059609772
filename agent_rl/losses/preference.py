"""Preference and reward-model losses: Bradley-Terry, per-turn BCE (PRM), DPO, KTO.

    loss, m = bradley_terry_loss(r_chosen, r_rejected)                  # outcome RM, [P]
    loss, m = prm_bce_loss(turn_logits, labels, label_mask)             # process RM, [N, T]
    loss, m = dpo_loss(pi_c, pi_r, ref_c, ref_r, beta=0.1)              # sequence log-probs [P]
    loss, m = kto_loss(pi, ref, desirable, beta=0.1)                    # sequence log-probs [B]

All are pure and jittable, reduce to a scalar mean over the (masked) examples and return a
dict of scalar metrics; an all-masked input gives loss 0. Sequence log-probs are
`sequence_logprobs(token_logprobs, mask)` (the sum over the completion's tokens, DPO's
log pi(y|x)). Math in log-sigmoid form (`jax.nn.log_sigmoid`), so large margins stay finite.

`dpo_term` / `kto_term` register DPO and KTO as loss terms of the objective
(`agent_rl.objective.terms`) over a minibatch of preference rows (layout in their docstrings),
with the frozen reference's log-probs in `Minibatch.ref_logprobs`.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from agent_rl.losses.base import Metrics, _nonzero, float_dtype


def _mean(x: jax.Array, m: jax.Array) -> jax.Array:
  return jnp.sum(jnp.where(m > 0, x * m, 0.0)) / _nonzero(jnp.sum(m))


def _f(x) -> jax.Array:
  """At least float32 (float64 stays float64 under x64, for the NumPy-reference tests)."""
  x = jnp.asarray(x)
  return x.astype(float_dtype(x))


def _weights(x: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
  return jnp.ones(x.shape, x.dtype) if mask is None else jnp.asarray(mask).astype(x.dtype)


def sequence_logprobs(token_logprobs: jax.Array, mask: jax.Array) -> jax.Array:
  """token_logprobs, mask: [B, L] -> [B] sum of the masked tokens' log-probs (log pi(y|x))."""
  m = jnp.asarray(mask, token_logprobs.dtype)
  return jnp.sum(jnp.where(m > 0, token_logprobs * m, 0.0), axis=-1)


def bradley_terry_loss(chosen: jax.Array, rejected: jax.Array, mask: Optional[jax.Array] = None,
                       *, margin: float = 0.0) -> tuple[jax.Array, Metrics]:
  """Pairwise Bradley-Terry loss of a reward model (Bradley & Terry 1952; the RM of Ouyang et
  al. 2022, arXiv:2203.02155, eq. 1): -log sigmoid(r_c - r_r - margin), mean over pairs.

  chosen, rejected: [P] scalar rewards of the preferred / dispreferred completion; mask: [P]
  (1 = a real pair). margin: Llama-2's optional margin (Touvron et al. 2023), 0 = plain BT.
  Metrics: `accuracy` (r_c > r_r), `margin` (mean r_c - r_r).
  """
  d = _f(chosen) - _f(rejected)
  m = _weights(d, mask)
  loss = _mean(-jax.nn.log_sigmoid(d - margin), m)
  return loss, {"accuracy": _mean((d > 0).astype(d.dtype), m), "margin": _mean(d, m)}


def prm_bce_loss(logits: jax.Array, labels: jax.Array, label_mask: jax.Array
                 ) -> tuple[jax.Array, Metrics]:
  """Per-step binary cross-entropy of a process reward model (Lightman et al. 2023,
  arXiv:2305.20050: a score per step, trained on step labels; Wang et al. 2024, Math-Shepherd,
  arXiv:2312.08935: BCE on automatically derived step labels).

  logits: [N, T] per-turn scores (read at each turn's last token); labels: [N, T] in {0, 1}
  (or soft targets in [0, 1]); label_mask: [N, T] 1 on turns that have a label. Loss =
  mean over labelled turns of -(y log sigmoid(s) + (1 - y) log sigmoid(-s)).
  Metrics: `accuracy` ((s > 0) == (y > 0.5)), `positive_rate` (mean label).
  """
  s = _f(logits)
  y = jnp.asarray(labels).astype(s.dtype)
  m = jnp.asarray(label_mask).astype(s.dtype)
  nll = -(y * jax.nn.log_sigmoid(s) + (1.0 - y) * jax.nn.log_sigmoid(-s))
  acc = ((s > 0) == (y > 0.5)).astype(s.dtype)
  return _mean(nll, m), {"accuracy": _mean(acc, m), "positive_rate": _mean(y, m)}


def dpo_loss(policy_chosen: jax.Array, policy_rejected: jax.Array, ref_chosen: jax.Array,
             ref_rejected: jax.Array, mask: Optional[jax.Array] = None, *, beta: float = 0.1,
             label_smoothing: float = 0.0) -> tuple[jax.Array, Metrics]:
  """Direct Preference Optimization (Rafailov et al. 2023, arXiv:2305.18290, eq. 7):

      h = beta [(log pi(y_c|x) - log ref(y_c|x)) - (log pi(y_r|x) - log ref(y_r|x))]
      loss = -(1 - eps) log sigmoid(h) - eps log sigmoid(-h)

  with eps = `label_smoothing` (conservative DPO, Mitchell 2023; 0 = the paper's loss).
  All inputs [P] sequence log-probs (`sequence_logprobs`); the reference ones carry no
  gradient (they are a frozen model's). Metrics: implicit rewards `reward_chosen` /
  `reward_rejected` (beta x log-ratio), `accuracy` (h > 0), `margin` (mean h / beta).
  """
  ref_c, ref_r = jax.lax.stop_gradient(ref_chosen), jax.lax.stop_gradient(ref_rejected)
  rc = beta * (_f(policy_chosen) - ref_c)
  rr = beta * (_f(policy_rejected) - ref_r)
  h = rc - rr
  m = _weights(h, mask)
  per = -(1.0 - label_smoothing) * jax.nn.log_sigmoid(h) - label_smoothing * jax.nn.log_sigmoid(-h)
  return _mean(per, m), {"reward_chosen": _mean(rc, m), "reward_rejected": _mean(rr, m),
                         "accuracy": _mean((h > 0).astype(h.dtype), m),
                         "margin": _mean(h, m) / beta}


def kto_loss(policy: jax.Array, ref: jax.Array, desirable: jax.Array,
             mask: Optional[jax.Array] = None, *, beta: float = 0.1, lambda_d: float = 1.0,
             lambda_u: float = 1.0, kl_policy: Optional[jax.Array] = None,
             kl_ref: Optional[jax.Array] = None) -> tuple[jax.Array, Metrics]:
  """Kahneman-Tversky Optimization (Ethayarajh et al. 2024, arXiv:2402.01306, eq. 8):

      r = log pi(y|x) - log ref(y|x)         z0 = max(0, KL estimate), no gradient
      loss = lambda_d (1 - sigmoid(beta (r - z0)))   for desirable y
             lambda_u (1 - sigmoid(beta (z0 - r)))   for undesirable y

  mean over examples. The reference point z0 is the paper's batch estimate of
  KL(pi || ref): the mean of `kl_policy - kl_ref` ([B] sequence log-probs of *mismatched*
  completions y' for x, as the paper and TRL do); when those are not given, the mean of r
  over the batch's own examples (a cheaper estimate from the same completions). Inputs [B];
  `desirable` [B] bool. Metrics: `reward_desirable` / `reward_undesirable` (mean beta r),
  `kl` (z0).
  """
  r = _f(policy) - jax.lax.stop_gradient(_f(ref))
  m = _weights(r, mask)
  if kl_policy is not None:
    if kl_ref is None:
      raise ValueError("kto_loss: kl_policy given without kl_ref (both are needed)")
    kl = _mean(_f(kl_policy) - _f(kl_ref), m)
  else:
    kl = _mean(r, m)
  z0 = jax.lax.stop_gradient(jnp.maximum(kl, 0.0))
  d = jnp.asarray(desirable, bool)
  per = jnp.where(d, lambda_d * (1.0 - jax.nn.sigmoid(beta * (r - z0))),
                  lambda_u * (1.0 - jax.nn.sigmoid(beta * (z0 - r))))
  md, mu = m * d, m * (~d)
  return _mean(per, m), {"reward_desirable": _mean(beta * r, md),
                         "reward_undesirable": _mean(beta * r, mu), "kl": z0}


def pair_rows(x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """[2P, ...] rows laid out (chosen_0, rejected_0, chosen_1, ...) -> ([P, ...], [P, ...])."""
  if x.shape[0] % 2:
    raise ValueError(f"preference rows must come in (chosen, rejected) pairs, got {x.shape[0]} rows")
  return x[0::2], x[1::2]
