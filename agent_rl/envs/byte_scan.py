"""Byte scanning of generated turns: token ids -> surface bytes -> answer span and segments.

`ByteTable` maps generated tokens to their surface bytes (the tokenizer's `byte_table()`),
compacted to one byte string `[max_bytes]`. The scanner then works on bytes only, so the
same code serves every env (Sokoban/FrozenLake words, Countdown expressions):

    span = bytes_.answer(action)                 # Span: first <answer> ... next </answer>
    starts, lens, count = split_segments(span.bytes, span.length, max_segments=A)   # on "||"
    win = segment_windows(span.bytes, starts, lens, width=W)      # [A, W] stripped segments
    ids = match_words(win, lens, (b"up", b"down"))                # case-insensitive, -1 = none
    vals, ok = parse_ints(win, lens)                              # [+-]?[0-9]{1,9}

Word actions built from these pieces live in actions.py (`ActionParser`). Nothing here
ever raises in jitted code; all functions act on one example (`vmap` them for batches).
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import Digest, Text, TokenizerLike, digest
from agent_rl.envs.render import compact

_WS = (32, 9, 10, 13, 11, 12)  # what bytes.strip() strips


@struct.dataclass
class Span:
  """Bytes between the answer tags: `bytes [C] uint8` (0-padded), `length` int32, `found` bool."""
  bytes: jax.Array
  length: jax.Array
  found: jax.Array


class ByteTable(Digest):
  """Token id -> surface bytes, from `tokenizer.byte_table()`; turns a generated Text into bytes."""

  def __init__(self, tokenizer: TokenizerLike):
    table, lengths = tokenizer.byte_table()
    self.table = np.asarray(table, np.uint8)
    self.lengths = np.asarray(lengths, np.int32)
    if self.table.ndim != 2 or self.lengths.shape != self.table.shape[:1]:
      raise ValueError(f"byte_table() must give [V, K] bytes and [V] lengths, got "
                       f"{self.table.shape} and {self.lengths.shape}")
    self._digest = digest(self.table, self.lengths)

  def text_bytes(self, text: Text, max_bytes: int | None = None) -> tuple[jax.Array, jax.Array]:
    """`(bytes [max_bytes] uint8, n)` of the first `text.length` tokens; default keeps all bytes."""
    toks = jnp.clip(jnp.asarray(text.tokens, jnp.int32), 0, self.table.shape[0] - 1)
    a = toks.shape[-1]
    max_bytes = a * self.table.shape[1] if max_bytes is None else max_bytes
    lens = jnp.where(jnp.arange(a) < text.length, jnp.asarray(self.lengths)[toks], 0)
    return compact(jnp.asarray(self.table)[toks], lens, max_bytes, 0)

  def answer(self, text: Text, *, max_answer_bytes: int = 128, open_tag: bytes = b"<answer>",
             close_tag: bytes = b"</answer>", max_bytes: int | None = None) -> Span:
    """The answer span of a generated turn (see module docstring); Countdown parses it further."""
    b, n = self.text_bytes(text, max_bytes)
    return answer_span(b, n, max_len=max_answer_bytes, open_tag=open_tag, close_tag=close_tag)


def find_all(b: jax.Array, n: jax.Array, pattern: bytes) -> jax.Array:
  """`[L] bool`: pattern starts at i and ends within the first n bytes."""
  m, length = len(pattern), b.shape[0]
  padded = jnp.concatenate([b, jnp.zeros((m,), b.dtype)])
  hit = jnp.arange(length) + m <= n
  for j, c in enumerate(pattern):
    hit &= padded[j:j + length] == c
  return hit


def answer_span(b: jax.Array, n: jax.Array, *, max_len: int = 128, open_tag: bytes = b"<answer>",
                close_tag: bytes = b"</answer>") -> Span:
  """Content between the first `open_tag` and the first `close_tag` after it, in `[max_len]`."""
  length = b.shape[0]
  idx = jnp.arange(length, dtype=jnp.int32)
  opens = find_all(b, n, open_tag)
  has_open = jnp.any(opens)
  start = jnp.argmax(opens).astype(jnp.int32) + len(open_tag)
  closes = find_all(b, n, close_tag) & (idx >= start)
  found = has_open & jnp.any(closes)
  span_len = jnp.argmax(closes).astype(jnp.int32) - start
  found &= span_len <= max_len
  pos = jnp.arange(max_len, dtype=jnp.int32)
  keep = found & (pos < span_len)
  content = jnp.where(keep, b[jnp.clip(start + pos, 0, length - 1)], 0).astype(jnp.uint8)
  return Span(bytes=content, length=jnp.where(found, span_len, 0), found=found)


def split_segments(b: jax.Array, n: jax.Array, *, max_segments: int,
                   sep: bytes = b"||") -> tuple[jax.Array, jax.Array, jax.Array]:
  """Splits `b[:n]` on `sep` like `bytes.split`, then strips ASCII whitespace per segment.

  Returns `(starts [A], lens [A], count)`: stripped segment k is `b[starts[k]:starts[k]+lens[k]]`;
  count = number of segments in the whole text (may exceed A = max_segments; later ones dropped).
  """
  if len(sep) != 2 or sep[0] != sep[1]:
    raise ValueError(f"split_segments supports a doubled one-byte separator such as b'||', got {sep!r}")
  c = b.shape[0]
  idx = jnp.arange(c, dtype=jnp.int32)
  ch = (idx < n) & (b == sep[0])
  nxt = jnp.concatenate([ch[1:], jnp.zeros((1,), bool)])
  # Non-overlapping left-to-right matches: inside a run of separator bytes, matches start at
  # even offsets from the run start (run length before i = i - last non-separator index - 1).
  last_other = jax.lax.cummax(jnp.where(ch, -1, idx))
  before = idx - jnp.concatenate([jnp.full((1,), -1, jnp.int32), last_other[:-1]]) - 1
  is_sep = ch & nxt & (before % 2 == 0)
  rank = jnp.cumsum(is_sep) - 1
  k = jnp.arange(max_segments, dtype=jnp.int32)
  at_k = is_sep[None, :] & (rank[None, :] == k[:, None])                       # [A, C]
  sep_pos = jnp.where(jnp.any(at_k, axis=1), jnp.argmax(at_k, axis=1), n)     # end of seg k
  count = jnp.sum(is_sep, dtype=jnp.int32) + 1
  raw_start = jnp.concatenate([jnp.zeros((1,), jnp.int32), sep_pos[:-1] + 2])
  raw_end = sep_pos
  ws = jnp.zeros_like(ch)
  for w in _WS:
    ws |= b == w
  inside = (idx[None, :] >= raw_start[:, None]) & (idx[None, :] < raw_end[:, None]) & ~ws[None, :]
  t_start = jnp.min(jnp.where(inside, idx[None, :], c), axis=1)
  t_end = jnp.max(jnp.where(inside, idx[None, :] + 1, 0), axis=1)
  lens = jnp.where((k < count) & (t_end > t_start), t_end - t_start, 0)
  starts = jnp.where(lens > 0, t_start, 0)
  return starts.astype(jnp.int32), lens.astype(jnp.int32), count


def segment_windows(b: jax.Array, starts: jax.Array, lens: jax.Array, width: int) -> jax.Array:
  """`[A, width] uint8`: segment k's first `width` bytes, 0 beyond its length."""
  pos = jnp.arange(width, dtype=jnp.int32)
  idx = jnp.clip(starts[:, None] + pos[None, :], 0, b.shape[0] - 1)
  return jnp.where(pos[None, :] < lens[:, None], b[idx], 0).astype(jnp.uint8)


def lower(b: jax.Array) -> jax.Array:
  """ASCII lower-casing of a uint8 array."""
  return jnp.where((b >= 65) & (b <= 90), b + 32, b).astype(b.dtype)


def match_words(windows: jax.Array, lens: jax.Array, words: Sequence[bytes]) -> jax.Array:
  """`[A] int32`: index of the word each segment equals (ASCII case-insensitive), -1 if none.

  windows: [A, W] with W >= the longest word (longer segments never match).
  """
  a, w = windows.shape
  if max(len(x) for x in words) > w:
    raise ValueError(f"window width {w} is shorter than the longest word {max(words, key=len)!r}")
  table = np.zeros((len(words), w), np.uint8)
  for i, x in enumerate(words):
    table[i, :len(x)] = np.frombuffer(x.lower(), np.uint8)
  wlen = jnp.asarray([len(x) for x in words], jnp.int32)
  eq = jnp.all(lower(windows)[:, None, :] == jnp.asarray(table)[None], axis=-1)   # [A, N]
  eq &= lens[:, None] == wlen[None, :]
  return jnp.where(jnp.any(eq, axis=1), jnp.argmax(eq, axis=1), -1).astype(jnp.int32)


def parse_ints(windows: jax.Array, lens: jax.Array) -> tuple[jax.Array, jax.Array]:
  """`(values [A] int32, ok [A] bool)`: segments matching `[+-]?[0-9]{1,9}` as integers."""
  a, w = windows.shape
  pos = jnp.arange(w, dtype=jnp.int32)[None, :]
  sign = (windows[:, :1] == ord("-")) | (windows[:, :1] == ord("+"))
  first = sign.astype(jnp.int32)                                                 # [A, 1]
  body = (pos >= first) & (pos < lens[:, None])
  is_digit = (windows >= ord("0")) & (windows <= ord("9"))
  ndig = lens - first[:, 0]
  ok = jnp.all(is_digit | ~body, axis=1) & (ndig >= 1) & (ndig <= 9) & (lens <= w)
  expo = jnp.clip(lens[:, None] - 1 - pos, 0, 9)
  digit = jnp.where(body & is_digit, windows.astype(jnp.int32) - ord("0"), 0)
  value = jnp.sum(digit * (10 ** expo), axis=1, dtype=jnp.int32)
  value = jnp.where(windows[:, 0] == ord("-"), -value, value)
  return jnp.where(ok, value, 0), ok


# Multipliers tried in turn until a vocabulary hashes without collisions (WordTable).
_MULTS = (0x01000193, 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)


def _hash_np(table: np.ndarray, lens: np.ndarray, mult: int) -> np.ndarray:
  w = table.shape[1]
  powers = np.array([pow(mult, j, 1 << 32) for j in range(w)], np.uint64)
  live = np.arange(w)[None, :] < lens[:, None]
  terms = np.where(live, (table.astype(np.uint64) + 1) * powers[None, :] % (1 << 32), 0)
  return (terms.sum(axis=1) % (1 << 32)).astype(np.uint32)


class WordTable:
  """A finite vocabulary of byte strings (lower case) with a hash look-up (jit-static)."""

  def __init__(self, vocab: Sequence[str]):
    enc = [v.lower().encode("utf-8") for v in vocab]
    if len(set(enc)) != len(enc):
      raise ValueError("WordTable vocabulary has duplicate entries")
    self.width = max(1, max(len(e) for e in enc))
    self.table = np.zeros((len(enc), self.width), np.uint8)
    for i, e in enumerate(enc):
      self.table[i, :len(e)] = np.frombuffer(e, np.uint8)
    self.lens = np.array([len(e) for e in enc], np.int32)
    for mult in _MULTS:
      h = _hash_np(self.table, self.lens, mult)
      if len(set(h.tolist())) == len(h):
        break
    else:
      raise ValueError("WordTable: no collision-free hash multiplier for this vocabulary")
    self.mult = mult
    self.order = np.argsort(h, kind="stable").astype(np.int32)
    self.sorted_hash = h[self.order]
    self.powers = np.array([pow(mult, j, 1 << 32) for j in range(self.width)], np.uint32)

  def lookup(self, windows: jax.Array, lens: jax.Array) -> jax.Array:
    """`[N] int32` vocabulary index of each window `[N, width]` (lower case, 0 past len); -1 if none."""
    live = jnp.arange(self.width)[None, :] < lens[:, None]
    terms = (windows.astype(jnp.uint32) + 1) * jnp.asarray(self.powers)[None, :]
    h = jnp.sum(jnp.where(live, terms, 0), axis=1, dtype=jnp.uint32)
    pos = jnp.clip(jnp.searchsorted(jnp.asarray(self.sorted_hash), h,
                                        method="compare_all"), 0, len(self.lens) - 1)
    cand = jnp.asarray(self.order)[pos]
    ok = (jnp.asarray(self.sorted_hash)[pos] == h) & (jnp.asarray(self.lens)[cand] == lens)
    ok &= jnp.all(jnp.asarray(self.table)[cand] == windows, axis=1) & (lens <= self.width)
    return jnp.where(ok, cand, -1).astype(jnp.int32)
