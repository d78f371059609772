"""Token-level action parsing: text.py's byte scanner compiled, once on the host, into a token automaton.

The well-formedness rule of text.py (first `<answer>`, first `</answer>` after it, at most
`max_answer_bytes` bytes between, split on "||", the first `max_actions` segments stripped of
ASCII whitespace each equal to an action word, ASCII case ignored) is a regular language with a
small output, so it is recognized by a finite automaton over bytes. This module builds that
automaton explicitly (states are Python tuples explored breadth-first over all 256 bytes) and
lifts it to tokens: tokens whose bytes act identically are merged into classes, and
`next[s, c]` is the state after reading all bytes of class c from state s. The only thing a
finite automaton cannot count, the answer length, is summed alongside: `grow[s, c]` is the
number of bytes of class c read inside the answer (the closing tag included), so
`length = sum(grow) - len(close_tag)`.

In JAX a turn of L tokens then costs L table look-ups (`lax.scan`) instead of the byte
compaction, tag search and segment split of the scanner (Sokoban, batch 1024, CPU: ~50 ns per
turn instead of ~2.2 us). The automaton is exact, not a heuristic: tests/envs/test_token_parse.py
checks it against the byte scanner on fuzzed token sequences for several tokenizers. Actions
already recognized are part of the state, so the state count grows like
(number of words)^max_actions (4 words: ~400 states at 1 action, ~8k at 3); `build` returns None
when the tables would exceed `max_entries` (e.g. vocabularies of ~10^5 tokens with many
distinct byte-class strings) and the caller keeps the byte scanner.
"""
from __future__ import annotations

import collections
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

_WS = frozenset((32, 9, 10, 13, 11, 12))   # what bytes.strip() strips
_PIPE = ord("|")
_STAR = "*"                               # "trailing whitespace that only may end the segment"
FAIL = ("fail",)


class _Rule:
  """The byte-level automaton: `step(state, byte) -> state`, `inside(state) -> bool`."""

  def __init__(self, words: Sequence[bytes], word_ids: Sequence[int], max_actions: int,
               open_tag: bytes, close_tag: bytes):
    self.lookup = {}
    for w, i in zip(words, word_ids):
      self.lookup.setdefault(w.lower(), int(i))     # first word wins, as match_words' argmax
    self.prefixes = {w[:n] for w in self.lookup for n in range(len(w) + 1)}
    self.max_actions, self.open, self.close = max_actions, open_tag, close_tag

  @staticmethod
  def _fallback(buf: bytes, pattern: bytes) -> int:
    """Length of the longest proper suffix of buf that is a prefix of pattern."""
    for n in range(min(len(buf), len(pattern) - 1), 0, -1):
      if buf.endswith(pattern[:n]):
        return n
    return 0

  def _push(self, sub, x: int):
    """Segment content so far, stripped: (core, trailing whitespace | _STAR); None = no word."""
    core, trail = sub
    if x in _WS:
      if not core:
        return sub
      if trail == _STAR:
        return sub
      if core + trail + bytes([x]) in self.prefixes:
        return core, trail + bytes([x])
      return (core, _STAR) if core in self.lookup else None
    if trail == _STAR:
      return None
    c = core + trail + bytes([x]).lower()
    return (c, b"") if c in self.prefixes else None

  def _segment_byte(self, seg, x: int):
    """Feeds one answer byte to the "||" splitter; seg = (k, ids, sub, pipe) or FAIL."""
    k, ids, sub, pipe = seg
    if k >= self.max_actions:
      return seg
    if pipe and x == _PIPE:                       # a separator ends segment k
      word = self.lookup.get(sub[0])
      if word is None:
        return FAIL
      return (k + 1, ids + (word,), (b"", b""), False)
    if pipe:
      sub = self._push(sub, _PIPE)
      if sub is None:
        return FAIL
    if x == _PIPE:
      return (k, ids, sub, True)
    sub = self._push(sub, x)
    return FAIL if sub is None else (k, ids, sub, False)

  def _finish(self, seg):
    k, ids, sub, pipe = seg
    if k >= self.max_actions:
      return ("ok", ids)
    if pipe:
      sub = self._push(sub, _PIPE)
      if sub is None:
        return FAIL
    word = self.lookup.get(sub[0])
    return FAIL if word is None else ("ok", ids + (word,))

  def start(self):
    return ("seek", 0)

  def inside(self, state) -> bool:
    return state[0] == "in"

  def step(self, state, x: int):
    kind = state[0]
    if kind == "seek":
      buf = self.open[:state[1]] + bytes([x])
      if buf == self.open:
        return ("in", (0, (), (b"", b""), False), b"")
      if self.open.startswith(buf):
        return ("seek", len(buf))
      return ("seek", self._fallback(buf, self.open))
    if kind != "in":
      return state                               # "ok" and FAIL absorb
    _, seg, pending = state
    buf = pending + bytes([x])
    if buf == self.close:
      return self._finish(seg)
    if self.close.startswith(buf):
      return ("in", seg, buf)
    keep = self._fallback(buf, self.close)
    for y in buf[:len(buf) - keep]:              # bytes that turned out not to be the tag
      seg = self._segment_byte(seg, y)
      if seg == FAIL:
        return FAIL
    return ("in", seg, buf[len(buf) - keep:])


class TokenAutomaton:
  """Tables of the token automaton (host numpy; see module docstring) and its JAX parse."""

  def __init__(self, next_, grow, cls, ok, ids, count, close_len):
    self.next, self.grow, self.cls = next_, grow, cls   # [S, C+1] int32, [S, C+1] int32, [V] int32
    self.ok, self.ids, self.count = ok, ids, count      # [S] bool, [S, A] int32, [S] int32
    self.close_len = close_len
    n_cls = next_.shape[1]
    # One look-up per token: entry = (row offset of the next state) | (answer bytes << 24).
    self.packed = ((next_.astype(np.int64) * n_cls) | (grow.astype(np.int64) << 24)).ravel().astype(np.uint32)

  def parse(self, tokens: jax.Array, length: jax.Array, max_answer_bytes: int):
    """`(ids [A] int32, count int32, valid bool)` of one turn `tokens [L]`, `length` int32."""
    n_cls = self.next.shape[1]
    cls = jnp.asarray(self.cls)[jnp.clip(tokens, 0, self.cls.shape[0] - 1)]
    cls = jnp.where(jnp.arange(tokens.shape[0]) < length, cls, n_cls - 1)   # last class: no-op
    table = jnp.asarray(self.packed)

    def one(carry, c):
      row, total = carry                      # row = state * n_cls
      e = table[row + c]
      return ((e & 0xFFFFFF).astype(jnp.int32), total + (e >> 24).astype(jnp.int32)), None

    (row, total), _ = jax.lax.scan(one, (jnp.int32(0), jnp.int32(0)), cls.astype(jnp.int32),
                                   unroll=min(int(tokens.shape[0]), 16))
    s = row // n_cls
    valid = jnp.asarray(self.ok)[s] & (total - self.close_len <= max_answer_bytes)
    ids = jnp.where(valid, jnp.asarray(self.ids)[s], -1)
    return ids, jnp.where(valid, jnp.asarray(self.count)[s], 0), valid


def build(byte_table: np.ndarray, byte_lengths: np.ndarray, words: Sequence[bytes],
          word_ids: Sequence[int], max_actions: int, *, open_tag: bytes = b"<answer>",
          close_tag: bytes = b"</answer>", max_entries: int = 1 << 24) -> TokenAutomaton | None:
  """The token automaton of a tokenizer's `byte_table()`; None when it exceeds max_entries."""
  rule = _Rule(words, word_ids, max_actions, open_tag, close_tag)
  # Bytes outside the tags, the words (either case), whitespace and "|" all act alike: explore
  # with one representative of them.
  special = set(open_tag) | set(close_tag) | set(_WS) | {_PIPE}
  for w in words:
    special |= set(w.lower()) | set(w.upper())
  other = min(set(range(256)) - special)
  reps = sorted(special | {other})
  col = np.asarray([reps.index(x if x in special else other) for x in range(256)])
  index, states = {rule.start(): 0}, [rule.start()]
  rows = []
  queue = collections.deque([0])
  while queue:
    s = queue.popleft()
    row = []
    for x in reps:
      t = rule.step(states[s], x)
      if t not in index:
        index[t] = len(states)
        states.append(t)
        queue.append(index[t])
        if len(states) * len(reps) > max_entries:
          return None
      row.append(index[t])
    rows.append(row)
  byte_next = np.asarray(rows, np.int32)[:, col]                            # [S, 256]
  inside = np.asarray([rule.inside(s) for s in states], np.int32)           # [S]
  n_states = byte_next.shape[0]

  # Bytes that act identically everywhere form one byte class; tokens are strings of classes.
  _, byte_cls = np.unique(byte_next.T, axis=0, return_inverse=True)
  byte_cls = byte_cls.ravel().astype(np.int32)
  table = np.asarray(byte_table, np.uint8)
  lengths = np.clip(np.asarray(byte_lengths, np.int64), 0, table.shape[1])
  k = table.shape[1]
  # Rows of byte classes (255 = past the token's end), deduplicated as fixed-size byte strings.
  keyed = np.where(np.arange(k)[None, :] < lengths[:, None], byte_cls.astype(np.uint8)[table], 255)
  keyed = np.ascontiguousarray(keyed, np.uint8)
  _, first, tok_cls = np.unique(keyed.view(np.dtype((np.void, k))).ravel(), return_index=True,
                                return_inverse=True)
  uniq = np.where(keyed[first] == 255, -1, keyed[first].astype(np.int64))   # [C, K]
  n_cls = uniq.shape[0]
  if n_states * (n_cls + 1) > min(max_entries, 1 << 24) or k > 255:   # packed entry fields
    return None
  rep = np.zeros((int(byte_cls.max()) + 1,), np.int64)
  rep[byte_cls] = np.arange(256)                                            # a byte of each class
  cur = np.broadcast_to(np.arange(n_states)[:, None], (n_states, n_cls)).copy()
  grow = np.zeros((n_states, n_cls), np.int32)
  for j in range(k):
    live = uniq[None, :, j] >= 0
    grow += (live & (inside[cur] == 1)).astype(np.int32)
    cur = np.where(live, byte_next[cur, rep[np.maximum(uniq[None, :, j], 0)]], cur)
  next_ = np.concatenate([cur, np.arange(n_states)[:, None]], axis=1).astype(np.int32)
  grow = np.concatenate([grow, np.zeros((n_states, 1), np.int32)], axis=1)
  ok = np.array([s[0] == "ok" for s in states])
  ids = np.full((n_states, max_actions), -1, np.int32)
  count = np.zeros((n_states,), np.int32)
  for s in range(n_states):
    if ok[s]:
      found = states[s][1]
      ids[s, :len(found)] = found
      count[s] = len(found)
  return TokenAutomaton(next_, grow, tok_cls.ravel().astype(np.int32), ok, ids, count, len(close_tag))
