"""A SentencePiece tokenizer wrapper plus the byte table jitted environments parse with.

SentencePiece: Kudo & Richardson (2018), arXiv:1808.06226. Host-side only: jitted code never
calls the tokenizer, it indexes the arrays built here once (`byte_table`, special ids), so
environments can turn generated token ids into characters inside `jit`/`vmap`.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from agent_rl.tokenizers import padded

_T = sentencepiece_model_pb2.ModelProto.SentencePiece.Type
_UNKNOWN, _CONTROL, _USER, _UNUSED, _BYTE = (
    _T.UNKNOWN, _T.CONTROL, _T.USER_DEFINED, _T.UNUSED, _T.BYTE)

BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # a byte-fallback piece (also HF, Gemma)
_SPACE = "\u2581"  # '▁', sentencepiece's visible space


class Tokenizer:
  """Encode/decode text to int32 ids; exposes special ids and the per-id byte table.

  Models written by `train_tokenizer` have pad=0, unk=1, bos=2, eos=3 and the chat
  markers at 4..13 (see `agent_rl.tokenizers.train`); `special(name)` looks any of them up.
  """

  def __init__(self, proto: bytes, *, name: str = "<bytes>"):
    self.name = name
    try:
      self._sp = spm.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, OSError, TypeError) as e:
      raise ValueError(f"{name} is not a valid sentencepiece model: {e}") from e
    if self._sp.pad_id() < 0:
      raise ValueError(f"{name} has no pad piece (pad_id=-1); token arrays need a real pad id")
    self._proto = bytes(proto)
    model = sentencepiece_model_pb2.ModelProto.FromString(self._proto)
    self._types = [p.type for p in model.pieces]
    self._byte_table: tuple[np.ndarray, np.ndarray] | None = None

  @classmethod
  def load(cls, path: str) -> "Tokenizer":
    """Reads a `.model` file; FileNotFoundError / ValueError name the file."""
    if not os.path.isfile(path):
      raise FileNotFoundError(f"tokenizer model file not found: {path}")
    with open(path, "rb") as f:
      proto = f.read()
    return cls(proto, name=path)

  # -- ids ------------------------------------------------------------------------------------
  @property
  def model_proto(self) -> bytes:
    """The serialized model (store it next to checkpoints to pin the vocabulary)."""
    return self._proto

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  @property
  def pad_id(self) -> int:
    return self._sp.pad_id()

  @property
  def bos_id(self) -> int:
    return self._sp.bos_id()

  @property
  def eos_id(self) -> int:
    return self._sp.eos_id()

  @property
  def unk_id(self) -> int:
    return self._sp.unk_id()

  def special(self, name: str) -> int:
    """Id of a special/user piece such as "<answer>" or "\\n"; KeyError if absent."""
    # User symbols are stored with spaces as '▁' (see train._user_symbols).
    i = self._sp.piece_to_id(name.replace(" ", _SPACE))
    if i == self.unk_id and name != self._sp.id_to_piece(self.unk_id):
      raise KeyError(f"special token {name!r} is not in the vocabulary of {self.name}")
    if self._types[i] not in (_CONTROL, _UNKNOWN, _USER):
      raise KeyError(f"{name!r} is an ordinary piece of {self.name}, not a special token")
    return i

  def id_to_piece(self, i: int) -> str:
    self._check_id(i)
    return self._sp.id_to_piece(int(i))

  def _check_id(self, i: int) -> None:
    if not 0 <= int(i) < self.vocab_size:
      raise ValueError(f"token id {int(i)} is outside [0, {self.vocab_size}) of {self.name}")

  # -- text -----------------------------------------------------------------------------------
  def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
    if not isinstance(text, str):
      raise TypeError(f"encode expects str, got {type(text).__name__}")
    ids = self._sp.encode(text)
    return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids`; pad/bos/eos decode to nothing. Accepts lists and numpy/jax arrays."""
    flat = [int(i) for i in np.asarray(ids).reshape(-1)]
    for i in flat:
      self._check_id(i)
    return self._sp.decode([i for i in flat if i != self.pad_id])

  def encode_padded(self, texts: Sequence[str], length: int, *, add_bos: bool = False,
                    add_eos: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`tokens [B, length] int32` right-padded with pad_id and `lengths [B] int32`
    (padded.encode_padded; ValueError naming the text that needs more than `length`)."""
    return padded.encode_padded(self, texts, length, add_bos=add_bos, add_eos=add_eos)

  # -- tables for jitted code -----------------------------------------------------------------
  def piece_bytes(self, i: int) -> bytes:
    """UTF-8 bytes id `i` contributes when it sits in the middle of a text.

    '▁' -> b' ', byte pieces <0xNN> -> that byte, user symbols -> their text (e.g. b'<answer>'),
    pad/bos/eos (control) -> b'', unk -> b' \\xe2\\x81\\x87 ' (' ⁇ ', as sentencepiece decodes it).
    """
    self._check_id(i)
    i = int(i)
    piece, kind = self._sp.id_to_piece(i), self._types[i]
    if kind in (_CONTROL, _UNUSED):
      return b""
    if kind == _UNKNOWN:
      return " \u2047 ".encode("utf-8")
    if kind == _BYTE:
      m = BYTE_PIECE.match(piece)
      if m is None:
        raise ValueError(f"byte piece {piece!r} (id {i}) of {self.name} is not of the form <0xNN>")
      return bytes([int(m.group(1), 16)])
    return piece.replace(_SPACE, " ").encode("utf-8")

  def byte_table(self) -> tuple[np.ndarray, np.ndarray]:
    """`(bytes_ [V, Kmax] uint8, lengths [V] int32)`: row i holds `piece_bytes(i)`, zero-padded.

    Concatenating `bytes_[i, :lengths[i]]` over `encode(s)` reproduces `s.encode()` exactly
    (models from `train_tokenizer` have no dummy prefix, so no leading space is added).
    """
    if self._byte_table is None:
      rows = [self.piece_bytes(i) for i in range(self.vocab_size)]
      kmax = max(1, max(len(r) for r in rows))
      table = np.zeros((len(rows), kmax), np.uint8)
      lengths = np.zeros((len(rows),), np.int32)
      for i, r in enumerate(rows):
        table[i, :len(r)] = np.frombuffer(r, np.uint8)
        lengths[i] = len(r)
      table.setflags(write=False)
      lengths.setflags(write=False)
      self._byte_table = (table, lengths)
    return self._byte_table

  def __repr__(self) -> str:
    return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size})"
