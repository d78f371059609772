"""Token log-probabilities and entropies: the one implementation every learner path uses.

log p(y_t) = z_t[y_t] - logsumexp(z_t) and H_t = logsumexp(z_t) - sum_v softmax(z_t)_v z_t,v.

From logits: `token_logprobs`, `token_entropy` (and `shifted_logprobs` for the next-token
convention). From the final hidden states: `shifted_token_stats` (the learner's path) and
`logprobs_from_hidden` (unshifted, with a sampling temperature). The hidden-state path never
materializes the [B, L, V] logits: a `lax.scan` over sequence chunks computes each chunk's
logits, reduces them to per-token statistics, and a `jax.custom_vjp` backward recomputes the
chunk's logits instead of saving them, so memory holds one chunk's [B, C, V] at a time (the
chunked cross-entropy of large-vocabulary LM training: Wijmans et al., 2024, "Cut Your
Losses in Large-Vocabulary Language Models", arXiv:2411.09009). The backward's extra head
GEMM costs about a third of the head's FLOPs.

Mixed precision follows `agent_rl.models.dense`: the head GEMMs read compute-dtype operands
(the hidden's dtype; the stored weight is cast inside) and accumulate in float32; the
statistics are float32; the weight gradient accumulates in float32 over chunks and comes back
in the stored weight's dtype.
"""
from __future__ import annotations

import functools
from typing import Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.models.dense import dense
from agent_rl.parallel.rules import constrain


def _stat_dtype(x: jax.Array):
  # At least float32: bf16 logits are upcast; float64 stays float64 under x64.
  return jnp.promote_types(x.dtype, jnp.float32)


def token_logprobs(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """logits: [..., V], targets: [...] int -> log p(targets) [...] (float32 or wider).

  z[y] - logsumexp(z): the [..., V] log-softmax is never materialized.
  """
  if logits.shape[:-1] != targets.shape:
    raise ValueError(f"logits {logits.shape} and targets {targets.shape} disagree on [...]")
  z = logits.astype(_stat_dtype(logits))
  picked = jnp.take_along_axis(z, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return picked - jax.nn.logsumexp(z, axis=-1)


def token_entropy(logits: jax.Array) -> jax.Array:
  """logits: [..., V] -> entropy of softmax(logits) [...] (float32 or wider, nats)."""
  z = logits.astype(_stat_dtype(logits))
  lse = jax.nn.logsumexp(z, axis=-1)
  p = jnp.exp(z - lse[..., None])
  return lse - jnp.sum(p * z, axis=-1)


def shift_right(x: jax.Array) -> jax.Array:
  """[B, N] statistics of tokens 1..N scored at positions 0..N-1 -> [B, N+1], 0 at token 0."""
  return jnp.concatenate([jnp.zeros((x.shape[0], 1), x.dtype), x], axis=1)


def shifted_logprobs(logits: jax.Array, tokens: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """From materialized logits [B, L, V] and tokens [B, L]: (logprobs, entropy) [B, L] of
  token t under the logits at t-1 (position 0 gets 0). For evaluation and tests; the
  learner uses `shifted_token_stats` from hidden states."""
  if logits.ndim != 3 or tokens.shape != logits.shape[:2]:
    raise ValueError(f"logits [B,L,V] and tokens [B,L] expected, got {logits.shape}, "
                     f"{tokens.shape}")
  z = logits[:, :-1]
  return (shift_right(token_logprobs(z, tokens[:, 1:])), shift_right(token_entropy(z)))


def _chunk_logits(hc, wc, inv_t):
  """hc [B, C, E] (compute dtype) @ wc [E, V] -> float32 logits [B, C, V] / temperature."""
  z = jnp.matmul(hc, wc, preferred_element_type=jnp.float32) * inv_t
  # The head's layout: rows over the data axes, vocabulary over `tensor` (the weight's).
  return constrain(z, ("batch", "length", "vocab"))


def _chunk_stats(z, tc, with_entropy):
  """z [B, C, V] f32, tc [B, C] -> lp, lse, ent [B, C] (ent 0 when not asked for)."""
  lse = jax.nn.logsumexp(z, axis=-1)
  hit = jnp.arange(z.shape[-1], dtype=jnp.int32) == tc[..., None]
  # A masked sum instead of a gather: it stays a fused reduction under vocab sharding.
  lp = jnp.sum(jnp.where(hit, z, 0.0), axis=-1) - lse
  if with_entropy:
    ent = lse - jnp.sum(jnp.exp(z - lse[..., None]) * z, axis=-1)
  else:
    ent = jnp.zeros_like(lse)
  return lp, lse, ent


def _split(x, n, c):
  """[B, N, ...] -> [n, B, c, ...] (zero-padded to n*c positions)."""
  pad = n * c - x.shape[1]
  x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
  return x.reshape(x.shape[0], n, c, *x.shape[2:]).swapaxes(0, 1)


def _merge(x, length):
  """[n, B, c, ...] -> [B, length, ...]."""
  x = x.swapaxes(0, 1)
  return x.reshape(x.shape[0], -1, *x.shape[3:])[:, :length]


def _stats_scan(hidden, w, targets, chunk, with_entropy, inv_t):
  b, length, _ = hidden.shape
  n = -(-length // chunk)
  wc = w.astype(hidden.dtype)

  def body(_, xs):
    hc, tc = xs
    return None, _chunk_stats(_chunk_logits(hc, wc, inv_t), tc, with_entropy)

  _, (lp, lse, ent) = jax.lax.scan(body, None, (_split(hidden, n, chunk),
                                                _split(targets, n, chunk)))
  return _merge(lp, length), _merge(lse, length), _merge(ent, length)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _chunked(hidden, w, targets, chunk, with_entropy, inv_t):
  lp, _, ent = _stats_scan(hidden, w, targets, chunk, with_entropy, inv_t)
  return lp, ent


def _chunked_fwd(hidden, w, targets, chunk, with_entropy, inv_t):
  lp, lse, ent = _stats_scan(hidden, w, targets, chunk, with_entropy, inv_t)
  # Residuals are [B, N] statistics plus the inputs: no [B, N, V] array survives.
  return (lp, ent), (hidden, w, targets, lse, ent)


def _chunked_bwd(chunk, with_entropy, inv_t, res, cts):
  hidden, w, targets, lse, ent = res
  g_lp, g_ent = cts
  b, length, e = hidden.shape
  n = -(-length // chunk)
  wc = w.astype(hidden.dtype)

  def body(dw, xs):
    hc, tc, lse_c, ent_c, glp_c, gent_c = xs
    z = _chunk_logits(hc, wc, inv_t)
    p = jnp.exp(z - lse_c[..., None])
    hit = jnp.arange(z.shape[-1], dtype=jnp.int32) == tc[..., None]
    # d lp / dz = onehot(y) - p;  d H / dz = p * (E_p[z] - z), E_p[z] = lse - H.
    dz = glp_c[..., None] * (hit.astype(jnp.float32) - p)
    if with_entropy:
      dz = dz + gent_c[..., None] * p * ((lse_c - ent_c)[..., None] - z)
    dz = (dz * inv_t).astype(hidden.dtype)  # the GEMMs read compute-dtype operands (dense)
    dh = jnp.matmul(dz, wc.T, preferred_element_type=jnp.float32).astype(hidden.dtype)
    dw = dw + jnp.matmul(hc.reshape(-1, e).T, dz.reshape(-1, dz.shape[-1]),
                         preferred_element_type=jnp.float32)
    return dw, dh

  xs = tuple(_split(x, n, chunk) for x in (hidden, targets, lse, ent, g_lp, g_ent))
  dw, dh = jax.lax.scan(body, jnp.zeros(w.shape, jnp.float32), xs)
  return (_merge(dh, length), dw.astype(w.dtype),
          np.zeros(targets.shape, jax.dtypes.float0))


_chunked.defvjp(_chunked_fwd, _chunked_bwd)


def _check(hidden, head_weight, targets, chunk):
  if hidden.ndim != 3 or head_weight.ndim != 2 or hidden.shape[-1] != head_weight.shape[0]:
    raise ValueError(f"hidden [B,L,E] and head_weight [E,V] expected, got {hidden.shape}, "
                     f"{head_weight.shape}")
  if targets.shape != hidden.shape[:2]:
    raise ValueError(f"tokens/targets {targets.shape} must be [B, L] = {hidden.shape[:2]}")
  if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 0:
    raise ValueError(f"chunk must be an int >= 0 (0 = materialized logits), got {chunk!r}")


def _stats(hidden, head_weight, targets, chunk, with_entropy, temperature):
  """Unshifted (lp, ent) [B, N] of targets[:, t] under the logits of hidden[:, t]."""
  if chunk == 0:  # the materialized baseline: [B, N, V] f32 logits, autodiff through them
    z = dense(hidden, head_weight, out_dtype=jnp.float32) / temperature
    lp = token_logprobs(z, targets)
    return lp, (token_entropy(z) if with_entropy else jnp.zeros_like(lp))
  # `chunk` counts tokens (rows x positions), so the chunk's [B, C, V] logits have the same
  # size whatever the batch: C = chunk // B sequence positions (at least one).
  chunk = min(max(1, int(chunk) // hidden.shape[0]), hidden.shape[1])
  return _chunked(hidden, head_weight, targets.astype(jnp.int32), chunk, bool(with_entropy),
                  1.0 / temperature)


def shifted_token_stats(hidden: jax.Array, head_weight: jax.Array, tokens: jax.Array, *,
                        chunk: int, with_entropy: bool = True) -> Tuple[jax.Array, jax.Array]:
  """Log-prob and entropy of token t under the logits at t-1 (position 0 gets 0).

  Args:
    hidden: [B, L, E] final hidden states (after the final norm), in the compute dtype.
    head_weight: [E, V] output projection as stored (for tied embeddings pass
      `embedding.T`, i.e. `Transformer.head_weight()`).
    tokens: [B, L] int32.
    chunk: tokens per chunk (the chunk spans max(1, chunk // B) sequence positions of all
      B rows): memory holds about chunk x V float32 logits (and their softmax gradient in the
      backward) instead of B x L x V. 0 materializes the full logits and differentiates
      through them (the benchmark's baseline).
    with_entropy: also compute the entropy (else zeros).
  Returns:
    logprobs [B, L] float32, entropy [B, L] float32.
  """
  _check(hidden, head_weight, tokens, chunk)
  b, l, _ = hidden.shape
  if l < 2:
    z = jnp.zeros((b, l), jnp.float32)
    return z, z
  lp, ent = _stats(hidden[:, :-1], head_weight, tokens[:, 1:], chunk, with_entropy, 1.0)
  return shift_right(lp), shift_right(ent)


def logprobs_from_hidden(hidden: jax.Array, head_weight: jax.Array, targets: jax.Array,
                         chunk: int = 128, with_entropy: bool = False,
                         temperature: float = 1.0
                         ) -> Union[jax.Array, Tuple[jax.Array, jax.Array]]:
  """Log-probs of `targets[:, t]` under softmax(hidden[:, t] @ head_weight / temperature).

  Args:
    hidden: [B, L, E] final hidden states. head_weight: [E, V]. targets: [B, L] int.
    chunk: tokens per chunk, as in `shifted_token_stats` (0 = materialized logits).
    with_entropy: also return the per-token entropy.
    temperature: logits are divided by it (behaviour policy sampled at that temperature).
  Returns:
    logprobs [B, L] float32, and entropy [B, L] float32 when `with_entropy`.
  """
  _check(hidden, head_weight, targets, chunk)
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  lp, ent = _stats(hidden, head_weight, targets, chunk, with_entropy, float(temperature))
  return (lp, ent) if with_entropy else lp
