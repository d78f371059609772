"""Copy pretraining: synthetic rows whose only learnable content is copying from the context.

Why: the papers start from pretrained checkpoints, which already point into their context
(induction heads: "A B ... A" -> "B", Olsson et al. 2022, arXiv 2209.11895). A tiny policy
trained from scratch on an expert's demos does not learn to (README "Not yet": TextHouse's
searching demos, MiniShop's item ids). `sft.copy_steps` > 0 spends the first SFT steps on
these rows, so the tiny model is a stand-in for a checkpoint that can copy before it imitates
(train/sft.py `Stages`: copy, then IWM, then the demos).

A row (`copy_rows`) is a stream of the tokenizer's ordinary pieces (`content_ids`) drawn
uniformly, where at each position (past the first `COPY_MIN` + 1) a copy starts with
probability `COPY_START` instead: a span of U{COPY_MIN..COPY_MAX} tokens from a uniform earlier
place of the row (no fixed distance, so no positional shortcut) is appended. The loss covers
the copied tokens after a copy's first: the first is unpredictable (which span is copied is
random), each later one is the successor of the previous token's earlier occurrence. A fresh
token is never a target, so the NLL's floor is 0, and a model that cannot copy sits near
log |content_ids|. Rows are a pure function of (seed, step): a run resumes at any step.

Spans of 8-32 tokens, not the 2-3 of an object's name: measured on the tiny TextHouse policy
(2 layers, 128 wide, 755 pieces, 64-token rows, batch 32), 8-32 spans show the sudden drop of
induction heads (NLL 4.3 -> 0.4) at ~1,400-1,600 steps at lr 2e-3 and ~1,100 at 5e-3, while
3-10 spans at 5e-3 were still at 4.9 after 1,600 steps; 128-token rows were slower per step
and per update (5.2 after 800 steps at 5e-3).

    ids = content_ids(tokenizer)
    mb = copy_rows(ids, batch=32, width=64, seed=0, step=7)     # Minibatch [32, 64]
"""
from __future__ import annotations

import numpy as np

from agent_rl.objective.minibatch import Minibatch
from agent_rl.tokenizers.tokenizer import BYTE_PIECE
from agent_rl.tokenizers.train import SPECIAL_TOKENS

COPY_START = 0.1     # at each position a copy starts with this probability
COPY_MIN, COPY_MAX = 8, 32   # a copied span's length, uniform
# Copy rows draw from their own stream, apart from the demo seeds and the RL keys.
_SEED_SALT = 0x0C0FFEE


def content_ids(tokenizer) -> np.ndarray:
  """`[K] int32`, sorted: ids of ordinary text pieces. Left out: pad, bos, eos and unk, the
  chat and format markers (`tokenizers.train.SPECIAL_TOKENS`; a HF tokenizer's added special
  tokens), and byte-fallback pieces `<0xNN>` (text the tokenizer's own pieces cover never uses
  them). ValueError when fewer than 2 are left."""
  _, lengths = tokenizer.byte_table()
  keep = np.asarray(lengths) > 0
  for i in (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id,
            getattr(tokenizer, "unk_id", None)):
    if i is not None and 0 <= i < keep.size:
      keep[i] = False
  for name in SPECIAL_TOKENS:
    try:
      keep[tokenizer.special(name)] = False
    except KeyError:
      pass
  is_special = getattr(tokenizer, "is_special", None)
  piece = getattr(tokenizer, "id_to_piece", None)
  for i in np.flatnonzero(keep):
    if (is_special is not None and is_special(int(i))) or (
        piece is not None and BYTE_PIECE.match(piece(int(i)))):
      keep[i] = False
  ids = np.flatnonzero(keep).astype(np.int32)
  if ids.size < 2:
    raise ValueError(f"sft.copy_steps: the tokenizer has {ids.size} ordinary pieces; copy rows "
                     "need at least 2")
  return ids


def copy_row(ids: np.ndarray, width: int, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray]:
  """(`tokens [width] int32`, `loss_mask [width] int32`): one row, filled to `width`."""
  tokens = np.zeros(width, np.int32)
  mask = np.zeros(width, np.int32)
  n = 0
  while n < width:
    if n > COPY_MIN and rng.random() < COPY_START:
      # a span of the tokens so far, cut at the row's end
      m = min(int(rng.integers(COPY_MIN, COPY_MAX + 1)), n, width - n)
      src = int(rng.integers(0, n - m + 1))
      tokens[n:n + m] = tokens[src:src + m]
      mask[n + 1:n + m] = 1
      n += m
    else:
      tokens[n] = ids[int(rng.integers(0, ids.size))]
      n += 1
  return tokens, mask


def copy_rows(ids: np.ndarray, batch: int, width: int, seed: int, step: int) -> Minibatch:
  """The copy stage's minibatch of SFT step `step`: `batch` rows of `width` tokens, every
  position valid, `turn_index` 0 on the targets and -1 elsewhere (as IWM rows); numpy arrays,
  a pure function of seed and step."""
  rng = np.random.default_rng([_SEED_SALT, int(seed), int(step)])
  rows = [copy_row(ids, width, rng) for _ in range(batch)]
  tokens, mask = (np.stack(x) for x in zip(*rows))
  zeros = np.zeros((batch, width), np.float32)
  return Minibatch(tokens=tokens, position=np.broadcast_to(np.arange(width, dtype=np.int32),
                                                           (batch, width)).copy(),
                   attention_mask=np.ones((batch, width), np.int32),
                   loss_mask=mask,
                   turn_index=np.where(mask > 0, 0, -1).astype(np.int32), old_logprobs=zeros,
                   advantages=zeros, agent=np.zeros((batch,), np.int32))
