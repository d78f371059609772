"""The jitted update: `train_step(state, minibatch) -> (state, metrics)`.

Pure function over the explicit TrainState pytree, jitted once per (shape, config) with the
state donated (`train.state.jit_step`). What it minimizes is a `loss_fn(params, mb, key) ->
(loss, metrics)`: for RL the configured objective (`agent_rl.objective.build_objective`) over
the policy's token statistics, for SFT the masked NLL.

Token conventions (EpisodeBatch, compacted): a token at position t is predicted by the
logits at t-1; `loss_mask[:, t]` marks policy-generated tokens; `logprobs[:, t]` is the
behaviour log-prob of token t.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import optax

from agent_rl.objective.minibatch import Minibatch  # noqa: F401 (the step's input type)
from agent_rl.train.state import TrainState


def make_train_step(loss_fn: Callable, optimizer: optax.GradientTransformation,
                    grad_metrics: Optional[Callable] = None) -> Callable:
  """`train_step(state, mb) -> (state, metrics)` (not yet jitted: the caller jits it with
  its shardings and `donate_argnums=0`). grad_metrics: optional `grads -> {name: scalar}`
  (per-agent gradient norms, agents.params.per_agent_norms)."""

  def train_step(state: TrainState, mb: Minibatch):
    key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, mb, key)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics["grad/norm"] = optax.global_norm(grads)
    if grad_metrics is not None:
      metrics.update(grad_metrics(grads))
    metrics["param/norm"] = optax.global_norm(params)
    return state.replace(params=params, opt_state=opt_state, step=state.step + 1), metrics

  return train_step
