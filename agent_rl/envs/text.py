"""Text in and out of jitted environments: piece tables (render) and a byte-level scanner (parse).

Out — rendering. An observation is a concatenation of *pieces* (strings) chosen per slot by
the env, e.g. a grid row chunk "#_P" or a digit. `PieceTable` tokenizes every piece once on
the host; in JAX, `render(ids)` gathers the pieces' tokens `[S, M]` and compacts them into one
padded token row `[out_len]` (cumulative lengths + a position->slot lookup, no scatter). With
the project tokenizer (no dummy prefix, identity normalization) decode(render(ids)) equals
"".join(pieces[ids]) exactly; a tokenizer trained on env text makes each piece one token.
`GridRenderer` skips the compaction when every piece a slot may hold has the same token count
(character-level tokenizers): the layout is then static, and when each output token depends
on one cell only, rendering is a few selects per token (same tokens, tested).

In — parsing. `ByteTable` maps generated tokens to their surface bytes (the tokenizer's
`byte_table()`), compacted to one byte string `[max_bytes]`. The scanner then works on bytes
only, so the same code serves every env (Sokoban/FrozenLake words, Countdown expressions):

    span = bytes_.answer(action)                 # Span: first <answer> ... next </answer>
    starts, lens, count = split_segments(span.bytes, span.length, max_segments=A)   # on "||"
    win = segment_windows(span.bytes, starts, lens, width=W)      # [A, W] stripped segments
    ids = match_words(win, lens, (b"up", b"down"))                # case-insensitive, -1 = none
    vals, ok = parse_ints(win, lens)                              # [+-]?[0-9]{1,9}

`ActionParser` bundles this for envs whose actions are words (RAGEN's `Up || Left`). By default
it runs the same rule compiled into a token automaton (token_parse.py: one table look-up per
token, ~30x cheaper than the scanner) and keeps the scanner (`ActionParser.scan`) for tables
too large to build or a `max_bytes` shorter than the turn; both give identical results.
Well-formed (valid) turn, exactly: the bytes contain `<answer>`, then later `</answer>`; the
content between the first `<answer>` and the first `</answer>` after it has at most
`max_answer_bytes` bytes; split on "||" (left to right, non-overlapping, like `bytes.split`),
the first `max_actions` segments (later ones are dropped, as RAGEN does) each equal an action
word after stripping ASCII whitespace, ignoring ASCII case. Anything else is invalid; nothing
ever raises in jitted code. All functions here act on one example; `vmap` them for batches.
"""
from __future__ import annotations

import hashlib
import itertools
from typing import Mapping, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs import token_parse
from agent_rl.envs.base import Text

_WS = (32, 9, 10, 13, 11, 12)  # what bytes.strip() strips


class TokenizerLike(Protocol):
  """What envs need from a tokenizer (agent_rl.tokenizers.Tokenizer implements it)."""
  pad_id: int

  def encode(self, text: str) -> list[int]: ...

  def decode(self, ids) -> str: ...

  def byte_table(self) -> tuple[np.ndarray, np.ndarray]:
    """`(bytes [V, K] uint8, lengths [V] int32)`: the surface bytes of every token id."""
    ...


class _Digest:
  """Hash/equality by a content digest, so envs holding tables stay cheap jit-static keys."""
  _digest: str

  def __hash__(self) -> int:
    return hash(self._digest)

  def __eq__(self, other) -> bool:
    return type(other) is type(self) and other._digest == self._digest


def _digest(*parts) -> str:
  h = hashlib.sha1()
  for p in parts:
    h.update(np.ascontiguousarray(p).tobytes() if isinstance(p, np.ndarray) else repr(p).encode())
  return h.hexdigest()


def compact(values: jax.Array, lengths: jax.Array, out_len: int, fill) -> tuple[jax.Array, jax.Array]:
  """Concatenates the ragged rows `values[s, :lengths[s]]` into `out [out_len]`.

  values: [S, M]; lengths: [S] int32 (0 drops a row). Returns `(out [out_len], n)` with
  n = min(sum(lengths), out_len); positions >= n hold `fill`. Gather-only: each output
  position finds its row by counting cumulative ends <= position.
  """
  s, m = values.shape
  lengths = jnp.clip(lengths.astype(jnp.int32), 0, m)
  ends = jnp.cumsum(lengths)
  pos = jnp.arange(out_len, dtype=jnp.int32)
  row = jnp.minimum(jnp.sum(ends[None, :] <= pos[:, None], axis=1, dtype=jnp.int32), s - 1)
  col = jnp.clip(pos - (ends[row] - lengths[row]), 0, m - 1)
  n = jnp.minimum(ends[-1], out_len)
  out = jnp.where(pos < n, values[row, col], jnp.asarray(fill, values.dtype))
  return out, n


class PieceTable(_Digest):
  """Pieces (strings) pre-tokenized once: `tokens [P, M] int32`, `lengths [P] int32`."""

  def __init__(self, tokenizer: TokenizerLike, pieces: Sequence[str]):
    if not pieces:
      raise ValueError("PieceTable needs at least one piece")
    self.pieces = tuple(pieces)
    self._index = {p: i for i, p in enumerate(self.pieces)}
    if len(self._index) != len(self.pieces):
      raise ValueError("PieceTable pieces must be distinct")
    ids = [list(tokenizer.encode(p)) for p in self.pieces]
    self.pad_id = int(tokenizer.pad_id)
    width = max(1, max(len(t) for t in ids))
    self.tokens = np.full((len(ids), width), self.pad_id, np.int32)
    self.lengths = np.array([len(t) for t in ids], np.int32)
    for i, t in enumerate(ids):
      self.tokens[i, :len(t)] = t
    self._digest = _digest(self.tokens, self.lengths, self.pad_id, self.pieces)

  def id(self, piece: str) -> int:
    """Row of `piece`; KeyError naming it when absent."""
    try:
      return self._index[piece]
    except KeyError:
      raise KeyError(f"piece {piece!r} is not in this PieceTable") from None

  def max_tokens(self, slot_pieces: Sequence[Sequence[str]]) -> int:
    """Worst-case rendered length when slot s may hold any of `slot_pieces[s]` (sizes obs_len)."""
    return int(sum(max(self.lengths[self.id(p)] for p in slot) for slot in slot_pieces))

  def render(self, ids: jax.Array, out_len: int, mask: jax.Array | None = None) -> Text:
    """Text of pieces `ids [S] int32` (slots with mask False are skipped), padded to out_len."""
    ids = jnp.asarray(ids, jnp.int32)
    toks = jnp.asarray(self.tokens)[ids]
    lens = jnp.asarray(self.lengths)[ids]
    if mask is not None:
      lens = jnp.where(mask, lens, 0)
    out, n = compact(toks, lens, out_len, self.pad_id)
    return Text(tokens=out, length=n)

  def render_host(self, pieces: Sequence[str]) -> list[int]:
    """Host-side reference rendering (tests, prompts)."""
    return [int(t) for p in pieces for t in self.tokens[self.id(p), :self.lengths[self.id(p)]]]


class GridRenderer(_Digest):
  """Renders a glyph grid `codes [H, W] int32` as text rows, `chunk` cells per piece.

  Pieces are every glyph tuple of 1..chunk cells, plus the same with "\\n" appended for the
  row's last chunk; a row of W cells is ceil(W / chunk) pieces. A tokenizer trained on env
  text learns these short row fragments, so rendering costs ~H * W / chunk tokens.
  """

  def __init__(self, tokenizer: TokenizerLike, glyphs: Sequence[str], shape: tuple[int, int],
               chunk: int = 3):
    if chunk < 1:
      raise ValueError(f"chunk must be >= 1, got {chunk}")
    self.glyphs, self.shape, self.chunk = tuple(glyphs), tuple(shape), int(chunk)
    g, (h, w) = len(self.glyphs), self.shape
    combos = [c for n in range(1, chunk + 1) for c in itertools.product(range(g), repeat=n)]
    pieces = ["".join(self.glyphs[i] for i in c) + nl for nl in ("", "\n") for c in combos]
    self.table = PieceTable(tokenizer, pieces)
    self.slots = []   # (first column, cells, first piece id of this slot's class)
    for start in range(0, w, chunk):
      n = min(chunk, w - start)
      offset = (len(combos) if start + n == w else 0) + sum(g ** m for m in range(1, n))
      self.slots.append((start, n, offset))
    spans = [self.table.lengths[o:o + g ** n] for _, n, o in self.slots]
    self.obs_len = h * sum(int(x.max()) for x in spans)
    # When every piece a slot may hold has the same token count (character- and byte-level
    # tokenizers), the layout is static: output position p always shows token col[p] of the
    # piece in slot slot[p], and rendering is one gather with no compaction.
    self.static = all(x.min() == x.max() for x in spans)
    self._lut = None
    if self.static:
      per_slot = [(s, j) for s, x in enumerate(spans) for j in range(int(x[0]))]
      k = len(self.slots)
      self._slot = np.asarray([r * k + s for r in range(h) for s, _ in per_slot], np.int32)
      self._col = np.asarray([j for _ in range(h) for _, j in per_slot], np.int32)
      self._separate(per_slot)
    self._digest = _digest(self.table._digest, self.shape, self.chunk)

  def _separate(self, per_slot):
    """Finds, if it exists, a per-position table `lut [P, G]` and cell `cells [P]` such that
    output token p = lut[p, code of cell p]: then rendering needs no piece ids and no gather
    of pieces, only G selects per token (the common case of one token per glyph)."""
    g, (h, w) = len(self.glyphs), self.shape
    cells, lut = [], []
    for s, j in per_slot:
      start, n, offset = self.slots[s]
      col = self.table.tokens[offset:offset + g ** n, j]                        # [G**n]
      digits = (np.arange(g ** n)[:, None] // g ** np.arange(n - 1, -1, -1)[None, :]) % g
      for t in range(n):
        table = np.full((g,), -1, np.int64)
        table[digits[:, t]] = col
        if np.array_equal(table[digits[:, t]], col):                          # col = f(digit t)
          cells.append(start + t)
          lut.append(table)
          break
      else:
        return
    self._cells = np.asarray([r * w + c for r in range(h) for c in cells], np.int32)
    self._lut = np.asarray(lut * h, np.int32)                                   # [P, G]

  def piece_ids(self, codes: jax.Array) -> jax.Array:
    """`[H * slots] int32` piece ids of a grid, row-major."""
    g = len(self.glyphs)
    codes = jnp.asarray(codes, jnp.int32)
    ids = []
    for start, n, offset in self.slots:
      pid = jnp.full(codes.shape[:1], offset, jnp.int32)
      for t in range(n):                      # base-g number of the slot's glyphs
        pid = pid + codes[:, start + t] * (g ** (n - 1 - t))
      ids.append(pid)
    return jnp.stack(ids, axis=1).ravel()

  def render(self, codes: jax.Array, out_len: int | None = None) -> Text:
    out_len = self.obs_len if out_len is None else out_len
    if self._lut is not None and out_len == self.obs_len:
      cell = jnp.asarray(codes, jnp.int32).ravel()[self._cells]
      out = jnp.asarray(self._lut[:, 0])
      for k in range(1, len(self.glyphs)):
        out = jnp.where(cell == k, jnp.asarray(self._lut[:, k]), out)
      return Text(tokens=out, length=jnp.int32(self.obs_len))
    ids = self.piece_ids(codes)
    if self.static and out_len == self.obs_len:
      m = self.table.tokens.shape[1]
      flat = jnp.asarray(self.table.tokens.ravel())[ids[self._slot] * m + self._col]
      return Text(tokens=flat, length=jnp.int32(self.obs_len))
    return self.table.render(ids, out_len)

  def text(self, codes) -> str:
    """Host-side string of a grid (what `render` decodes to)."""
    return "".join("".join(self.glyphs[int(c)] for c in row) + "\n" for row in np.asarray(codes))


def int_pieces(value: jax.Array, digit_ids: jax.Array, max_digits: int) -> tuple[jax.Array, jax.Array]:
  """Decimal digits of a non-negative int as piece ids `[max_digits]` + mask (no leading zeros).

  digit_ids: [10] piece ids of "0".."9". Values >= 10**max_digits keep their low digits.
  """
  value = jnp.maximum(jnp.asarray(value, jnp.int32), 0)
  powers = jnp.asarray([10 ** (max_digits - 1 - i) for i in range(max_digits)], jnp.int32)
  digits = (value // powers) % 10
  ndig = jnp.sum(value >= powers, dtype=jnp.int32)
  mask = jnp.arange(max_digits) >= max_digits - jnp.maximum(ndig, 1)
  return jnp.asarray(digit_ids, jnp.int32)[digits], mask


@struct.dataclass
class Span:
  """Bytes between the answer tags: `bytes [C] uint8` (0-padded), `length` int32, `found` bool."""
  bytes: jax.Array
  length: jax.Array
  found: jax.Array


class ByteTable(_Digest):
  """Token id -> surface bytes, from `tokenizer.byte_table()`; turns a generated Text into bytes."""

  def __init__(self, tokenizer: TokenizerLike):
    table, lengths = tokenizer.byte_table()
    self.table = np.asarray(table, np.uint8)
    self.lengths = np.asarray(lengths, np.int32)
    if self.table.ndim != 2 or self.lengths.shape != self.table.shape[:1]:
      raise ValueError(f"byte_table() must give [V, K] bytes and [V] lengths, got "
                       f"{self.table.shape} and {self.lengths.shape}")
    self._digest = _digest(self.table, self.lengths)

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


@struct.dataclass
class Actions:
  """Parsed turn: `ids [A] int32` (-1 past `count`), `count` int32 to execute, `valid` bool."""
  ids: jax.Array
  count: jax.Array
  valid: jax.Array


class ActionParser(_Digest):
  """Word actions from a generated turn: `parser(action: Text) -> Actions`.

  words: {"up": 0, "Down": 1, ...} (several words may share an id); matched case-insensitively.
  max_actions: actions per turn (RAGEN's max_actions_per_step); extra segments are dropped.
  """

  def __init__(self, tokenizer: TokenizerLike, words: Mapping[str, int], *, max_actions: int = 1,
               max_answer_bytes: int = 128, max_bytes: int | None = None,
               token_automaton: bool = True):
    if max_actions < 1:
      raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    if not words:
      raise ValueError("ActionParser needs at least one action word")
    self.bytes = ByteTable(tokenizer)
    self.words = tuple(w.encode("utf-8") for w in words)
    self.word_ids = tuple(int(v) for v in words.values())
    self.max_actions = int(max_actions)
    self.max_answer_bytes = int(max_answer_bytes)
    self.max_bytes = max_bytes
    # The same rule compiled to a token automaton (token_parse.py); None -> byte scanner only.
    self.automaton = token_parse.build(
        self.bytes.table, self.bytes.lengths, self.words, self.word_ids,
        self.max_actions) if token_automaton else None
    self._digest = _digest(self.bytes._digest, self.words, self.word_ids, self.max_actions,
                           self.max_answer_bytes, self.max_bytes, self.automaton is not None)

  def __call__(self, action: Text) -> Actions:
    full = action.tokens.shape[-1] * self.bytes.table.shape[1]   # bytes of a full turn
    if self.automaton is not None and (self.max_bytes is None or self.max_bytes >= full):
      ids, count, valid = self.automaton.parse(jnp.asarray(action.tokens, jnp.int32),
                                               action.length, self.max_answer_bytes)
      return Actions(ids=ids, count=count, valid=valid)
    return self.scan(action)

  def scan(self, action: Text) -> Actions:
    """The byte scanner (the rule's reference implementation in JAX; any max_bytes)."""
    span = self.bytes.answer(action, max_answer_bytes=self.max_answer_bytes, max_bytes=self.max_bytes)
    starts, lens, count = split_segments(span.bytes, span.length, max_segments=self.max_actions)
    width = max(len(w) for w in self.words)
    idx = match_words(segment_windows(span.bytes, starts, lens, width), lens, self.words)
    used = jnp.arange(self.max_actions) < jnp.minimum(count, self.max_actions)
    valid = span.found & jnp.all(~used | (idx >= 0))
    ids = jnp.where(used & valid, jnp.asarray(self.word_ids, jnp.int32)[jnp.maximum(idx, 0)], -1)
    return Actions(ids=ids, count=jnp.where(valid, jnp.sum(used, dtype=jnp.int32), 0), valid=valid)

  def encode_host(self, tokenizer: TokenizerLike, actions: Sequence[str]) -> list[int]:
    """Tokens of a well-formed turn `<answer>a || b</answer>` (solver replays, tests)."""
    return tokenizer.encode("<answer>" + " || ".join(actions) + "</answer>")
