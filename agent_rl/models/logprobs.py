"""Token log-probabilities and entropies, directly or chunked from hidden states.

log p(y_t) = z_t[y_t] - logsumexp(z_t) and H_t = logsumexp(z_t) - sum_v softmax(z_t)_v z_t,v.
`logprobs_from_hidden` never materializes the [B, L, V] logits: it scans over sequence chunks
(rematerialized in the backward pass, so training memory is one chunk's logits), the trick
of chunked cross-entropy in large-vocabulary LM training (e.g. Wijmans et al., 2024,
"Cut Your Losses in Large-Vocabulary Language Models", arXiv:2411.09009).
"""
from __future__ import annotations

from typing import Tuple, Union

import jax
import jax.numpy as jnp

from agent_rl.models.dense import dense


def token_logprobs(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """logits: [..., V], targets: [...] int -> log p(targets) [...] float32."""
  if logits.shape[:-1] != targets.shape:
    raise ValueError(f"logits {logits.shape} and targets {targets.shape} disagree on [...]")
  z = logits.astype(jnp.float32)
  picked = jnp.take_along_axis(z, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return picked - jax.nn.logsumexp(z, axis=-1)


def token_entropy(logits: jax.Array) -> jax.Array:
  """logits: [..., V] -> entropy of softmax(logits) [...] float32 (nats)."""
  z = logits.astype(jnp.float32)
  lse = jax.nn.logsumexp(z, axis=-1)
  p = jnp.exp(z - lse[..., None])
  return lse - jnp.sum(p * z, axis=-1)


def logprobs_from_hidden(hidden: jax.Array, head_weight: jax.Array, targets: jax.Array,
                         chunk: int = 128, with_entropy: bool = False,
                         temperature: float = 1.0
                         ) -> Union[jax.Array, Tuple[jax.Array, jax.Array]]:
  """Log-probs of `targets` under softmax(hidden @ head_weight / temperature), chunked.

  Args:
    hidden: [B, L, E] final hidden states. head_weight: [E, V]. targets: [B, L] int.
    chunk: sequence positions per scan step (L is padded up to a multiple).
    with_entropy: also return the per-token entropy.
    temperature: logits are divided by it (behaviour policy sampled at that temperature).
  Returns:
    logprobs [B, L] float32, and entropy [B, L] float32 when `with_entropy`.
  """
  if hidden.ndim != 3 or head_weight.ndim != 2 or hidden.shape[-1] != head_weight.shape[0]:
    raise ValueError(f"hidden [B,L,E] and head_weight [E,V] expected, got {hidden.shape}, "
                     f"{head_weight.shape}")
  if targets.shape != hidden.shape[:2]:
    raise ValueError(f"targets {targets.shape} must be [B, L] = {hidden.shape[:2]}")
  if not isinstance(chunk, int) or chunk <= 0:
    raise ValueError(f"chunk must be a positive int, got {chunk!r}")
  b, l, e = hidden.shape
  chunk = min(chunk, l)
  n = -(-l // chunk)
  pad = n * chunk - l
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
  t = jnp.pad(targets.astype(jnp.int32), ((0, 0), (0, pad)))
  h = h.reshape(b, n, chunk, e).swapaxes(0, 1)  # [n, B, C, E]
  t = t.reshape(b, n, chunk).swapaxes(0, 1)  # [n, B, C]
  w = head_weight  # cast to hidden's dtype inside `dense`
  inv_t = 1.0 / temperature

  @jax.checkpoint
  def one(hc, tc):
    z = dense(hc, w, out_dtype=jnp.float32) * inv_t  # [B, C, V]
    lp = token_logprobs(z, tc)
    ent = token_entropy(z) if with_entropy else jnp.zeros_like(lp)
    return lp, ent

  def body(carry, xs):
    return carry, one(*xs)

  _, (lp, ent) = jax.lax.scan(body, None, (h, t))
  lp = lp.swapaxes(0, 1).reshape(b, n * chunk)[:, :l]
  if not with_entropy:
    return lp
  return lp, ent.swapaxes(0, 1).reshape(b, n * chunk)[:, :l]
