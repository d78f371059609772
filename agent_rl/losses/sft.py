"""Supervised fine-tuning: masked negative log-likelihood.

Used for SFT warm starts on expert demonstrations (e.g. SPA's state-prediction SFT,
ALGORITHMS.md §4.11) and as the behaviour-cloning term of mixed objectives. The loss is the
NLL of the target tokens under the mask, aggregated with the same `loss_agg_mode`s as RL losses
(token-mean is the usual SFT choice).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.losses.base import agg_loss, check_mode, float_dtype, masked_mean, token_logprobs


def sft_loss(logprobs: jax.Array, mask: jax.Array, *, loss_agg_mode: str = "token-mean",
             num_tokens=None, num_seqs=None, scale=None):
  """Masked NLL from target-token log-probs.

  Args:
    logprobs: `[B, L]` log π(y_t | y_<t) of the target tokens.
    mask: `[B, L]` 1 on supervised (assistant) tokens.
  Returns:
    (loss, {"nll": token-mean NLL, "num_tokens": Σm}).
  """
  check_mode(loss_agg_mode)
  if jnp.shape(mask) != jnp.shape(logprobs):
    raise ValueError(f"sft_loss: mask has shape {jnp.shape(mask)}, expected {jnp.shape(logprobs)}")
  lp = logprobs.astype(float_dtype(logprobs))
  m = mask.astype(lp.dtype)
  loss = agg_loss(-lp, m, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, scale=scale)
  return loss, {"nll": masked_mean(-jax.lax.stop_gradient(lp), m), "num_tokens": jnp.sum(m)}


def sft_loss_from_logits(logits: jax.Array, targets: jax.Array, mask: jax.Array, **kwargs):
  """`sft_loss` from `[B, L, V]` logits and `[B, L]` int targets (no full log-softmax kept)."""
  return sft_loss(token_logprobs(logits, targets), mask, **kwargs)
