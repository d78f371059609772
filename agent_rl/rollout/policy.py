"""The policy interface the rollout needs: four pure functions over `(graphdef, params)`.

`agent_rl.models` provides them for the Transformer (`Policy.from_model`); tests plug in
any model with the same signatures. Keeping them behind one small frozen record means the
episode loop never imports a model class and the same loop drives any decoder.

    init_cache(model_cfg, batch, max_len)                          -> cache
    prefill(graphdef, params, tokens, positions, valid, cache)     -> (logits [B,L,V], hidden, cache)
    decode_step(graphdef, params, tokens [B], positions [B], cache, valid=[B]) -> (logits [B,V], hidden, cache)
    forward(graphdef, params, tokens, positions, valid)            -> (logits [B,L,V], hidden)

A policy with `prefill_rows=True` also accepts `prefill(..., rows=[B])` and then returns only
each row's logits at block position `rows` (`[B, V]`): the episode loop only samples after
the last prompt / observation token, so the head (and, for the Transformer, the last layer's
MLP) runs on one position per row instead of all of them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional


@dataclasses.dataclass(frozen=True)
class Policy:
  graphdef: Any
  model_cfg: Any
  init_cache: Callable[..., Any]
  prefill: Callable[..., Any]
  decode_step: Callable[..., Any]
  forward: Callable[..., Any]
  prefill_rows: bool = False
  # Optional `(cache, turn) -> cache` for a policy whose state is more than its KV cache (the
  # scripted replay's turn counter): windowed history starts every turn from a fresh cache,
  # and this tells it which turn it is. None for models (a fresh KV cache is all they need).
  turn_cache: Optional[Callable[[Any, Any], Any]] = None
  # Optional `(params, agent [N] i32) -> routed params` for several agents' parameters
  # (agent_rl.agents): each turn the episode loop hands the policy functions the params routed
  # to the row's acting agent. None: one set of weights for every row (shared / single agent).
  route: Optional[Callable[[Any, Any], Any]] = None

  @classmethod
  def from_model(cls, model_cfg: Any, graphdef: Any) -> "Policy":
    """The `agent_rl.models` Transformer: `graphdef, params = nnx.split(model)`."""
    from agent_rl import models  # the models room is optional for host-only users
    return cls(graphdef=graphdef, model_cfg=model_cfg, init_cache=models.init_cache,
               prefill=models.prefill, decode_step=models.decode_step, forward=models.forward,
               prefill_rows=True)

  def cache(self, batch: int, max_len: int, turn: Any = None) -> Any:
    """A fresh cache; `turn` (int32 scalar): the turn it starts, for `turn_cache`."""
    cache = self.init_cache(self.model_cfg, batch, max_len)
    if turn is not None and self.turn_cache is not None:
      cache = self.turn_cache(cache, turn)
    return cache
