"""KL penalties to a reference policy and the combined actor loss (ALGORITHMS.md §1.8, §1.9).

Estimators of KL(πθ ‖ πref) from the sampled token's log-probs (Schulman 2020,
http://joschu.net/blog/kl-approx.html; verl `kl_penalty`), with d = logπθ − logπref:

  k1 / kl:          d
  abs:              |d|
  k2 / mse:         ½·d²
  k3 / low_var_kl:  u = clamp(−d, −20, 20);  clamp(eᵘ − u − 1, −10, 10)

A trailing "+" (e.g. "k3+") is the documented straight-through variant: the value of the named
estimator with the gradient of k2, out = k2 − sg(k2) + sg(base). (k1 and k3 are unbiased in
value but their expected gradient is not ∇KL; k2's is.) "full" needs the whole vocabulary:
use `agent_rl.losses.distill.logits_kl`.

Also: KL as a reward penalty with verl's fixed / adaptive β controllers, and `actor_loss`,
the registered policy loss − c_ent·H̄ + c_kl·KL̄.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.losses.base import LOSSES, agg_loss, float_dtype, masked_mean
from agent_rl.registry import Registry

sg = jax.lax.stop_gradient

KL_ESTIMATORS = Registry("kl estimator")


def _k1(d):
  return d


def _abs(d):
  return jnp.abs(d)


def _k2(d):
  return 0.5 * jnp.square(d)


def _k3(d):
  u = jnp.clip(-d, -20.0, 20.0)
  return jnp.clip(jnp.exp(u) - u - 1.0, -10.0, 10.0)


for _names, _fn in ((("k1", "kl"), _k1), (("abs",), _abs), (("k2", "mse"), _k2),
                    (("k3", "low_var_kl"), _k3)):
  for _n in _names:
    KL_ESTIMATORS.register(_n, _fn)


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, kind: str = "low_var_kl") -> jax.Array:
  """Per-token KL estimate `[B, L]` of the named estimator (with "+" straight-through)."""
  if kind == "full":
    raise ValueError("kl kind 'full' needs logits over the vocabulary; use "
                     "agent_rl.losses.distill.logits_kl")
  straight = kind.endswith("+")
  base = KL_ESTIMATORS.get(kind[:-1] if straight else kind)
  dt = float_dtype(logprobs)
  d = logprobs.astype(dt) - ref_logprobs.astype(dt)
  value = base(d)
  if not straight or base is _k2:
    return value
  k2 = _k2(d)
  return k2 - sg(k2) + sg(value)


def kl_loss(logprobs, ref_logprobs, mask, *, kind="low_var_kl", loss_agg_mode="token-mean",
            **agg) -> jax.Array:
  """agg(kl_penalty(logπθ, logπref)) with the actor's `loss_agg_mode` (`use_kl_loss`)."""
  return agg_loss(kl_penalty(logprobs, ref_logprobs, kind), mask, loss_agg_mode, **agg)


def actor_loss(logprobs, old_logprobs, advantages, mask, *, policy_loss="vanilla",
               loss_agg_mode="token-mean", entropy=None, entropy_coef=0.0, ref_logprobs=None,
               kl_coef=0.0, kl_type="low_var_kl", key=None, turn_index=None, weights=None,
               num_tokens=None, num_seqs=None, scale=None, **hparams):
  """Actor loss = pg − c_ent·H̄ + c_kl·KL̄ (§1.9 "Actor loss", §1.8 "KL used as a loss").

  Args:
    policy_loss: name in `LOSSES` (static); `hparams` go to it.
    entropy: optional `[B, L]` per-token entropy (`entropy_from_logits`); when given, H̄ (its
      aggregate with `loss_agg_mode`) is reported, and it enters the loss if entropy_coef ≠ 0.
    ref_logprobs: `[B, L]` reference log-probs, required when kl_coef ≠ 0.
    kl_type: KL estimator name (verl's default for the loss is low_var_kl, coef 0.001).
  Returns:
    (loss, metrics) with the policy loss's metrics plus pg_loss, and entropy / kl_loss when
    computed.
  """
  agg = dict(num_tokens=num_tokens, num_seqs=num_seqs, scale=scale)
  pg, metrics = LOSSES.get(policy_loss)(
      logprobs, old_logprobs, advantages, mask, loss_agg_mode=loss_agg_mode, key=key,
      turn_index=turn_index, weights=weights, **agg, **hparams)
  metrics = dict(metrics, pg_loss=pg)
  loss = pg
  if entropy is not None:
    h = agg_loss(entropy.astype(pg.dtype), mask, loss_agg_mode, **agg)
    metrics["entropy"] = h
    loss = loss - entropy_coef * h
  elif not (isinstance(entropy_coef, (int, float)) and entropy_coef == 0):
    raise ValueError("actor_loss: entropy_coef != 0 needs `entropy` ([B, L] per-token entropy)")
  if ref_logprobs is not None:
    kl = kl_loss(logprobs, ref_logprobs, mask, kind=kl_type, loss_agg_mode=loss_agg_mode, **agg)
    metrics["kl_loss"] = kl
    loss = loss + kl_coef * kl
  elif not (isinstance(kl_coef, (int, float)) and kl_coef == 0):
    raise ValueError("actor_loss: kl_coef != 0 needs `ref_logprobs` ([B, L] reference log-probs)")
  return loss, metrics
