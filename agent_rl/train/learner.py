"""From an EpisodeBatch to parameter updates: advantages, minibatches, epochs.

`prepare(batch, credit, ...)` turns a rollout into flat training rows (one per episode in
concatenated mode, one per turn sample in windowed mode) with token-level advantages;
`train.epochs.make_scan_update` runs `epochs` passes of shuffled minibatches through the step
as one scan.
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.agents.routing import route
from agent_rl.credit import Credit, token_advantages
from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.objective.minibatch import Minibatch


def prepare(batch: EpisodeBatch, credit: Credit) -> Minibatch:
  """Flat rows `[R, L']` for the learner (R = N, or N*T in windowed mode)."""
  mask = batch.loss_mask
  if credit.mask is not None:  # fatal-aware masking / gated groups: [N] or [N, T]
    m = credit.mask
    mask = mask * (m[:, None] if m.ndim == 1 else
                   jnp.where(batch.turn_index >= 0,
                             jnp.take_along_axis(m, jnp.maximum(batch.turn_index, 0), 1), 1.0))
  adv = token_advantages(credit, batch.turn_index, mask)
  ret = credit.returns if (credit.returns is not None and credit.returns.shape == mask.shape) else None
  attn = batch.attention_mask if batch.attention_mask is not None else jnp.ones_like(mask, bool)
  mb = Minibatch(tokens=batch.tokens, position=batch.position, attention_mask=attn,
                 loss_mask=mask, turn_index=batch.turn_index, old_logprobs=batch.logprobs,
                 advantages=adv, returns=ret, old_values=batch.values if ret is not None else None,
                 ref_logprobs=batch.ref_logprobs, teacher_logprobs=batch.teacher_logprobs,
                 sample_logprobs=batch.sample_logprobs)
  if batch.segment_len:
    s = batch.segment_len
    mb = jax.tree.map(lambda x: x.reshape(-1, s), mb)
  return mb._replace(agent=row_agents(batch))  # agent_rl.agents routes rows on it


prepare_jit = jax.jit(prepare)


def _rows(batch: EpisodeBatch, length: Optional[int] = None):
  """(tokens, positions, attention mask) as forward rows `[R, W]`, cut to their first `length`
  slots (`train.buckets.batch_length`: every attended slot lies before it), and `restore`:
  a `[R, length]` result back to the batch's `[N, L]` (the cut slots 0)."""
  tok, pos = batch.tokens, batch.position
  attn = batch.attention_mask if batch.attention_mask is not None else jnp.ones(tok.shape, bool)
  if batch.segment_len:
    tok, pos, attn = (x.reshape(-1, batch.segment_len) for x in (tok, pos, attn))
  width = tok.shape[1]
  if length is not None:
    tok, pos, attn = (x[:, :length] for x in (tok, pos, attn))

  def restore(y):
    y = y * attn
    return jnp.pad(y, ((0, 0), (0, width - y.shape[1]))).reshape(batch.tokens.shape)
  return tok, pos, attn, restore


def map_row_chunks(fn, chunks: int, *rows):
  """`fn(*rows)` over `chunks` equal slices of the rows (`[R, ...]` arrays), one slice at a
  time (`lax.map`), outputs concatenated back to `[R, ...]`: a forward pass over a whole
  rollout batch then holds one slice's activations (the run passes the train step's
  micro-batch size, `config.train.microbatches`). chunks = 1 calls `fn` once. Per-row
  routing (`agents.routing.route`) goes inside `fn`, with the slice's agent ids as a row."""
  if chunks <= 1:
    return fn(*rows)
  r = rows[0].shape[0]
  if r % chunks:
    raise ValueError(f"config.train.microbatches: {chunks} forward slices do not divide the "
                     f"{r} rows of the rollout batch")
  split = [x.reshape(chunks, r // chunks, *x.shape[1:]) for x in rows]
  out = jax.lax.map(lambda xs: fn(*xs), split)
  return jax.tree.map(lambda y: y.reshape(r, *y.shape[2:]), out)


def row_agents(batch: EpisodeBatch) -> jax.Array:
  """The acting agent of each forward row `[R]`: windowed rows are turns (row n * T + t is
  turn t of episode n), a concatenated row is one episode (the agent of its first turn; one
  network only, agents.config refuses per-agent weights there)."""
  return batch.agent_id.reshape(-1) if batch.segment_len else batch.agent_id[:, 0]


@functools.partial(jax.jit, static_argnums=0, static_argnames=("mode", "chunks", "length"))
def critic_values(graphdef, params, batch: EpisodeBatch, mode: str = "shared",
                  chunks: int = 1, length: Optional[int] = None) -> jax.Array:
  """Rollout-time critic values `[N, L]` (V of each prefix) for GAE-family credit; with
  per-agent weights (`mode` lora | separate) each row under its acting agent's; `chunks`
  slices of the rows at a time (`map_row_chunks`); `length`: rows cut (`_rows`)."""
  tok, pos, attn, restore = _rows(batch, length)
  values = map_row_chunks(lambda t, q, a, g: route(
      mode, lambda p: nnx.merge(graphdef, p).values(t, q, a), params, g),
      chunks, tok, pos, attn, row_agents(batch))
  return restore(values)


@functools.partial(jax.jit, static_argnums=0, static_argnames=("mode", "chunks", "length"))
def reference_logprobs(lm_graphdef, ref_params, batch: EpisodeBatch, mode: str = "shared",
                       chunks: int = 1, length: Optional[int] = None) -> jax.Array:
  """Log-probs `[N, L]` of the batch's tokens under a frozen reference policy (for KL); with
  per-agent weights (`mode` lora | separate: `ref_params` stacked like the run's policy LM)
  each row under its acting agent's reference; `chunks` slices of the rows at a time;
  `length`: rows cut (`_rows`)."""
  from agent_rl.train.policy import policy_token_stats  # pulls in the models room
  tok, pos, attn, restore = _rows(batch, length)
  lp = map_row_chunks(lambda t, q, a, g: route(
      mode, lambda p: policy_token_stats(lm_graphdef, p, t, q, a)[0], ref_params, g,
      lm_only=True), chunks, tok, pos, attn, row_agents(batch))
  return restore(lp)
