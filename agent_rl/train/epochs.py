"""Epochs x minibatches of the RL update as one `lax.scan` inside one jit (purejaxrl's
`_update_epoch`), a drop-in for the Python loop of `agent_rl.train.learner.update`.

Same permutations as the loop (`jax.random.permutation(fold_in(key, e), R)` per epoch), so
the same minibatches in the same order and the same updates; the metrics are the mean over
all steps, as the loop's. One jit replaces epochs x minibatches dispatches of the step plus
their gathers: `benchmarks/learner_scan.py` measured 2.5x on the tiny learner's update (see
its JSON for the medium model), where per-step dispatch dominates.

    update = make_scan_update(train_step, epochs=2, minibatch_rows=4)   # train_step un-jitted
    update = jax.jit(update, donate_argnums=0, in_shardings=..., out_shardings=...)
    state, metrics = update(state, rows, key)
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from agent_rl.parallel.rules import constrain


def minibatch_indices(key: jax.Array, rows: int, *, epochs: int, minibatch_rows: int
                      ) -> jax.Array:
  """[epochs * rows / mb, mb] int32 row indices: epoch e's permutation split in minibatches."""
  mb = min(minibatch_rows, rows)
  if rows % mb:
    raise ValueError(f"config.train.minibatch_episodes: {mb} rows must divide the {rows} rows "
                     "of a rollout")
  perms = jnp.stack([jax.random.permutation(jax.random.fold_in(key, e), rows)
                     for e in range(epochs)])  # [epochs, R]
  return perms.reshape(epochs * (rows // mb), mb)


def make_scan_update(train_step: Callable, *, epochs: int, minibatch_rows: int) -> Callable:
  """`update(state, rows, key) -> (state, mean metrics)` over `rows` ([R, ...] leaves).

  train_step: `(state, minibatch) -> (state, metrics)`, not jitted (it is traced into the
  scan body). epochs, minibatch_rows: as `learner.update`'s.
  """
  if not isinstance(epochs, int) or epochs < 1:
    raise ValueError(f"config.train.epochs: must be a positive int, got {epochs!r}")

  def update(state: Any, rows: Any, key: jax.Array):
    r = jax.tree.leaves(rows)[0].shape[0]
    idx = minibatch_indices(key, r, epochs=epochs, minibatch_rows=minibatch_rows)
    # [steps, mb, ...]: each step's minibatch rows laid out over the data axes, as `place`.
    batches = jax.tree.map(
        lambda x: constrain(x[idx], (None, "batch") + (None,) * (x.ndim - 1)), rows)
    state, metrics = jax.lax.scan(train_step, state, batches)
    return state, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)

  return update
