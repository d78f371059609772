"""Token layout of multi-turn episodes: chat pieces, packed blocks, windowed contexts.

The chat layout (ChatML, as Qwen2.5 and RAGEN/verl-agent use it):

    first   = <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{instruction}\\n
    turn 0  : first + obs_0 + header + action_0
    turn t>0: turn_prefix + obs_t + header + action_t
    header      = <|im_end|>\\n<|im_start|>assistant\\n
    turn_prefix = \\n<|im_start|>user\\n          (the action ends with <|im_end|>)

The constant pieces are tokenized once on the host (`chat_pieces`); observations arrive as
token arrays from the env, actions as generated ids. Nothing is ever re-tokenized.

In the compiled graph every piece is a fixed-size block whose real tokens are packed to
the front (`pack_block`); a per-row cursor then scatters them into a packed history
buffer (`write_block`), so the stored sequence has no holes and positions are slot indices.
All functions act on a batch of rows `[B, ...]`; token channels travel as a `TokenBuffer`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class TokenBuffer:
  """Token channels of a buffer, `[B, L]` (or `[B, T, Lw]` for windowed samples).

  Names and meanings are the EpisodeBatch's token-level fields (batch.py).
  """
  tokens: jax.Array           # i32, pad id where empty
  loss_mask: jax.Array        # f32, 1 on policy-generated tokens
  turn_index: jax.Array       # i32, -1 for prompt / observation / padding
  logprobs: jax.Array         # f32 behaviour log-probs
  sample_logprobs: jax.Array  # f32 log-probs under the sampling distribution
  attention_mask: Optional[jax.Array] = None  # bool (windowed samples only)

  @classmethod
  def empty(cls, shape: Tuple[int, ...], pad_id: int, attention: bool = False) -> "TokenBuffer":
    z = jnp.zeros(shape, jnp.float32)
    return cls(tokens=jnp.full(shape, pad_id, jnp.int32), loss_mask=z,
               turn_index=jnp.full(shape, -1, jnp.int32), logprobs=z, sample_logprobs=z,
               attention_mask=jnp.zeros(shape, bool) if attention else None)

  @classmethod
  def prompt(cls, tokens: jax.Array) -> "TokenBuffer":
    """Channels of a prompt / observation block: no loss, no turn, zero log-probs."""
    z = jnp.zeros(tokens.shape, jnp.float32)
    return cls(tokens=tokens, loss_mask=z, turn_index=jnp.full(tokens.shape, -1, jnp.int32),
               logprobs=z, sample_logprobs=z)


@dataclasses.dataclass(frozen=True)
class PromptPieces:
  """Host-tokenized constant pieces (tuples, so the record is hashable / jit-static)."""
  first: Tuple[int, ...]
  turn_prefix: Tuple[int, ...]
  header: Tuple[int, ...]
  pad_id: int = 0

  def __post_init__(self):
    for f in ("first", "turn_prefix", "header"):
      object.__setattr__(self, f, tuple(int(i) for i in getattr(self, f)))
    if not self.first:
      raise ValueError("PromptPieces.first must hold at least one token")


def chat_pieces(tokenizer: Any, instruction: str, system: str | None = "You are a helpful agent.",
                **template_kwargs) -> PromptPieces:
  """The prompt pieces for `instruction` (usually `env.instruction`).

  A tokenizer with a `chat_template` (a Hugging Face checkpoint's, `agent_rl.tokenizers.load_hf`)
  gets the pieces of its own template, cut from a rendered probe conversation and verified
  against the rendering (`agent_rl.tokenizers.chat.prompt_pieces`; `template_kwargs` such as
  `enable_thinking=False` go to the template; `system=None` sends no system message, so the
  template's own default applies); the policy's stop token is then the template's turn end
  (`prompt_pieces(...).turn_end_id`). Other tokenizers get the ChatML pieces above.
  """
  if getattr(tokenizer, "chat_template", None):
    from agent_rl.tokenizers import chat   # host-only; keeps jinja2 off the compiled path
    p = chat.prompt_pieces(tokenizer, instruction, system, **template_kwargs)
    return PromptPieces(first=p.first_ids, turn_prefix=p.turn_prefix_ids, header=p.header_ids,
                        pad_id=tokenizer.pad_id)
  if template_kwargs:
    raise ValueError(f"template_kwargs {sorted(template_kwargs)} need a tokenizer with a "
                     f"chat_template; {type(tokenizer).__name__} has none")
  system = "You are a helpful agent." if system is None else system
  start, end = tokenizer.special("<|im_start|>"), tokenizer.special("<|im_end|>")
  enc = tokenizer.encode
  first = [start] + enc("system\n" + system) + [end] + enc("\n") + [start] + enc(
      "user\n" + instruction + "\n")
  header = [end] + enc("\n") + [start] + enc("assistant\n")
  turn_prefix = enc("\n") + [start] + enc("user\n")
  return PromptPieces(first=tuple(first), turn_prefix=tuple(turn_prefix), header=tuple(header),
                      pad_id=tokenizer.pad_id)


def pack_block(prefix: Tuple[int, ...], obs_tokens: jax.Array, obs_len: jax.Array,
               suffix: Tuple[int, ...], active: jax.Array, pad_id: int):
  """`prefix + obs[:len] + suffix` packed to the front of a `[B, |p| + O + |s|]` block.

  Returns tokens `[B, S] int32`, valid `[B, S] bool`, length `[B] int32` (0 where not active).
  """
  b, o = obs_tokens.shape
  p, q = len(prefix), len(suffix)
  size = p + o + q
  s = jnp.arange(size)[None, :]
  n = obs_len.astype(jnp.int32)[:, None]
  pre = jnp.asarray(prefix or (pad_id,), jnp.int32)
  suf = jnp.asarray(suffix or (pad_id,), jnp.int32)
  obs_tok = jnp.take_along_axis(obs_tokens.astype(jnp.int32), jnp.clip(s - p, 0, o - 1), axis=1)
  tok = jnp.where(s < p, pre[jnp.clip(s, 0, max(p - 1, 0))],
                  jnp.where(s < p + n, obs_tok, suf[jnp.clip(s - p - n, 0, max(q - 1, 0))]))
  length = jnp.where(active, p + n[:, 0] + q, 0)
  valid = s < length[:, None]
  return jnp.where(valid, tok, pad_id), valid, length


def write_block(buf: TokenBuffer, cursor: jax.Array, block: TokenBuffer,
                length: jax.Array) -> TokenBuffer:
  """Scatters the first `length[b]` slots of each `[B, S]` block channel into the `[B, Lb]`
  buffer at `cursor[b]` (slots past the buffer end are dropped; callers budget first)."""
  b, s = block.tokens.shape
  lb = buf.tokens.shape[1]
  j = jnp.arange(s)[None, :]
  idx = jnp.where(j < length[:, None], cursor[:, None] + j, lb)
  rows = jnp.broadcast_to(jnp.arange(b)[:, None], (b, s))
  return jax.tree.map(lambda dst, val: dst.at[rows, idx].set(val.astype(dst.dtype), mode="drop"),
                      buf, block)


def gather_rows(buf: jax.Array, src: jax.Array, valid: jax.Array, fill) -> jax.Array:
  """`out[b, s] = buf[b, src[b, s]]` where valid, else `fill`."""
  got = jnp.take_along_axis(buf, jnp.clip(src, 0, buf.shape[1] - 1), axis=1)
  return jnp.where(valid, got, jnp.asarray(fill, buf.dtype))


def window_start(turn_start: jax.Array, cursor: jax.Array, t, k: int, first_len: int,
                 ctx_len: int):
  """First history turn j0 of turn t's windowed context (keep the most recent turns).

  Turn j's block (observation + action) starts at `turn_start[:, j]` of the history; the
  context is `first + history[turn_start[j0]:cursor]`, which must fit `ctx_len` tokens.
  j0 is the smallest j in [t - k, t] that fits; turn t itself always fits (checked
  statically by the caller). Returns j0 `[B]` and the number of window turns dropped
  for the budget `[B]` (0 when the k most recent turns fit).
  """
  b, nt = turn_start.shape
  j = jnp.arange(nt)[None, :]
  lo = jnp.maximum(t - k, 0)
  fits = first_len + cursor[:, None] - turn_start <= ctx_len
  ok = (j >= lo) & (j <= t) & fits
  j0 = jnp.argmax(ok, axis=1).astype(jnp.int32)  # first True; turn t is always ok
  return j0, (j0 - lo).astype(jnp.int32)


def window_context(hist: jax.Array, turn_start: jax.Array, cursor: jax.Array, j0: jax.Array,
                   first_len: int, ctx_len: int, pad_id: int):
  """Turn t's context `first + hist[start_j0:cursor]`, packed into `[B, ctx_len]`.

  `hist [B, Lh]` is the packed episode history, whose first `first_len` tokens are `first`.
  Returns tokens `[B, ctx_len]`, valid `[B, ctx_len]`, length `[B]`.
  """
  start = jnp.take_along_axis(turn_start, j0[:, None], axis=1)[:, 0]
  s = jnp.arange(ctx_len)[None, :]
  length = first_len + cursor - start
  src = jnp.where(s < first_len, s, start[:, None] + s - first_len)
  valid = s < length[:, None]
  return gather_rows(hist, src, valid, pad_id), valid, length.astype(jnp.int32)


def off_loss(loss_mask: jax.Array, turn_index: jax.Array, off: jax.Array) -> jax.Array:
  """loss_mask `[N, L]` with the tokens of the turns marked in `off [N, T]` zeroed (tokens
  with turn_index -1, prompts and observations, are never in the loss anyway)."""
  t = off.shape[1]
  hit = jnp.take_along_axis(off, jnp.clip(turn_index, 0, t - 1), axis=1) & (turn_index >= 0)
  return jnp.where(hit, 0.0, loss_mask)
