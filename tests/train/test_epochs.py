"""The scanned epochs x minibatches update equals a plain Python loop over the same minibatches
(the loop the run used before the scan measured faster: benchmarks/learner_scan.py)."""
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agent_rl.models import ModelConfig
from agent_rl.objective import Minibatch, build_objective
from agent_rl.train.config import base_config
from agent_rl.train.epochs import make_scan_update, minibatch_indices
from agent_rl.train.policy import ActorCritic, make_apply
from agent_rl.train.step import TrainState, make_train_step

CFG = ModelConfig(vocab_size=50, hidden=16, num_layers=1, num_heads=2, num_kv_heads=1,
                  head_dim=8, intermediate=32)


def _setup(r=8, l=12):
  graphdef, params = nnx.split(ActorCritic(CFG, logprob_chunk=16, rngs=nnx.Rngs(0)))
  opt = optax.sgd(0.1)  # Adam would amplify float noise of near-zero gradients to ~lr
  apply_fn, objective = make_apply(graphdef), build_objective(base_config())
  step = make_train_step(lambda p, mb, k: objective(
      apply_fn(p, mb.tokens, mb.position, mb.attention_mask), mb, k), opt)
  rng = np.random.default_rng(0)
  f = lambda x: jnp.asarray(x, jnp.float32)
  rows = Minibatch(tokens=jnp.asarray(rng.integers(0, 50, (r, l)), jnp.int32),
                   position=jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (r, l)),
                   attention_mask=jnp.ones((r, l), bool), loss_mask=f(rng.random((r, l)) < 0.6),
                   turn_index=jnp.zeros((r, l), jnp.int32),
                   old_logprobs=f(-3.9 + 0.1 * rng.standard_normal((r, l))),
                   advantages=f(rng.standard_normal((r, l))))
  state = lambda: TrainState(params=jax.tree.map(jnp.copy, params), opt_state=opt.init(params),
                             step=jnp.zeros((), jnp.int32), rng=jnp.zeros((2,), jnp.uint32))
  return step, rows, state


def update(  # the reference loop
    train_step: Callable, state: Any, rows: Minibatch, key: jax.Array, *, epochs: int,
           minibatch_rows: int, place: Callable = lambda x: x) -> tuple[Any, dict]:
  """`epochs` shuffled passes over `rows` in minibatches; returns state and mean metrics.
  `place` lays each minibatch out on the mesh (row-sharded) before the jitted step."""
  r = rows.tokens.shape[0]
  mb = min(minibatch_rows, r)
  if r % mb:
    raise ValueError(f"config.train.minibatch_episodes: {mb} rows must divide the {r} rows "
                     "of a rollout")
  sums: dict = {}
  count = 0
  for e in range(epochs):
    perm = jax.random.permutation(jax.random.fold_in(key, e), r)
    for i in range(r // mb):
      idx = perm[i * mb:(i + 1) * mb]
      part = place(jax.tree.map(lambda x: x[idx], rows))
      state, m = train_step(state, part)
      sums = m if not sums else jax.tree.map(jnp.add, sums, m)
      count += 1
  return state, {k: v / count for k, v in sums.items()}


def test_scan_update_matches_python_loop():
  step, rows, state = _setup()
  key = jax.random.key(3)
  want_state, want_m = update(jax.jit(step), state(), rows, key, epochs=2, minibatch_rows=2)
  got_state, got_m = jax.jit(make_scan_update(step, epochs=2, minibatch_rows=2))(
      state(), rows, key)
  assert int(got_state.step) == int(want_state.step) == 8
  for a, b in zip(jax.tree.leaves(got_state.params), jax.tree.leaves(want_state.params)):
    np.testing.assert_allclose(a, b, atol=1e-5)
  assert set(got_m) == set(want_m)
  for k in want_m:
    np.testing.assert_allclose(got_m[k], want_m[k], atol=1e-5, rtol=1e-5, err_msg=k)


def test_minibatch_indices_are_the_loops_permutations():
  key = jax.random.key(1)
  idx = np.asarray(minibatch_indices(key, 6, epochs=2, minibatch_rows=3))
  assert idx.shape == (4, 3)
  for e in range(2):
    perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, e), 6))
    np.testing.assert_array_equal(idx[2 * e:2 * e + 2].reshape(-1), perm)
  with pytest.raises(ValueError, match="minibatch_episodes"):
    minibatch_indices(key, 6, epochs=1, minibatch_rows=4)
  with pytest.raises(ValueError, match="epochs"):
    make_scan_update(lambda s, m: (s, {}), epochs=0, minibatch_rows=2)


@pytest.mark.parametrize("history,turns", [("concatenated", 1), ("windowed", 5)])
def test_updates_per_iteration_count_the_scans_steps(history, turns):
  """The schedule's horizon (`run.updates_per_iteration`) is the number of steps the scan
  takes: windowed rows are episodes x turns and so is a minibatch, so turns cancel."""
  from agent_rl.train.run import updates_per_iteration
  c = base_config()
  c.rollout.history, c.rollout.max_turns = history, turns
  c.rollout.num_tasks, c.rollout.group_size, c.train.minibatch_episodes = 4, 8, 8
  c.train.epochs = 2
  rows, mb_rows = 4 * 8 * turns, 8 * turns  # as build_run's minibatch_rows
  idx = minibatch_indices(jax.random.key(0), rows, epochs=2, minibatch_rows=mb_rows)
  assert updates_per_iteration(c) == idx.shape[0] == 8
