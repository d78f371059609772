"""A byte-level tokenizer with the same interface as `Tokenizer` (no model file).

Used to build an environment once *before* a sentencepiece model exists, so the env can
render the text the sentencepiece model is then trained on (envs need a tokenizer to
build their piece tables). Ids: pad 0, unk 1, bos 2, eos 3, SPECIAL_TOKENS, then the 256
bytes.
"""
from __future__ import annotations

import re

import numpy as np

from agent_rl.tokenizers import padded
from agent_rl.tokenizers.train import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS


class ByteTokenizer:
  pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID
  _BASE = 4 + len(SPECIAL_TOKENS)

  @property
  def vocab_size(self) -> int:
    return self._BASE + 256

  def special(self, name: str) -> int:
    try:
      return 4 + SPECIAL_TOKENS.index(name)
    except ValueError:
      raise KeyError(f"unknown special token {name!r}; known: {', '.join(SPECIAL_TOKENS)}") from None

  def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
    """The special tokens' ids where their strings occur (at each position the first of
    SPECIAL_TOKENS that matches, left to right), each other character's UTF-8 bytes."""
    if not isinstance(text, str):
      raise TypeError(f"encode expects str, got {type(text).__name__}")
    run = lambda t: (np.frombuffer(t.encode("utf-8"), np.uint8).astype(np.int64)  # noqa: E731
                     + self._BASE).tolist()   # a run of plain text as one array op
    out, pos = [], 0
    for m in _SPECIAL.finditer(text):
      out += run(text[pos:m.start()]) + [4 + _SPECIAL_ID[m.group()]]
      pos = m.end()
    out += run(text[pos:])
    return ([self.bos_id] if add_bos else []) + out + ([self.eos_id] if add_eos else [])

  def encode_padded(self, texts, length: int, *, add_bos: bool = False, add_eos: bool = False):
    """`tokens [B, length] int32` right-padded with pad_id and `lengths [B] int32`
    (padded.encode_padded; ValueError naming the text that needs more than `length`)."""
    return padded.encode_padded(self, texts, length, add_bos=add_bos, add_eos=add_eos)

  def decode(self, ids) -> str:
    rows = _ROWS
    return b"".join(rows[i] for i in np.asarray(ids).reshape(-1)).decode("utf-8", "replace")

  def byte_table(self) -> tuple[np.ndarray, np.ndarray]:
    """`(bytes [V, K] uint8, lengths [V] int32)`, a fresh copy (callers may keep or edit it)."""
    return _TABLE.copy(), _LENGTHS.copy()


# Alternatives in SPECIAL_TOKENS order: at a position the regex tries them in that order, as
# the character loop this replaced did (a Python loop per character was a toy game's env time).
_SPECIAL = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
_SPECIAL_ID = {t: j for j, t in reversed(list(enumerate(SPECIAL_TOKENS)))}
# Surface bytes of every id, built once: decode runs per observation in host envs (host/), and
# rebuilding the table per call was most of a toy game's env time there.
_ROWS = tuple([b""] * 4 + [s.encode() for s in SPECIAL_TOKENS] + [bytes([b]) for b in range(256)])
_LENGTHS = np.array([len(r) for r in _ROWS], np.int32)
_TABLE = np.zeros((len(_ROWS), int(_LENGTHS.max())), np.uint8)
for _i, _r in enumerate(_ROWS):
  _TABLE[_i, :len(_r)] = np.frombuffer(_r, np.uint8)
