"""A small jitted KV-cache sampler for demos and benchmarks (prefill, then decode loops).

Sampling is inverse-CDF with one uniform per row (Devroye, 1986, "Non-Uniform Random
Variate Generation", ch. 3): cheaper on CPU than Gumbel-max, which needs V uniforms per row.
The CDF is two-level (block sums, then one block), so it costs ~2 sqrt(V) scan steps instead
of a full V-long cumulative sum. The full rollout sampler (top-p/top-k/stop sequences) lives
in `agent_rl.rollout` and can reuse `sample_inverse_cdf`.
"""
from __future__ import annotations

import functools
import math
from typing import Tuple

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models.cache import KVCache, init_cache
from agent_rl.models.inference import decode_step, prefill


def sample_inverse_cdf(key: jax.Array, logits: jax.Array, temperature: float = 1.0
                       ) -> Tuple[jax.Array, jax.Array]:
  """Draws one token per row from softmax(logits / temperature).

  logits: [B, V] float. Returns tokens [B] int32 and their log-probs [B] float32 under the
  tempered distribution. temperature == 0 (a Python number) means greedy (log-prob 0).
  """
  z = logits.astype(jnp.float32)
  if isinstance(temperature, (int, float)) and temperature == 0:
    return jnp.argmax(z, axis=-1).astype(jnp.int32), jnp.zeros(z.shape[:-1], jnp.float32)
  z = z / temperature
  b, v = z.shape
  m = jnp.max(z, axis=-1, keepdims=True)
  e = jnp.exp(z - m)  # [B, V], unnormalized probabilities
  block = 1 << max(0, math.ceil(math.log2(math.sqrt(v))))
  nb = -(-v // block)
  eb = jnp.pad(e, ((0, 0), (0, nb * block - v))).reshape(b, nb, block)
  block_sum = jnp.sum(eb, axis=-1)  # [B, nb]
  block_cdf = jnp.cumsum(block_sum, axis=-1)
  total = block_cdf[:, -1]
  u = jax.random.uniform(key, (b,), jnp.float32) * total
  # Block j is chosen when cdf[j-1] <= u < cdf[j], so zero-mass blocks never are; rounding
  # (u == total) is clipped to the last block with mass, and likewise inside the block.
  last_block = jnp.max(jnp.where(block_sum > 0, jnp.arange(nb), 0), axis=-1)
  j = jnp.minimum(jnp.sum(block_cdf <= u[:, None], axis=-1), last_block)
  before = jnp.where(j > 0, jnp.take_along_axis(block_cdf, jnp.maximum(j - 1, 0)[:, None],
                                                axis=-1)[:, 0], 0.0)
  inner = jnp.take_along_axis(eb, j[:, None, None], axis=1)[:, 0]  # [B, block]
  inner_cdf = before[:, None] + jnp.cumsum(inner, axis=-1)
  i = jnp.sum(inner_cdf <= u[:, None], axis=-1)
  last_nz = jnp.max(jnp.where(inner > 0, jnp.arange(block), 0), axis=-1)
  tok = (j * block + jnp.minimum(i, last_nz)).astype(jnp.int32)
  logp = jnp.take_along_axis(z, tok[:, None], axis=-1)[:, 0] - m[:, 0] - jnp.log(total)
  return tok, logp


# The decode loop runs in this many blocks of steps, each over a cache just long enough for
# its last step: attention then reads ~(P + 5N/8) slots per step on average instead of P + N
# (the cache length is static, so "attend only to the filled part" needs static buckets).
DECODE_BLOCKS = 4


def _grow(cache: KVCache, max_len: int) -> KVCache:
  """Pads a cache's slot axis with empty (invalid) slots up to `max_len`."""
  extra = max_len - cache.max_len
  if extra == 0:
    return cache
  pad = lambda a, axis: jnp.pad(a, [(0, extra if i == axis else 0) for i in range(a.ndim)])
  return cache.replace(k=tuple(pad(k, 3) for k in cache.k), v=tuple(pad(v, 2) for v in cache.v),
                       valid=pad(cache.valid, 1))


def _blocks(steps: int, blocks: int):
  """Static [lo, hi) ranges splitting decode steps 1..steps-1 into up to `blocks` pieces."""
  cuts = sorted({1 + round(i * (steps - 1) / blocks) for i in range(blocks + 1)})
  return list(zip(cuts[:-1], cuts[1:]))


@functools.partial(jax.jit, static_argnums=(0, 5, 6))
def generate(graphdef, state, prompt: jax.Array, prompt_valid: jax.Array, key: jax.Array,
             max_new_tokens: int, temperature: float = 1.0) -> Tuple[jax.Array, jax.Array]:
  """Samples `max_new_tokens` continuations of a (left- or right-padded) prompt.

  The prompt is prefilled into a cache of exactly P slots (`prefill(..., rows=last)`: the
  last layer and the head run only at each row's last prompt token); the cache then grows in
  `DECODE_BLOCKS` static steps (`_grow`) as decoding fills it.

  Args:
    graphdef, state: `nnx.split(Transformer)`.
    prompt: [B, P] int32; prompt_valid: [B, P] bool (each row needs >= 1 valid token).
    key: PRNG key. max_new_tokens, temperature: static (0 = greedy).
  Returns:
    tokens [B, max_new_tokens] int32 and their log-probs [B, max_new_tokens] float32 under
    the tempered distribution.
  """
  if max_new_tokens <= 0:
    raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
  model_cfg = nnx.merge(graphdef, state).cfg
  b, p = prompt.shape
  prompt_valid = prompt_valid.astype(jnp.bool_)
  positions = jnp.maximum(jnp.cumsum(prompt_valid, axis=1) - 1, 0).astype(jnp.int32)
  cache = init_cache(model_cfg, b, p, model_cfg.compute_dtype)
  last = jnp.max(jnp.where(prompt_valid, jnp.arange(p), 0), axis=1).astype(jnp.int32)
  first_logits, _, cache = prefill(graphdef, state, prompt.astype(jnp.int32), positions,
                                   prompt_valid, cache, last)
  next_pos = jnp.sum(prompt_valid, axis=1).astype(jnp.int32)
  keys = jax.random.split(key, max_new_tokens)
  tok, lp = sample_inverse_cdf(keys[0], first_logits, temperature)
  tokens = jnp.zeros((b, max_new_tokens), jnp.int32).at[:, 0].set(tok)
  logps = jnp.zeros((b, max_new_tokens), jnp.float32).at[:, 0].set(lp)

  def body(t, carry):
    tokens, logps, cache, tok = carry
    logits, _, cache = decode_step(graphdef, state, tok, next_pos + t - 1, cache)
    tok, lp = sample_inverse_cdf(keys[t], logits, temperature)
    tokens = jax.lax.dynamic_update_slice(tokens, tok[:, None], (0, t))
    logps = jax.lax.dynamic_update_slice(logps, lp[:, None], (0, t))
    return tokens, logps, cache, tok

  carry = (tokens, logps, cache, tok)
  for lo, hi in _blocks(max_new_tokens, DECODE_BLOCKS):
    # Step t writes slot p + t - 1, so steps [lo, hi) need p + hi - 1 slots.
    carry = carry[:2] + (_grow(carry[2], p + hi - 1),) + carry[3:]
    carry = jax.lax.fori_loop(lo, hi, body, carry)
  return carry[0], carry[1]
