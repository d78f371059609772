"""Action parsing: word actions of a generated turn (RAGEN's `<answer>Up || Left</answer>`).

`ActionParser(tokenizer, words, max_actions=...)(action: Text) -> Actions`. By default it
runs the rule compiled into a token automaton (token_parse.py: one table look-up per token,
~30x cheaper than the scanner) and keeps the byte scanner (byte_scan.py, `ActionParser.scan`)
for tables too large to build or a `max_bytes` shorter than the turn; both give identical
results.

Well-formed (valid) turn, exactly: the bytes contain `<answer>`, then later `</answer>`; the
content between the first `<answer>` and the first `</answer>` after it has at most
`max_answer_bytes` bytes; split on "||" (left to right, non-overlapping, like `bytes.split`),
the first `max_actions` segments (later ones are dropped, as RAGEN does) each equal an action
word after stripping ASCII whitespace, ignoring ASCII case. Anything else is invalid; nothing
ever raises in jitted code. Acts on one example; `vmap` it for batches.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
from flax import struct

from agent_rl.envs import token_parse
from agent_rl.envs.base import Digest, Text, TokenizerLike, digest
from agent_rl.envs.byte_scan import ByteTable, match_words, segment_windows, split_segments


@struct.dataclass
class Actions:
  """Parsed turn: `ids [A] int32` (-1 past `count`), `count` int32 to execute, `valid` bool."""
  ids: jax.Array
  count: jax.Array
  valid: jax.Array


class ActionParser(Digest):
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
    self._digest = digest(self.bytes._digest, self.words, self.word_ids, self.max_actions,
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
