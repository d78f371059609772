"""Search-R1's answer scores in JAX: normalized exact match and token F1 on answer bytes.

Search-R1 (`verl/utils/reward_score/qa_em.py`) and HotpotQA's evaluator normalize both
strings by: lower-case, delete ASCII punctuation (`string.punctuation`), replace the
articles `a|an|the` (whole words) by spaces, and collapse whitespace; EM is equality of the
normalized strings, F1 the token-multiset F1 of their whitespace-split words. Here the
normalized words are built in the graph: words are maximal runs of non-whitespace bytes
(Python's `str.split` ASCII whitespace, \\x1c-\\x1f included), punctuation bytes are dropped
inside them, runs with nothing left vanish, and `a`/`an`/`the` words are removed. Bytes >= 128
count as word characters (Python's `\\b` treats non-ASCII letters so; a non-ASCII symbol
glued to an article is the one case where the two may differ). One example; vmap for batches.
"""
from __future__ import annotations

import string
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.byte_scan import lower

_SPACE = (9, 10, 11, 12, 13, 28, 29, 30, 31, 32)
_PUNCT = tuple(string.punctuation.encode())
_ARTICLES = (b"a", b"an", b"the")


@struct.dataclass
class Words:
  """Normalized words: `bytes [W, C] uint8` (0-padded), `lens [W] int32`, `count` int32."""
  bytes: jax.Array
  lens: jax.Array
  count: jax.Array


def normalize_host(text: str) -> list[str]:
  """The host normalization of gold answers (same rule; used to build the gold tables)."""
  import re
  text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
  return re.sub(r"\b(a|an|the)\b", " ", text).split()


def normalized_words(b: jax.Array, n: jax.Array, max_words: int, width: int) -> Words:
  """Normalized words of `b[:n]` (`b [L] uint8`): at most max_words words of width bytes
  (longer words are cut; callers size width to the gold words so a cut word never matches)."""
  length = b.shape[0]
  idx = jnp.arange(length, dtype=jnp.int32)
  b = lower(b)
  live = idx < n
  space = jnp.zeros((length,), bool)
  for c in _SPACE:
    space |= b == c
  punct = jnp.zeros((length,), bool)
  for c in _PUNCT:
    punct |= b == c
  solid = live & ~space
  prev = jnp.concatenate([jnp.zeros((1,), bool), solid[:-1]])
  run = jnp.cumsum(solid & ~prev) - 1                                       # run id of a byte
  kept = solid & ~punct
  has = jnp.zeros((length,), bool).at[jnp.where(kept, run, length)].set(True, mode="drop")
  word_of_run = jnp.cumsum(has) - 1
  cs = jnp.cumsum(kept)
  base = jnp.full((length,), length, jnp.int32).at[jnp.where(kept, run, length)].min(
      (cs - 1).astype(jnp.int32), mode="drop")                            # first kept rank of run
  w = jnp.where(kept, word_of_run[jnp.clip(run, 0, length - 1)], max_words)
  off = jnp.where(kept, cs - 1 - base[jnp.clip(run, 0, length - 1)], width)
  raw = jnp.zeros((max_words + 1, width + 1), jnp.uint8).at[w, jnp.minimum(off, width)].set(
      b, mode="drop")[:max_words, :width]
  raw_lens = jnp.zeros((max_words + 1,), jnp.int32).at[w].add(1, mode="drop")[:max_words]
  total = jnp.sum(has, dtype=jnp.int32)
  article = jnp.zeros((max_words,), bool)
  for a in _ARTICLES:
    pat = np.zeros((width,), np.uint8)
    pat[:len(a)] = np.frombuffer(a, np.uint8)
    article |= (raw_lens == len(a)) & jnp.all(raw == jnp.asarray(pat), axis=1)
  keep = (jnp.arange(max_words) < total) & ~article
  pos = jnp.where(keep, jnp.cumsum(keep) - 1, max_words)
  out = jnp.zeros((max_words, width), jnp.uint8).at[pos].set(raw, mode="drop")
  lens = jnp.zeros((max_words,), jnp.int32).at[pos].set(jnp.minimum(raw_lens, width + 1), mode="drop")
  # words past max_words still count (for F1's precision), articles among them too: an
  # overflowing answer never matches a gold answer sized below max_words anyway.
  count = jnp.sum(keep, dtype=jnp.int32) + jnp.maximum(total - max_words, 0)
  return Words(bytes=out, lens=lens, count=count)


def gold_table(answers: Sequence[str], max_words: int, width: int) -> Words:
  """Normalized gold answers as numpy Words `[G, W, C]` (host)."""
  g = len(answers)
  out = np.zeros((g, max_words, width), np.uint8)
  lens = np.zeros((g, max_words), np.int32)
  count = np.zeros((g,), np.int32)
  for i, a in enumerate(answers):
    ws = normalize_host(a)
    if not ws or len(ws) > max_words or max(len(w.encode()) for w in ws) > width:
      raise ValueError(f"gold answer {a!r} does not fit {max_words} words of {width} bytes")
    count[i] = len(ws)
    for j, w in enumerate(ws):
      e = w.encode()
      out[i, j, :len(e)], lens[i, j] = np.frombuffer(e, np.uint8), len(e)
  return Words(bytes=out, lens=lens, count=count)


def em_f1(pred: Words, gold: Words) -> tuple[jax.Array, jax.Array]:
  """(em, f1) f32 of one prediction against one gold answer (Words of the same width)."""
  wp, wg = pred.lens.shape[0], gold.lens.shape[0]
  eq = (jnp.all(pred.bytes[:, None, :] == gold.bytes[None, :, :], axis=-1)
        & (pred.lens[:, None] == gold.lens[None, :]))                          # [Wp, Wg]
  eq &= (jnp.arange(wp)[:, None] < jnp.minimum(pred.count, wp)) & (jnp.arange(wg)[None, :] < gold.count)
  geq = (jnp.all(gold.bytes[:, None, :] == gold.bytes[None, :, :], axis=-1)
         & (gold.lens[:, None] == gold.lens[None, :]))
  gl = jnp.arange(wg) < gold.count
  geq &= gl[:, None] & gl[None, :]
  first = gl & ~jnp.any(jnp.tril(geq, -1), axis=1)                            # distinct gold words
  common = jnp.sum(jnp.where(first, jnp.minimum(jnp.sum(eq, axis=0), jnp.sum(geq, axis=0)), 0))
  common = common.astype(jnp.float32)
  p = common / jnp.maximum(pred.count, 1)
  r = common / jnp.maximum(gold.count, 1)
  f1 = jnp.where(common > 0, 2 * p * r / jnp.maximum(p + r, 1e-9), 0.0)
  n = min(wp, wg)
  same = pred.count == gold.count
  diag = jnp.all(jnp.diagonal(eq[:n, :n]) | (jnp.arange(n) >= gold.count))
  return (same & diag).astype(jnp.float32), f1.astype(jnp.float32)
