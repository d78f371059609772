"""Rendering text out of jitted environments: pre-tokenized pieces gathered into token rows.

An observation is a concatenation of *pieces* (strings) chosen per slot by the env, e.g. a
grid row chunk "#_P" or a digit. `PieceTable` tokenizes every piece once on the host; in JAX,
`render(ids)` gathers the pieces' tokens `[S, M]` and compacts them into one padded token row
`[out_len]` (cumulative lengths + a position->slot lookup). With the project
tokenizer (no dummy prefix, identity normalization) decode(render(ids)) equals
"".join(pieces[ids]) exactly; a tokenizer trained on env text makes each piece one token.
`GridRenderer` skips the compaction when every piece a slot may hold has the same token count
(character-level tokenizers): the layout is then static, and when each output token depends
on one cell only, rendering is a few selects per token (same tokens, tested).
All functions act on one example; `vmap` them for batches.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Digest, Text, TokenizerLike, digest


def compact(values: jax.Array, lengths: jax.Array, out_len: int, fill) -> tuple[jax.Array, jax.Array]:
  """Concatenates the ragged rows `values[s, :lengths[s]]` into `out [out_len]`.

  values: [S, M]; lengths: [S] int32 (0 drops a row). Returns `(out [out_len], n)` with
  n = min(sum(lengths), out_len); positions >= n hold `fill`. Each output position's row is
  the number of rows ending at or before it: one scatter-add of the row ends into
  `[out_len]` and a cumulative sum, O(S + out_len). (Counting `ends <= pos` as an
  `[out_len, S]` comparison was O(S * out_len): 30-66x slower at batch 1,024 with S = 128-300
  slots, and ~80% of a TextHouse step.)
  """
  s, m = values.shape
  lengths = jnp.clip(lengths.astype(jnp.int32), 0, m)
  ends = jnp.cumsum(lengths)
  pos = jnp.arange(out_len, dtype=jnp.int32)
  ended = jnp.zeros((out_len,), jnp.int32).at[ends].add(1, mode="drop")  # ends >= out_len: none
  row = jnp.minimum(jnp.cumsum(ended), s - 1)
  col = jnp.clip(pos - (ends[row] - lengths[row]), 0, m - 1)
  n = jnp.minimum(ends[-1], out_len)
  out = jnp.where(pos < n, values[row, col], jnp.asarray(fill, values.dtype))
  return out, n


class PieceTable(Digest):
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
    self._digest = digest(self.tokens, self.lengths, self.pad_id, self.pieces)

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


class GridRenderer(Digest):
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
    self._digest = digest(self.table._digest, self.shape, self.chunk)

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
