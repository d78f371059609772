"""The jitted update: `train_step(state, minibatch) -> (state, metrics)`.

Pure function over the explicit TrainState pytree, jitted once per (shape, config) with the
state donated (`train.state.jit_step`). What it minimizes is a `loss_fn(params, mb, key) ->
(loss, metrics)`: for RL the configured objective (`agent_rl.objective.build_objective`) over
the policy's token statistics, for SFT the masked NLL.

Token conventions (EpisodeBatch, compacted): a token at position t is predicted by the
logits at t-1; `loss_mask[:, t]` marks policy-generated tokens; `logprobs[:, t]` is the
behaviour log-prob of token t.

`microbatches = k > 1` is gradient accumulation inside the step: the minibatch's rows are
split into k equal slices and the gradient of each slice's loss is taken in a `lax.scan` (one
slice's activations alive at a time). Each slice's loss aggregates with the whole minibatch's
loss-mask counts (`losses.Counts`, passed as `loss_fn(params, mb, key, counts=...)`), so the
slices' losses sum to the whole minibatch's and the sum of their gradients is its gradient:
the one optimizer update is the whole minibatch's, whatever the slices' token counts
(ALGORITHMS.md §1.10: global `batch_num_tokens`, verl 0.9.1). Windowed turn rows make the
slices' token counts unequal, so the mean of slice-local losses (older verl's
`ppo_micro_batch_size` convention) would reweight tokens toward short turns. The metrics are
the mean of the slices' own (slice-local) values.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import optax

from agent_rl import losses
from agent_rl.objective.minibatch import Minibatch  # noqa: F401 (the step's input type)
from agent_rl.parallel.rules import constrain
from agent_rl.train.state import TrainState


def make_train_step(loss_fn: Callable, optimizer: optax.GradientTransformation,
                    grad_metrics: Optional[Callable] = None, microbatches: int = 1) -> Callable:
  """`train_step(state, mb) -> (state, metrics)` (not yet jitted: the caller jits it with
  its shardings and `donate_argnums=0`). grad_metrics: optional `grads -> {name: scalar}`
  (per-agent gradient norms, agents.params.per_agent_norms). microbatches: k slices of the
  minibatch's rows whose gradients are summed into one update (`config.train.microbatches`;
  module docstring; `loss_fn` then takes `counts=`); k = 1 is the plain step."""
  if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
    raise ValueError(f"config.train.microbatches: must be an int >= 1, got {microbatches!r}")
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def grads_and_metrics(params, mb, key):
    if microbatches == 1:
      (_, metrics), grads = grad_fn(params, mb, key)
      return grads, metrics
    k = microbatches
    rows = jax.tree.leaves(mb)[0].shape[0]
    if rows % k:
      raise ValueError(f"config.train.microbatches: {k} does not divide the {rows} rows of a "
                       "minibatch")
    # [k, rows / k, ...]: each slice laid out over the data axes, as the minibatch was.
    slices = jax.tree.map(lambda x: constrain(x.reshape(k, rows // k, *x.shape[1:]),
                                              (None, "batch") + (None,) * (x.ndim - 1)), mb)

    # turn_index: the (row, turn) items reinforce / sorl average over (an SFT batch has none).
    counts = losses.mask_counts(mb.loss_mask, getattr(mb, "turn_index", None))

    def body(acc, xs):
      i, part = xs
      (_, m), g = grad_fn(params, part, jax.random.fold_in(key, i), counts=counts)
      return jax.tree.map(jnp.add, acc, g), m

    zeros = jax.tree.map(jnp.zeros_like, params)
    grads, ms = jax.lax.scan(body, zeros, (jnp.arange(k), slices))
    return grads, jax.tree.map(lambda m: jnp.mean(m, axis=0), ms)

  def train_step(state: TrainState, mb: Minibatch):
    key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    grads, metrics = grads_and_metrics(state.params, mb, key)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics["grad/norm"] = optax.global_norm(grads)
    if grad_metrics is not None:
      metrics.update(grad_metrics(grads))
    metrics["param/norm"] = optax.global_norm(params)
    return state.replace(params=params, opt_state=opt_state, step=state.step + 1), metrics

  return train_step
