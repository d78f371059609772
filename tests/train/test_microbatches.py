"""`config.train.microbatches`: a train step's batch in k slices whose gradients are summed
into one update (train/step.py), each slice's loss aggregated with the whole minibatch's
counts: the whole minibatch's update for unequal token counts in every aggregation mode, for
the losses that keep their own counts (row or turn share), the SFT loss and DPO; checked against the
unsliced step and a plain loop over the slices; bad values refused by name. A whole run with
micro-batches and a critic: tests/train/test_buckets.py (its two runs)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agent_rl import losses
from agent_rl.models import ModelConfig
from agent_rl.objective import Minibatch, build_objective
from agent_rl.train.config import base_config, validate
from agent_rl.train.policy import ActorCritic, make_apply
from agent_rl.train.sft import make_sft_loss
from agent_rl.train.step import TrainState, make_train_step
from tests.train.tiny import tiny_config

CFG = ModelConfig(vocab_size=50, hidden=16, num_layers=1, num_heads=2, num_kv_heads=1,
                  head_dim=8, intermediate=32)
UNEQUAL = [3, 7, 1, 5, 9, 2, 0, 4]  # loss tokens per row: unequal slices on purpose, one empty


def _setup(mask_counts, l=12, **loss_cfg):
  """A step factory, its loss, rows whose row i has mask_counts[i] loss tokens (at its end),
  and a fresh state. loss_cfg: config.loss overrides (agg_mode, name, terms, ...)."""
  graphdef, params = nnx.split(ActorCritic(CFG, logprob_chunk=16, rngs=nnx.Rngs(0)))
  opt = optax.sgd(0.5)
  c = base_config()
  c.loss.update(loss_cfg)
  apply_fn, objective = make_apply(graphdef), build_objective(c)
  def loss(p, mb, k, counts=None):
    return objective(apply_fn(p, mb.tokens, mb.position, mb.attention_mask), mb, k,
                     counts=counts)
  r = len(mask_counts)
  rng = np.random.default_rng(0)
  f = lambda x: jnp.asarray(x, jnp.float32)
  mask = np.arange(l)[None, :] >= l - np.asarray(mask_counts)[:, None]
  rows = Minibatch(tokens=jnp.asarray(rng.integers(0, 50, (r, l)), jnp.int32),
                   position=jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (r, l)),
                   attention_mask=jnp.ones((r, l), bool), loss_mask=f(mask),
                   turn_index=jnp.where(mask, 0, -1).astype(jnp.int32),
                   old_logprobs=f(-3.9 + 0.1 * rng.standard_normal((r, l))),
                   advantages=f(rng.standard_normal((r, l))),
                   ref_logprobs=f(-3.9 + 0.1 * rng.standard_normal((r, l))))
  state = TrainState(params=params, opt_state=opt.init(params), step=jnp.zeros((), jnp.int32),
                     rng=jnp.zeros((2,), jnp.uint32))
  return (lambda k, fn=loss: jax.jit(make_train_step(fn, opt, microbatches=k))), loss, opt, \
      rows, state


def _close(a, b, atol=2e-6):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-5)


def _max_gap(a, b):
  return max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("mode", list(losses.AGG_MODES))
def test_microbatched_step_is_the_whole_minibatch_update(mode):
  make, _, _, rows, state = _setup(UNEQUAL, agg_mode=mode, kl_coef=0.1, entropy_coef=0.01)
  whole, wm = make(1)(state, rows)
  got, gm = make(4)(state, rows)
  _close(got.params, whole.params)
  assert int(got.step) == 1  # one optimizer update, not k
  np.testing.assert_allclose(float(gm["grad/norm"]), float(wm["grad/norm"]), rtol=1e-5)


def test_microbatched_step_is_a_loop_over_slices_with_the_minibatch_counts():
  """Reference: a Python loop over 4 slices, each slice's loss with the whole minibatch's
  counts (a plain count of the mask), the gradients summed, one SGD update."""
  make, loss, opt, rows, state = _setup(UNEQUAL)
  key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
  m = np.asarray(rows.loss_mask)
  counts = losses.Counts(num_tokens=jnp.float32(m.sum()),
                         num_seqs=jnp.int32((m.sum(1) > 0).sum()), num_rows=len(m))
  grad = jax.jit(jax.grad(lambda p, part, k: loss(p, part, k, counts=counts)[0]))
  grads = [grad(state.params, jax.tree.map(lambda x: x[2 * i:2 * i + 2], rows),
                jax.random.fold_in(key, i)) for i in range(4)]
  upd, _ = opt.update(jax.tree.map(lambda *g: sum(g), *grads), state.opt_state, state.params)
  _close(make(4)(state, rows)[0].params, optax.apply_updates(state.params, upd))


def test_the_slice_local_mean_would_have_reweighted_the_tokens():
  """What the counts fix: the older convention (each slice's own token-mean, gradients
  averaged) moves the parameters elsewhere when the slices' token counts differ."""
  make, loss, _, rows, state = _setup(UNEQUAL)
  local = lambda p, mb, k, counts=None: loss(p, mb, k)  # ignores the minibatch's counts
  whole, _ = make(1)(state, rows)
  summed, _ = make(4, local)(state, rows)  # the slices' own means, summed: k x too large
  assert _max_gap(whole.params, summed.params) > 1e-4


@pytest.mark.parametrize("turns", [1, 2])
@pytest.mark.parametrize("name", ["geo_mean", "reinforce", "sorl"])
def test_losses_with_their_own_counts_are_weighted_by_their_share(name, turns):
  """geo_mean averages over all rows (empty ones too): the row share makes the sliced update
  exact; reinforce / sorl average over (row, turn) items, one a row (windowed history) or
  two (concatenated: a row's loss tokens split into turns 0 and 1; the slices then hold 4, 3,
  4 and 2 of the 13 items for 2, 2, 2 and 1 non-empty rows, so a share of rows would be off):
  the share of the items does (sorl's clip-fraction norm is a slice's own statistic, off here)."""
  kw = {"kwargs": {"clip_norm": "none"}} if name == "sorl" else {}
  make, _, _, rows, state = _setup(UNEQUAL, name=name, **kw)
  if turns == 2:  # the second half of each row's loss tokens is turn 1
    m = np.asarray(rows.loss_mask) > 0
    second = np.cumsum(m, axis=1) > np.ceil(m.sum(1, keepdims=True) / 2)
    rows = rows._replace(turn_index=jnp.asarray(np.where(m, second.astype(np.int32), -1)))
    assert int(losses.mask_counts(rows.loss_mask, rows.turn_index).num_turns) == 13
  whole, _ = make(1)(state, rows)
  _close(make(4)(state, rows)[0].params, whole.params)


def test_mask_counts_turns_against_a_plain_count():
  rng = np.random.default_rng(3)
  mask = rng.random((6, 10)) < 0.4
  turn = rng.integers(-1, 3, (6, 10))
  want = len({(i, int(turn[i, j])) for i, j in zip(*np.nonzero(mask)) if turn[i, j] >= 0})
  c = losses.mask_counts(jnp.asarray(mask), jnp.asarray(turn, jnp.int32))
  assert int(c.num_turns) == want
  assert int(c.num_seqs) == int((mask.sum(1) > 0).sum()) and float(c.num_tokens) == mask.sum()
  assert int(losses.mask_counts(jnp.asarray(mask)).num_turns) == int(c.num_seqs)


def test_sft_and_dpo_slices_sum_to_the_whole_batch():
  make, _, _, rows, state = _setup(UNEQUAL, terms="dpo", term_kwargs={"dpo": 1.0})
  _close(make(2)(state, rows)[0].params, make(1)(state, rows)[0].params)
  graphdef, _ = nnx.split(ActorCritic(CFG, logprob_chunk=16, rngs=nnx.Rngs(0)))
  sft = make_sft_loss(make_apply(graphdef))
  whole, wm = make(1, sft)(state, rows)
  got, gm = make(4, sft)(state, rows)
  _close(got.params, whole.params)
  # metrics are the slices' own: their mean, not the batch's token mean
  assert float(gm["sft/num_tokens"]) == pytest.approx(float(wm["sft/num_tokens"]) / 4)


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
