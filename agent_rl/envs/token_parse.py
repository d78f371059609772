"""Token-level action parsing: byte_scan.py's scanner compiled, once on the host, into a token automaton.

The well-formedness rule of actions.py (first `<answer>`, first `</answer>` after it, at most
`max_answer_bytes` bytes between, split on "||", the first `max_actions` segments stripped of
ASCII whitespace each equal to an action word, ASCII case ignored) is a regular language with a
small output, so it is recognized by a finite automaton over bytes. This module builds that
automaton explicitly (control states are Python tuples explored breadth-first over the bytes
that matter) and lifts it to tokens.

Output as a register, not as states: the recognized actions do not steer the automaton, so the
control state leaves them out (segment index k, the partial word, a pending "|", a pending
closing-tag prefix) and each transition instead *emits* the word a segment ended with. Emitted
words are written into one integer, digit k in base B = (distinct word ids + 1), so emission is
an addition: `emit[s, c] = sum (word + 1) * B**k` over the words token class c completes from
state s. States then number ~(max_actions + 1) x (partial words) (a few hundred) instead of
(words)^max_actions times that.

Lifting to tokens: tokens with the same effect on every state form a class, and `next[s, c]`,
`grow[s, c]` (bytes read inside the answer, the closing tag included, so
`length = sum(grow) - len(close_tag)`: the one count a finite automaton cannot keep) and
`emit[s, c]` are that effect. Effects are interned byte position by byte position over the
whole vocabulary (`_lift`), so a 151k-token byte-level vocabulary (Qwen) builds in about a
second: it has ~10^5 distinct byte strings but only ~10^3 distinct effects.

In JAX a turn of L tokens then costs L table look-ups (`lax.scan`) instead of the byte
compaction, tag search and segment split of the scanner. The automaton is exact, not a
heuristic: tests/envs/test_token_parse.py checks it against the byte scanner on fuzzed token
sequences for several tokenizers. `build` returns None when the tables would exceed
`max_entries` (or the packed fields overflow) and the caller keeps the byte scanner.
"""
from __future__ import annotations

import collections
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

_WS = frozenset((32, 9, 10, 13, 11, 12))   # what bytes.strip() strips
_PIPE = ord("|")
_STAR = "*"                               # "trailing whitespace that only may end the segment"
FAIL = ("fail",)
_NONE = -1                                # "no word emitted"


class _Rule:
  """The byte-level control automaton: `step(state, byte) -> (state, emitted word or -1)`.

  Words are emitted as indices into `self.ids` (the distinct word ids, sorted); `k(state)` is
  the number of words recorded before the state (the register digit the next emission writes).
  """

  def __init__(self, words: Sequence[bytes], word_ids: Sequence[int], max_actions: int,
               open_tag: bytes, close_tag: bytes):
    self.lookup = {}
    for w, i in zip(words, word_ids):
      self.lookup.setdefault(w.lower(), int(i))     # first word wins, as match_words' argmax
    self.ids = sorted(set(self.lookup.values()))
    self.digit = {i: d for d, i in enumerate(self.ids)}
    self.prefixes = {w[:n] for w in self.lookup for n in range(len(w) + 1)}
    self.max_actions, self.open, self.close = max_actions, open_tag, close_tag

  @staticmethod
  @functools.lru_cache(maxsize=1 << 14)   # buf is always a tag prefix + one byte: few distinct
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
    """Feeds one answer byte to the "||" splitter; seg = (k, sub, pipe). -> (seg | FAIL, word)."""
    k, sub, pipe = seg
    if k >= self.max_actions:
      return seg, _NONE
    if pipe and x == _PIPE:                       # a separator ends segment k
      word = self.lookup.get(sub[0])
      if word is None:
        return FAIL, _NONE
      return (k + 1, (b"", b""), False), self.digit[word]
    if pipe:
      sub = self._push(sub, _PIPE)
      if sub is None:
        return FAIL, _NONE
    if x == _PIPE:
      return (k, sub, True), _NONE
    sub = self._push(sub, x)
    return (FAIL if sub is None else (k, sub, False)), _NONE

  def _finish(self, seg):
    k, sub, pipe = seg
    if k >= self.max_actions:
      return ("ok", k), _NONE
    if pipe:
      sub = self._push(sub, _PIPE)
      if sub is None:
        return FAIL, _NONE
    word = self.lookup.get(sub[0])
    return (FAIL, _NONE) if word is None else (("ok", k + 1), self.digit[word])

  def start(self):
    return ("seek", 0)

  def inside(self, state) -> bool:
    return state[0] == "in"

  def k(self, state) -> int:
    return state[1][0] if state[0] == "in" else state[1] if state[0] == "ok" else 0

  def step(self, state, x: int):
    kind = state[0]
    if kind == "seek":
      buf = self.open[:state[1]] + bytes([x])
      if buf == self.open:
        return ("in", (0, (b"", b""), False), b""), _NONE
      if self.open.startswith(buf):
        return ("seek", len(buf)), _NONE
      return ("seek", self._fallback(buf, self.open)), _NONE
    if kind != "in":
      return state, _NONE                        # "ok" and FAIL absorb
    _, seg, pending = state
    buf = pending + bytes([x])
    if buf == self.close:
      return self._finish(seg)
    if self.close.startswith(buf):
      return ("in", seg, buf), _NONE
    keep = self._fallback(buf, self.close)
    emitted = _NONE
    for y in buf[:len(buf) - keep]:              # bytes that turned out not to be the tag
      seg, w = self._segment_byte(seg, y)
      if seg == FAIL:
        return FAIL, _NONE
      emitted = w if w != _NONE else emitted     # at most one "||" per byte step
    return ("in", seg, buf[len(buf) - keep:]), emitted


class TokenAutomaton:
  """Tables of the token automaton (host numpy; see module docstring) and its JAX parse.

  next_ / grow / emit: [S, C+1] int32 (the last class is the no-op of padding positions);
  cls [V] int32 (token -> class); ok [S] bool; count [S] int32 (words of an ok state);
  word_ids [D] int32 (register digit d+1 -> word id); base B = D + 1.
  """

  def __init__(self, next_, grow, emit, cls, ok, count, word_ids, max_actions, close_len):
    self.next, self.grow, self.emit, self.cls = next_, grow, emit, cls
    self.ok, self.count, self.word_ids = ok, count, np.asarray(word_ids, np.int32)
    self.max_actions, self.close_len = int(max_actions), int(close_len)
    self.base = len(word_ids) + 1
    n_states, n_cls = next_.shape
    # One look-up per token: entry = next state | answer bytes << sb | register digits << sb + 8.
    # A single 32-bit table (not one per field) keeps the working set of a 151k vocabulary's
    # ~10^3 classes in cache: the look-up is the whole per-token cost.
    self.state_bits = max(1, int(n_states - 1).bit_length())
    self.packed = (next_.astype(np.uint64) | (grow.astype(np.uint64) << self.state_bits)
                   | (emit.astype(np.uint64) << (self.state_bits + 8))).ravel().astype(np.uint32)

  def parse(self, tokens: jax.Array, length: jax.Array, max_answer_bytes: int):
    """`(ids [A] int32, count int32, valid bool)` of one turn `tokens [L]`, `length` int32."""
    n_cls = self.next.shape[1]
    cls = jnp.asarray(self.cls)[jnp.clip(tokens, 0, self.cls.shape[0] - 1)]
    cls = jnp.where(jnp.arange(tokens.shape[0]) < length, cls, n_cls - 1)   # last class: no-op
    table = jnp.asarray(self.packed)
    sb, mask = self.state_bits, jnp.uint32((1 << self.state_bits) - 1)

    def one(carry, c):
      s, total, reg = carry
      e = table[s * n_cls + c]
      return ((e & mask).astype(jnp.int32), total + ((e >> sb) & 0xFF).astype(jnp.int32),
              reg + (e >> (sb + 8)).astype(jnp.int32)), None

    zero = jnp.int32(0)
    (s, total, reg), _ = jax.lax.scan(one, (zero, zero, zero), cls.astype(jnp.int32),
                                      unroll=min(int(tokens.shape[0]), 16))
    valid = jnp.asarray(self.ok)[s] & (total - self.close_len <= max_answer_bytes)
    powers = jnp.asarray([self.base ** k for k in range(self.max_actions)], jnp.int32)
    digit = (reg // powers) % self.base                                       # [A]
    words = jnp.asarray(self.word_ids)[jnp.maximum(digit - 1, 0)]
    ids = jnp.where(valid & (digit > 0), words, -1)
    return ids, jnp.where(valid, jnp.asarray(self.count)[s], 0), valid


def _explore(rule: _Rule, max_entries: int):
  """Breadth-first control states over one representative byte per group of bytes that act
  alike (everything outside the tags, words, whitespace and "|" acts like one byte).
  Returns (states, byte_next [S, 256], byte_word [S, 256]) or None past max_entries."""
  tag = set(rule.open) | set(rule.close)
  in_words = {b for w in rule.lookup for b in w}                          # lower-cased words

  def kind(x: int):
    """Bytes of one kind act identically in every state (rule.step only looks at these)."""
    if x in tag:
      return ("tag", x)
    if x == _PIPE:
      return ("pipe",)
    if x in _WS:
      return ("ws", x if x in in_words else None)
    low = bytes([x]).lower()[0]
    return ("word", low) if low in in_words else ("other",)

  kinds = [kind(x) for x in range(256)]
  first = {}
  for x, kd in enumerate(kinds):
    first.setdefault(kd, x)
  reps = sorted(first.values())
  col = np.asarray([reps.index(first[kd]) for kd in kinds])
  index, states = {rule.start(): 0}, [rule.start()]
  nxt, word = [], []
  queue = collections.deque([0])
  while queue:
    s = queue.popleft()
    row, out = [], []
    for x in reps:
      t, w = rule.step(states[s], x)
      if t not in index:
        index[t] = len(states)
        states.append(t)
        queue.append(index[t])
        if len(states) * len(reps) > max_entries:
          return None
      row.append(index[t])
      out.append(w)
    nxt.append(row)
    word.append(out)
  return states, np.asarray(nxt, np.int32)[:, col], np.asarray(word, np.int64)[:, col]


def build(byte_table: np.ndarray, byte_lengths: np.ndarray, words: Sequence[bytes],
          word_ids: Sequence[int], max_actions: int, *, open_tag: bytes = b"<answer>",
          close_tag: bytes = b"</answer>", max_entries: int = 1 << 24) -> TokenAutomaton | None:
  """The token automaton of a tokenizer's `byte_table()`; None when it exceeds max_entries."""
  rule = _Rule(words, word_ids, max_actions, open_tag, close_tag)
  base = len(rule.ids) + 1
  if base ** max_actions >= 1 << 24 or np.asarray(byte_table).shape[1] > 255:
    return None                                  # register / 8-bit grow field would overflow
  explored = _explore(rule, max_entries)
  if explored is None:
    return None
  states, byte_next, byte_word = explored
  n_states = len(states)
  inside = np.asarray([rule.inside(s) for s in states], np.int32)           # [S]
  k = np.asarray([rule.k(s) for s in states], np.int64)                     # [S]
  # A byte that ends segment k with word d adds (d + 1) * B**k to the register.
  byte_emit = np.where(byte_word >= 0, (byte_word + 1) * base ** k[:, None], 0).astype(np.int32)
  fail = states.index(FAIL) if FAIL in states else -1
  lifted = _lift(byte_next, byte_emit, inside, fail, byte_table, byte_lengths)
  if lifted is None:
    return None
  tok_cls, fns, grows, emits = lifted
  n_cls = fns.shape[0]
  fields = int(n_states - 1).bit_length() + 8 + int(base ** max_actions - 1).bit_length()
  if n_states * (n_cls + 1) > max_entries or fields > 32:   # one packed 32-bit entry
    return None
  pad = lambda a, v: np.concatenate([a.T, v], axis=1).astype(np.int32)   # noqa: E731
  next_ = pad(fns, np.arange(n_states)[:, None])
  grow = pad(grows, np.zeros((n_states, 1)))
  emit = pad(emits, np.zeros((n_states, 1)))
  ok = np.array([s[0] == "ok" for s in states])
  count = np.where(ok, k, 0).astype(np.int32)
  return TokenAutomaton(next_, grow, emit, tok_cls, ok, count, rule.ids, max_actions,
                        len(close_tag))


def _lift(byte_next: np.ndarray, byte_emit: np.ndarray, inside: np.ndarray, fail: int,
          byte_table: np.ndarray, byte_lengths: np.ndarray):
  """Token classes of a vocabulary: tokens with the same effect on every control state.

  A token's effect is three vectors over states: `fn [S]` (the state after all its bytes),
  `grow [S]` (how many of them are read inside the answer) and `emit [S]` (register digits
  written). Effects are interned as they are built, byte position by byte position over all
  tokens at once: the effect of a token's first j+1 bytes is a function of (effect of its
  first j bytes, class of byte j), and each such pair is composed once however many tokens
  share it. Cost ~K * V integer ops plus (distinct pairs) * S, not V * S.

  Returns `(cls [V] int32, fns [C, S], grows [C, S], emits [C, S])`, or None on a hash
  collision of two different effects (checked, so the tables are exact or not built).
  """
  n_states = byte_next.shape[0]
  # Byte classes: bytes whose columns of (byte_next, byte_emit) are equal (as _explore made them).
  both = np.ascontiguousarray(np.concatenate([byte_next, byte_emit], axis=0).T)   # [256, 2S]
  _, byte_cls = np.unique(both.view(np.dtype((np.void, both.shape[1] * both.itemsize))).ravel(),
                          return_inverse=True)
  byte_cls = byte_cls.ravel().astype(np.int64)
  n_b = int(byte_cls.max()) + 1
  rep = np.zeros((n_b,), np.int64)
  rep[byte_cls] = np.arange(256)
  step, step_emit = byte_next[:, rep], byte_emit[:, rep]                   # [S, n_b]
  table = np.asarray(byte_table, np.uint8)
  lengths = np.clip(np.asarray(byte_lengths, np.int64), 0, table.shape[1])
  # Effects as rows of growing arrays; effect 0 = no bytes read. Rows are interned by a 64-bit
  # random-projection hash, and every hit is checked for equality (exact, not probabilistic).
  cap = 1024
  fns = np.zeros((cap, n_states), np.int32)
  grows = np.zeros((cap, n_states), np.int32)
  emits = np.zeros((cap, n_states), np.int32)
  fns[0] = np.arange(n_states)
  proj = np.random.default_rng(0).integers(1, 1 << 62, size=(3, n_states), dtype=np.uint64)

  def hashes(f, g, e):
    with np.errstate(over="ignore"):
      return (f.astype(np.uint64) * proj[0] + g.astype(np.uint64) * proj[1]
              + e.astype(np.uint64) * proj[2]).sum(axis=1)

  index = {int(hashes(fns[:1], grows[:1], emits[:1])[0]): 0}
  n_fx = 1
  memo = np.full((cap * n_b,), -1, np.int64)                              # fid * n_b + class -> fid
  fid = np.zeros((table.shape[0],), np.int64)
  cls_at = byte_cls[table]                                                 # [V, K]
  for j in range(table.shape[1]):
    live = np.nonzero(lengths > j)[0]
    if live.size == 0:
      break
    key = fid[live] * n_b + cls_at[live, j]
    seen = np.zeros((n_fx * n_b,), bool)
    seen[key] = True
    new = np.nonzero(seen & (memo[:seen.size] < 0))[0]                     # pairs not composed yet
    f, c = new // n_b, new % n_b
    prev = fns[f]                                                          # [U, S]
    nf = step[prev, c[:, None]]
    ng = grows[f] + inside[prev]
    ne = emits[f] + step_emit[prev, c[:, None]]
    # Bytes read and words emitted on the way to FAIL never matter (the turn is invalid):
    # zeroing them merges effects that differ only there (most token prefixes).
    dead = nf == fail
    ng[dead] = 0
    ne[dead] = 0
    got = np.empty((new.size,), np.int64)
    for u, h in enumerate(hashes(nf, ng, ne).tolist()):
      g = index.get(h)
      if g is None:
        g = index[h] = n_fx
        if n_fx == fns.shape[0]:
          fns, grows, emits = (np.concatenate([a, np.empty_like(a)]) for a in (fns, grows, emits))
        fns[g], grows[g], emits[g] = nf[u], ng[u], ne[u]
        n_fx += 1
      got[u] = g
    if not (np.array_equal(fns[got], nf) and np.array_equal(grows[got], ng)
            and np.array_equal(emits[got], ne)):
      return None                 # a 64-bit hash collision (never seen): keep the scanner
    memo[new] = got
    if memo.size < n_fx * n_b:
      memo = np.concatenate([memo, np.full((n_fx * n_b - memo.size + memo.size,), -1, np.int64)])
    fid[live] = memo[key]
  used, cls = np.unique(fid, return_inverse=True)
  return cls.ravel().astype(np.int32), fns[used], grows[used], emits[used]
