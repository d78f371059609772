"""Parsing a MiniShop turn: `<answer>search[words]</answer>` or `<answer>click[name]</answer>`.

WebShop's actions (Yao et al. 2022): `search[query]` on the search page and `click[button]`
on any page, the button being a clickable of the page (an ASIN, an option value, "Next >",
"Buy Now", ...), matched case-insensitively. The turn's bytes come from the shared scanner
(byte_scan.answer_span); the span, stripped of ASCII whitespace, must start with `search[`
or `click[` (any case) and end with `]`. The click name (stripped) and the query's words
(`[a-z0-9]+` runs, as catalogue.words, the first `max_words`) are looked up in finite
vocabularies (`byte_scan.WordTable`: clickables, BM25 terms) by a polynomial hash, a binary search
over the sorted vocabulary hashes and a byte comparison with the one candidate, so a look-up
costs O(W + log N) instead of match_words' O(N W). Nothing raises; one example (vmap it).
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import Text
from agent_rl.envs.byte_scan import ByteTable, WordTable, answer_span, lower

_WS = (32, 9, 10, 13, 11, 12)
SEARCH, CLICK = 0, 1


@struct.dataclass
class ParsedAction:
  """kind: SEARCH or CLICK; click: clickable id (-1 none); terms: [Q] BM25 term ids (-1 none);
  num_words: query words (known or not); valid: well-formed (a click name in the vocabulary,
  a search with >= 1 word). Page validity is the dynamics' business."""
  kind: jax.Array
  click: jax.Array
  terms: jax.Array
  num_words: jax.Array
  valid: jax.Array


def _starts_with(b: jax.Array, at: jax.Array, pattern: bytes) -> jax.Array:
  idx = jnp.clip(at + jnp.arange(len(pattern)), 0, b.shape[0] - 1)
  return jnp.all(b[idx] == jnp.frombuffer(pattern, np.uint8)) & (at + len(pattern) <= b.shape[0])


def _window(b: jax.Array, start: jax.Array, length: jax.Array, width: int) -> jax.Array:
  pos = jnp.arange(width)
  return jnp.where(pos < length, b[jnp.clip(start + pos, 0, b.shape[0] - 1)], 0).astype(jnp.uint8)


def parse_span(span_bytes: jax.Array, span_len: jax.Array, found: jax.Array, clicks: WordTable,
               terms: WordTable, max_words: int) -> ParsedAction:
  """Parses answer-span bytes `[C] uint8` (length span_len) into a ParsedAction."""
  c = span_bytes.shape[0]
  idx = jnp.arange(c, dtype=jnp.int32)
  b = lower(span_bytes)
  inside = idx < span_len
  ws = jnp.zeros((c,), bool)
  for w in _WS:
    ws |= b == w
  solid = inside & ~ws
  first = jnp.min(jnp.where(solid, idx, c))
  end = jnp.max(jnp.where(solid, idx + 1, 0))                    # one past the last solid byte
  is_search = _starts_with(b, first, b"search[")
  is_click = _starts_with(b, first, b"click[")
  closed = b[jnp.clip(end - 1, 0, c - 1)] == ord("]")
  cs = first + jnp.where(is_search, 7, 6)
  ce = end - 1
  region = (idx >= cs) & (idx < ce)
  # click name: the region stripped of whitespace
  csolid = region & ~ws
  n0 = jnp.min(jnp.where(csolid, idx, c))
  n1 = jnp.max(jnp.where(csolid, idx + 1, 0))
  nlen = jnp.maximum(n1 - n0, 0)
  click = clicks.lookup(_window(b, n0, nlen, clicks.width)[None], nlen[None])[0]
  # query words: maximal [a-z0-9] runs inside the brackets
  alnum = region & (((b >= ord("a")) & (b <= ord("z"))) | ((b >= ord("0")) & (b <= ord("9"))))
  prev = jnp.concatenate([jnp.zeros((1,), bool), alnum[:-1]])
  nxt = jnp.concatenate([alnum[1:], jnp.zeros((1,), bool)])
  starts, ends = alnum & ~prev, alnum & ~nxt                       # first / last byte of a word
  # k-th word start / end by one scatter each (rank -> position), not a [Q, C] comparison
  s_rank = jnp.where(starts, jnp.cumsum(starts) - 1, max_words)
  e_rank = jnp.where(ends, jnp.cumsum(ends) - 1, max_words)
  s_k = jnp.full((max_words,), c, jnp.int32).at[s_rank].set(idx, mode="drop")
  e_k = jnp.zeros((max_words,), jnp.int32).at[e_rank].set(idx, mode="drop")
  has = s_k < c
  l_k = jnp.where(has, e_k + 1 - s_k, 0)
  pos = jnp.arange(terms.width)[None, :]
  wins = jnp.where(pos < l_k[:, None], b[jnp.clip(s_k[:, None] + pos, 0, c - 1)], 0).astype(jnp.uint8)
  term_ids = jnp.where(has, terms.lookup(wins, l_k), -1)
  num_words = jnp.sum(starts, dtype=jnp.int32)
  well = found & closed & (ce >= cs)
  valid = well & ((is_search & (num_words > 0)) | (is_click & (click >= 0)))
  return ParsedAction(kind=jnp.where(is_search, SEARCH, CLICK).astype(jnp.int32),
                      click=jnp.where(valid & is_click, click, -1),
                      terms=jnp.where(valid & is_search, term_ids, -1),
                      num_words=num_words, valid=valid)


def turn_bytes(bytes_: ByteTable, action: Text, max_bytes: int) -> tuple[jax.Array, jax.Array]:
  """`(bytes [max_bytes] uint8, n)`: ByteTable.text_bytes by one scatter of the [A, K] token
  bytes (the same result; the gather-only compaction compares every byte position with
  every token, which dominates the step at a few hundred bytes)."""
  table = jnp.asarray(bytes_.table)
  toks = jnp.clip(jnp.asarray(action.tokens, jnp.int32), 0, table.shape[0] - 1)
  a, k = toks.shape[-1], table.shape[1]
  lens = jnp.where(jnp.arange(a) < action.length, jnp.asarray(bytes_.lengths)[toks], 0)
  starts = jnp.cumsum(lens) - lens
  col = jnp.arange(k)[None, :]
  pos = jnp.where(col < lens[:, None], starts[:, None] + col, max_bytes)
  out = jnp.zeros((max_bytes,), jnp.uint8).at[pos.reshape(-1)].set(table[toks].reshape(-1), mode="drop")
  return out, jnp.minimum(jnp.sum(lens), max_bytes).astype(jnp.int32)


def parse_action(bytes_: ByteTable, action: Text, clicks: WordTable, terms: WordTable,
                 max_words: int, max_bytes: int, max_answer_bytes: int) -> ParsedAction:
  """A generated turn (Text) -> ParsedAction; the first `max_bytes` bytes are scanned."""
  b, n = turn_bytes(bytes_, action, max_bytes)
  span = answer_span(b, n, max_len=max_answer_bytes)
  return parse_span(span.bytes, span.length, span.found, clicks, terms, max_words)
