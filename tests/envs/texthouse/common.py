"""Helpers shared by the TextHouse tests: token batches of action strings, batched stepping."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text


_ENCODED: dict = {}


def turns(tok, texts, width):
  """Text [N, width] of raw turn strings (truncated to width tokens)."""
  arr = np.zeros((len(texts), width), np.int32)
  lens = np.zeros((len(texts),), np.int32)
  for i, t in enumerate(texts):
    key = (id(tok), t)
    if key not in _ENCODED:
      _ENCODED[key] = tok.encode(t)
    ids = _ENCODED[key][:width]
    arr[i, :len(ids)] = ids
    lens[i] = len(ids)
  return Text(tokens=jnp.asarray(arr), length=jnp.asarray(lens))


def turn_bytes(tok, tokens, length):
  """Surface bytes of one turn (None if a token id is outside the vocabulary)."""
  table, lens = tok.byte_table()
  out = b""
  for t in np.asarray(tokens)[:int(length)]:
    if not 0 <= t < len(lens):
      return None
    out += bytes(table[t, :lens[t]])
  return out


def stack(*trees):
  return jax.tree.map(lambda *x: np.concatenate([np.asarray(a) for a in x]), *trees)


def row(tree, i):
  return jax.tree.map(lambda x: np.asarray(x)[i], tree)


@functools.lru_cache(maxsize=8)
def batched(env):
  return jax.jit(jax.vmap(env.reset)), jax.jit(jax.vmap(env.step))


def decode(tok, obs, i):
  return tok.decode(np.asarray(obs.tokens[i])[:int(obs.length[i])])


class ChunkTokenizer:
  """Greedy longest-match tokenizer over every byte plus multi-byte chunks that cut across
  words, tags and names ("</ans", "wer>", "inet 1"), so token boundaries fall mid-word (a
  stand-in for BPE without training one)."""
  pad_id = 0

  def __init__(self, chunks=("<answer>", "</ans", "wer>", "take ", "ta", "ke mug", " from ", "cab",
                             "inet 1", "inet", " 1", " 2", "go to ", "go", " to", "open ", "look",
                             "heat ", "mic", "rowave 1", " with ", "||", " |", "ex", "amine ", "  ")):
    self.pieces = [b""] + [bytes([i]) for i in range(256)] + [c.encode() for c in chunks]
    self.vocab_size = len(self.pieces)

  def encode(self, text):
    b, out, i = text.encode(), [], 0
    while i < len(b):
      best = max((j for j in range(257, self.vocab_size) if b.startswith(self.pieces[j], i)),
                 key=lambda j: len(self.pieces[j]), default=1 + b[i])
      out.append(best)
      i += len(self.pieces[best])
    return out

  def decode(self, ids):
    return b"".join(self.pieces[int(i)] for i in ids if 0 < int(i) < self.vocab_size).decode("utf-8", "replace")

  def byte_table(self):
    k = max(len(p) for p in self.pieces)
    table = np.zeros((self.vocab_size, k), np.uint8)
    for i, p in enumerate(self.pieces):
      table[i, :len(p)] = np.frombuffer(p, np.uint8)
    return table, np.asarray([len(p) for p in self.pieces], np.int32)
