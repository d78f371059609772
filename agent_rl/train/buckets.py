"""Length buckets: the learner's rows cut after their longest filled token, rounded up.

A rollout's rows are `[R, L]` with L the layout's worst case (concatenated: prompt + T x
(obs_tokens + action + chat); windowed: the window budget), but the layout writes each row's
tokens from the front (`rollout.layout.write_block`: a turn's block lands at the row's cursor),
so the slots after a row's last valid token hold padding only. Every update term reads a
position's statistics from the positions at or before it (causal attention, explicit
positions) and sums masked tokens only (the loss mask lies inside the attention mask), so an
update on the rows cut at any length >= the batch's longest filled row has the same loss and
gradient as on the whole rows, and costs what the filled tokens cost: an episode that ends
early, or observations shorter than their `obs_tokens` budget, no longer pay for the worst
case. verl's `use_remove_padding` and dynamic batch sizes serve the same end on GPUs.

    rows, full = cut(rows, bucket=256)       # [R, L] -> [R, L'], L' a multiple of 256 (or L)
    update(state, rows, key, full)           # seq-mean-token-sum-norm still divides by full

What is kept exact, and what is not:
- `seq-mean-token-sum-norm` divides by a constant C (verl's `loss_scale_factor`, Dr. GRPO's
  MAX_TOKENS), the padded length L when not given: the cut passes the full L on as C
  (`objective(..., row_length)`), so the loss does not change with the bucket.
- One compile per bucket length: lengths are multiples of `bucket` (capped at L), so a run
  compiles its update for at most ceil(L / bucket) shapes.
- Random draws shaped like the rows (LoRA dropout's masks, clip_cov's tie-break bits) are
  drawn over the cut shape: the same distribution, other numbers than on the whole rows.
- On a multi-host mesh every process cuts at the same length: the longest filled row is a
  max inside a jit over the global (row-sharded) array, whose replicated result every process
  reads.
- Float sums over the key axis may round differently at another length: equal to ~1e-6, not
  bit for bit (tests/train/test_buckets.py).
"""
from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp


@jax.jit
def filled_length(attention_mask: jax.Array, loss_mask: jax.Array) -> jax.Array:
  """Scalar int32: 1 + the last slot that any row attends to or trains on (0 if none).

  attention_mask, loss_mask: `[R, L]` (bool or float)."""
  used = (attention_mask != 0) | (loss_mask != 0)
  slot = jnp.arange(1, used.shape[1] + 1, dtype=jnp.int32)
  return jnp.max(jnp.where(used, slot[None, :], 0))


def bucket_length(filled: int, full: int, bucket: int) -> int:
  """The cut length: `filled` rounded up to a multiple of `bucket` (at least one bucket), at
  most `full`; `bucket` <= 0 keeps `full`."""
  if bucket <= 0:
    return full
  return min(full, max(bucket, -(-filled // bucket) * bucket))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _trim(rows: Any, length: int, full: int) -> Any:
  # Leaves `[R, L, ...]` are cut; per-row leaves (`agent` [R]) pass through.
  return jax.tree.map(lambda x: x[:, :length] if x.ndim >= 2 and x.shape[1] == full else x,
                      rows)


def cut(rows: Any, bucket: int) -> tuple[Any, int]:
  """(rows cut to their bucket length, the full length L) for rows with `tokens`,
  `attention_mask` and `loss_mask` `[R, L]` (a `Minibatch`). `bucket` <= 0: unchanged."""
  full = int(rows.tokens.shape[1])
  if bucket <= 0:
    return rows, full
  n = bucket_length(int(filled_length(rows.attention_mask, rows.loss_mask)), full, bucket)
  return (rows if n == full else _trim(rows, n, full)), full


def batch_length(batch: Any, bucket: int) -> Optional[int]:
  """The cut length of an EpisodeBatch's forward rows for the scoring passes
  (`train.learner.critic_values` / `reference_logprobs`: rows of the segment width in windowed
  mode), or None where nothing is cut (`bucket` <= 0, no attention mask, or no shorter bucket)."""
  if bucket <= 0 or batch.attention_mask is None:
    return None
  width = batch.segment_len or batch.attention_mask.shape[1]
  attn = batch.attention_mask.reshape(-1, width)
  n = bucket_length(int(filled_length(attn, attn)), width, bucket)
  return None if n == width else n
