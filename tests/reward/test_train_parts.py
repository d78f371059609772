"""The reward-model run's pieces: its losses equal Bradley-Terry / BCE (NumPy) on the scoring
pass's scores, minibatches are a pure function of the step, and chunked held-out scoring
(padded last chunk) equals scoring all rows at once."""
import jax
import numpy as np
from flax import nnx

from agent_rl.parallel.mesh import make_mesh
from agent_rl.parallel.placement import Placement
from agent_rl.reward import data as rdata
from agent_rl.reward.model import score_rows
from agent_rl.reward.train import RMData, held_out_scores, make_loss, minibatch
from tests.reward.test_model import _batch, _model


def _rows(batch):
  return rdata.Rows(*(np.asarray(x) for x in (batch.tokens, batch.position, batch.attention_mask,
                                              batch.turn_index)))


def _ls(x):
  return -np.logaddexp(0.0, -x)


def test_losses_equal_numpy_on_the_scores():
  model = _model()
  g, p = nnx.split(model)
  batch = _batch(n=4, t=3)
  rows = _rows(batch)
  s = score_rows(g, p, rows.tokens, rows.position, rows.attention_mask, rows.turn_index, 3)
  out, turns = np.asarray(s.outcome, np.float64), np.asarray(s.turns, np.float64)
  loss, m = make_loss(g, "outcome", 3, 0, 0.0)(p, rows, None)
  want = np.mean(-_ls(out[0::2] - out[1::2]))
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  labels = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 0]], np.float32)
  mask = np.asarray(batch.valid, np.float32)
  from agent_rl.reward.train import PRMBatch
  loss, _ = make_loss(g, "process", 3, 0, 0.0)(p, PRMBatch(rows, labels, mask), None)
  bce = -(labels * _ls(turns) + (1 - labels) * _ls(-turns))
  np.testing.assert_allclose(float(loss), (bce * mask).sum() / mask.sum(), rtol=1e-5)


def _data(n=6):
  rows = rdata.Rows(*(np.arange(n * 4).reshape(n, 4) + k for k in range(4)))
  pairs = np.array([[0, 1], [2, 3], [4, 5], [1, 0], [3, 2]])
  z = np.zeros((n, 2), np.float32)
  return RMData(rows, pairs, z, z + 1, rows, pairs, z, z)


def test_minibatch_is_a_pure_function_of_the_step():
  d = _data()
  a, b = minibatch(d, "outcome", 3, 7, 0), minibatch(d, "outcome", 3, 7, 0)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  assert a.tokens.shape == (6, 4)
  # Within an epoch (5 pairs, 1 a step) every pair is drawn exactly once.
  seen = [tuple(minibatch(d, "outcome", 1, s, 0).tokens[:, 0]) for s in range(5)]
  assert len(set(seen)) == 5
  pb = minibatch(d, "process", 4, 0, 0)
  assert pb.rows.tokens.shape == (4, 4) and pb.labels.shape == (4, 2)


def test_chunked_held_out_scoring_equals_one_pass():
  model = _model()
  g, p = nnx.split(model)
  rows = _rows(_batch(n=6, t=3, seed=5))
  place = Placement(make_mesh((1, 1, 1), ("data", "fsdp", "tensor"), devices=jax.devices()[:1]))
  fn = jax.jit(lambda r: score_rows(g, p, r.tokens, r.position, r.attention_mask, r.turn_index, 3))
  got = held_out_scores(fn, place, rows, chunk=4)  # 4 + 2 (padded to 4)
  want = fn(rows)
  np.testing.assert_allclose(got.outcome, np.asarray(want.outcome), atol=1e-6)
  np.testing.assert_allclose(got.turns, np.asarray(want.turns), atol=1e-6)
