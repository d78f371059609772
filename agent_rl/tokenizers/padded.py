"""Texts to a right-padded id matrix: the one implementation every tokenizer's
`encode_padded` method calls."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def encode_padded(tokenizer, texts: Sequence[str], length: int, *, add_bos: bool = False,
                  add_eos: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """`tokens [B, length] int32` right-padded with `tokenizer.pad_id` and `lengths [B] int32`.

  Raises ValueError naming the text index when a text needs more than `length` tokens.
  """
  tokens = np.full((len(texts), length), tokenizer.pad_id, np.int32)
  lengths = np.zeros((len(texts),), np.int32)
  for b, t in enumerate(texts):
    ids = tokenizer.encode(t, add_bos=add_bos, add_eos=add_eos)
    if len(ids) > length:
      raise ValueError(f"texts[{b}] needs {len(ids)} tokens > length={length}: {t[:40]!r}...")
    tokens[b, :len(ids)] = ids
    lengths[b] = len(ids)
  return tokens, lengths


def pack_prompt_completion(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], length: int,
                           pad_id: int = 0):
  """Rows `[N, length]` of (prompt ids, completion ids) pairs, each written from the front and
  right-padded: tokens int32 (`pad_id` after the pair), position int32 (0..length-1), attention
  bool (on the pair), turn_index int32 (0 on the completion, -1 elsewhere). Each pair must fit
  `length` (callers truncate first: a reward pair's prompt from the left, an IWM row's state)."""
  n = len(pairs)
  tok = np.full((n, length), pad_id, np.int32)
  ti = np.full((n, length), -1, np.int32)
  attn = np.zeros((n, length), bool)
  for i, (p, c) in enumerate(pairs):
    s = np.asarray(list(p) + list(c), np.int32)
    tok[i, :len(s)], attn[i, :len(s)], ti[i, len(p):len(s)] = s, True, 0
  pos = np.broadcast_to(np.arange(length, dtype=np.int32), (n, length)).copy()
  return tok, pos, attn, ti
