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
