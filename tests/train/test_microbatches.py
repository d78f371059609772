"""`config.train.microbatches`: a train step's batch in k slices whose gradients are averaged
into one update (train/step.py), checked against a plain loop over the slices; the whole
minibatch's update when the slices hold equal token counts; bad values refused by name. A
whole run with micro-batches and a critic: tests/train/test_buckets.py (its two runs)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agent_rl.models import ModelConfig
from agent_rl.objective import Minibatch, build_objective
from agent_rl.train.config import base_config, validate
from agent_rl.train.policy import ActorCritic, make_apply
from agent_rl.train.step import TrainState, make_train_step
from tests.train.tiny import tiny_config

CFG = ModelConfig(vocab_size=50, hidden=16, num_layers=1, num_heads=2, num_kv_heads=1,
                  head_dim=8, intermediate=32)


def _setup(mask_counts, l=12):
  """A step factory, rows whose row i has mask_counts[i] loss tokens, and a fresh state."""
  graphdef, params = nnx.split(ActorCritic(CFG, logprob_chunk=16, rngs=nnx.Rngs(0)))
  opt = optax.sgd(0.5)
  apply_fn, objective = make_apply(graphdef), build_objective(base_config())
  loss = lambda p, mb, k: objective(apply_fn(p, mb.tokens, mb.position, mb.attention_mask), mb, k)
  r = len(mask_counts)
  rng = np.random.default_rng(0)
  f = lambda x: jnp.asarray(x, jnp.float32)
  mask = np.arange(l)[None, :] >= l - np.asarray(mask_counts)[:, None]
  rows = Minibatch(tokens=jnp.asarray(rng.integers(0, 50, (r, l)), jnp.int32),
                   position=jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (r, l)),
                   attention_mask=jnp.ones((r, l), bool), loss_mask=f(mask),
                   turn_index=jnp.zeros((r, l), jnp.int32),
                   old_logprobs=f(-3.9 + 0.1 * rng.standard_normal((r, l))),
                   advantages=f(rng.standard_normal((r, l))))
  state = TrainState(params=params, opt_state=opt.init(params), step=jnp.zeros((), jnp.int32),
                     rng=jnp.zeros((2,), jnp.uint32))
  return (lambda k: jax.jit(make_train_step(loss, opt, microbatches=k))), loss, opt, rows, state


def test_microbatched_step_is_the_mean_of_the_slices_gradients():
  make, loss, opt, rows, state = _setup([3, 7, 1, 5, 9, 2])  # unequal slices on purpose
  got, metrics = make(3)(state, rows)
  # reference: a Python loop over the 3 slices, the mean gradient, one SGD update
  key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
  grads = []
  for i in range(3):
    part = jax.tree.map(lambda x: x[2 * i:2 * i + 2], rows)
    grads.append(jax.grad(lambda p: loss(p, part, jax.random.fold_in(key, i))[0])(state.params))
  mean = jax.tree.map(lambda *g: sum(g) / 3, *grads)
  upd, _ = opt.update(mean, state.opt_state, state.params)
  want = optax.apply_updates(state.params, upd)
  for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-5)
  assert int(got.step) == 1  # one optimizer update, not three
  np.testing.assert_allclose(float(metrics["grad/norm"]), float(optax.global_norm(mean)),
                             rtol=1e-5)
  # unequal token counts: the mean of slice losses is not the whole-minibatch token-mean
  whole, _ = make(1)(state, rows)
  assert max(float(jnp.abs(a - b).max()) for a, b in
             zip(jax.tree.leaves(whole.params), jax.tree.leaves(got.params))) > 1e-5


def test_equal_token_slices_give_the_whole_minibatch_update():
  make, _, _, rows, state = _setup([4, 4, 4, 4])
  whole, _ = make(1)(state, rows)
  sliced, _ = make(2)(state, rows)
  for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(sliced.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=1e-5)


def test_bad_microbatches_are_refused_naming_the_field():
  for bad in (0, 2.0, True):
    with pytest.raises(ValueError, match="config.train.microbatches"):
      make_train_step(lambda p, mb, k: (0.0, {}), optax.sgd(0.1), microbatches=bad)
  c = tiny_config()
  c.train.minibatch_episodes, c.train.microbatches = 4, 3
  with pytest.raises(ValueError, match=r"config.train.microbatches: 3 must be an int >= 1 "
                                       r"dividing a minibatch's 4 rows \(train.minibatch_episodes\)"):
    validate(c)
  # Windowed rows are turns: a minibatch of 4 episodes x 5 turns slices into 20, 10, 4, ...
  w = tiny_config()
  w.rollout.history, w.rollout.max_turns, w.train.minibatch_episodes = "windowed", 5, 4
  for ok in (20, 10, 5):
    w.train.microbatches = ok
    validate(w)
  w.train.microbatches = 8
  with pytest.raises(ValueError, match=r"dividing a minibatch's 20 rows \(train.minibatch_episodes "
                                       r"x rollout.max_turns"):
    validate(w)
  c.train.microbatches, c.sft.steps, c.sft.batch_size = 2, 2, 3
  with pytest.raises(ValueError, match=r"config.train.microbatches: 2 must divide sft.batch_size"):
    validate(c)
