"""Teacher-forced episodes: replay expert plans through the *same* compiled episode loop
the RL rollout uses, so SFT sequences are byte-identical in layout to RL sequences.

`scripted_policy(vocab)` is a `rollout.Policy` whose "parameters" are the forced action
tokens `[N, T, A]`: every prefill starts the next turn's script and every decode step
advances it, emitting logits that put all mass on the scripted token. Run with a greedy
sampler, the episode loop then writes prompts, observations (from the real env dynamics)
and actions exactly as in RL, with `loss_mask` on the action tokens: the SFT targets.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.rollout.policy import Policy


@dataclasses.dataclass(frozen=True)
class _Vocab:
  vocab_size: int


def _onehot_logits(tok: jax.Array, vocab: int) -> jax.Array:
  return jnp.where(jnp.arange(vocab)[None, :] == tok[:, None], 0.0, -1e9).astype(jnp.float32)


@functools.lru_cache(maxsize=8)
def scripted_policy(vocab_size: int) -> Policy:
  """A Policy replaying `params = forced [N, T, A] int32` (one row of tokens per turn)."""

  def init_cache(cfg, batch, max_len):
    del cfg, max_len
    return dict(turn=jnp.full((batch,), -1, jnp.int32), j=jnp.zeros((batch,), jnp.int32))

  def _next(forced, cache):
    t = jnp.clip(cache["turn"], 0, forced.shape[1] - 1)
    j = jnp.clip(cache["j"], 0, forced.shape[2] - 1)
    return forced[jnp.arange(forced.shape[0]), t, j]

  def prefill(graphdef, forced, tokens, positions, valid, cache):
    del graphdef, tokens, positions
    started = jnp.any(valid, axis=1)
    cache = dict(turn=cache["turn"] + started, j=jnp.where(started, 0, cache["j"]))
    logits = _onehot_logits(_next(forced, cache), vocab_size)
    return jnp.broadcast_to(logits[:, None], valid.shape + (vocab_size,)), None, cache

  def decode_step(graphdef, forced, tokens, positions, cache, valid=None):
    del graphdef, tokens, positions
    live = jnp.ones(cache["j"].shape, bool) if valid is None else valid
    cache = dict(turn=cache["turn"], j=cache["j"] + live)
    return _onehot_logits(_next(forced, cache), vocab_size), None, cache

  def turn_cache(cache, turn):
    # Windowed history prefills a fresh cache each turn: without this every turn would
    # replay turn 0's script (the next prefill adds 1 to the counter).
    return dict(turn=jnp.full_like(cache["turn"], turn - 1), j=cache["j"])

  def forward(*args, **kwargs):
    raise TypeError("the scripted policy only replays plans; it has no training forward")

  return Policy(graphdef=None, model_cfg=_Vocab(vocab_size), init_cache=init_cache,
                prefill=prefill, decode_step=decode_step, forward=forward,
                turn_cache=turn_cache)


def encode_plans(tokenizer, plans: Sequence[Sequence[str]], num_turns: int, max_tokens: int,
                 *, fmt: str = "<answer>{}</answer>") -> np.ndarray:
  """Expert action strings -> forced tokens `[N, T, A]` int32, each turn ending in <|im_end|>.

  A plan longer than `num_turns` is cut (the episode is truncated like an RL episode);
  a turn whose text does not fit `max_tokens` raises, naming the text. `fmt="{}"` takes
  preformatted turn texts (e.g. SPA world-model turns, `agent_rl.data.world_model`).
  """
  from agent_rl.tokenizers.chat import turn_end_id
  end = turn_end_id(tokenizer)
  out = np.full((len(plans), num_turns, max_tokens), end, np.int32)
  for i, plan in enumerate(plans):
    for t, action in enumerate(list(plan)[:num_turns]):
      ids = tokenizer.encode(fmt.format(action)) + [end]
      if len(ids) > max_tokens:
        raise ValueError(f"expert turn {fmt.format(action)!r} is {len(ids)} tokens with "
                         f"<|im_end|>; config.rollout.max_action_tokens={max_tokens} is too small")
      out[i, t, :len(ids)] = ids
  return out
