"""`config.train.length_bucket` (train/buckets.py): the learner's rows cut after their longest
filled token. Checked against plain Python loops (the cut length), against the update on the
whole rows (same parameters after an iteration's epochs x minibatches, for each loss
aggregation: seq-mean-token-sum-norm keeps its constant C), and through a whole run (SFT and
RL steps on cut rows, the same losses as the uncut run)."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agent_rl.models import ModelConfig
from agent_rl.objective import Minibatch, build_objective
from agent_rl.train import buckets
from agent_rl.train.config import base_config, validate
from agent_rl.train.epochs import make_scan_update
from agent_rl.train.policy import ActorCritic, make_apply
from agent_rl.train.step import TrainState, make_train_step
from tests.train.tiny import tiny_config

CFG = ModelConfig(vocab_size=50, hidden=16, num_layers=2, num_heads=2, num_kv_heads=1,
                  head_dim=8, intermediate=32)


def _rows(lengths, full, seed=0):
  """Rows of `full` slots, row i filled to lengths[i] (then padding), its last half trained."""
  rng = np.random.default_rng(seed)
  r = len(lengths)
  slot = np.arange(full)[None, :]
  n = np.asarray(lengths)[:, None]
  attn = slot < n
  loss = attn & (slot >= n // 2)
  f = lambda x: jnp.asarray(x, jnp.float32)
  tok = np.where(attn, rng.integers(1, 50, (r, full)), 0)
  return Minibatch(tokens=jnp.asarray(tok, jnp.int32),
                   position=jnp.asarray(np.where(attn, slot, 0), jnp.int32),
                   attention_mask=jnp.asarray(attn), loss_mask=f(loss),
                   turn_index=jnp.asarray(np.where(loss, 0, -1), jnp.int32),
                   old_logprobs=f(np.where(loss, -3.9 + 0.1 * rng.standard_normal((r, full)), 0)),
                   advantages=f(np.where(loss, rng.standard_normal((r, 1)), 0)),
                   ref_logprobs=f(np.where(loss, -3.9 + 0.1 * rng.standard_normal((r, full)), 0)),
                   agent=jnp.zeros((r,), jnp.int32))


def test_cut_length_matches_a_python_loop():
  lengths, full = [5, 17, 9, 0], 40
  rows = _rows(lengths, full)
  want = max(max((t + 1 for t in range(full) if bool(rows.attention_mask[i, t])), default=0)
             for i in range(len(lengths)))
  assert int(buckets.filled_length(rows.attention_mask, rows.loss_mask)) == want == 17
  for bucket, expect in ((8, 24), (16, 32), (17, 17), (64, 40), (0, 40), (1, 17)):
    got, full_len = buckets.cut(rows, bucket)
    assert (got.tokens.shape[1], full_len) == (expect, full), bucket
    assert got.agent.shape == (4,)  # per-row leaves pass through
    np.testing.assert_array_equal(np.asarray(got.loss_mask),
                                  np.asarray(rows.loss_mask)[:, :expect])
  # a loss token outside the attention mask still counts as filled (nothing trained is cut)
  lm = np.zeros((2, 30), np.float32)
  lm[1, 20] = 1
  assert int(buckets.filled_length(jnp.zeros((2, 30), bool), jnp.asarray(lm))) == 21
  assert buckets.bucket_length(0, 30, 8) == 8  # an empty batch still has one bucket


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                 "seq-mean-token-sum-norm"])
def test_update_on_cut_rows_equals_the_update_on_whole_rows(agg):
  c = base_config()
  c.loss.agg_mode, c.loss.kl_coef, c.loss.entropy_coef = agg, 0.1, 0.01
  c.loss.terms = "policy,entropy,kl"
  graphdef, params = nnx.split(ActorCritic(CFG, logprob_chunk=16, rngs=nnx.Rngs(0)))
  apply_fn, objective = make_apply(graphdef), build_objective(c)
  # SGD: Adam would scale the k-bias's gradient (0 in exact arithmetic: a constant shift of
  # a query's scores; float noise here) to a full-size step, hiding the comparison.
  opt = optax.sgd(0.05)

  def update(rows, row_length):
    loss = lambda p, mb, k: objective(apply_fn(p, mb.tokens, mb.position, mb.attention_mask),
                                      mb, k, row_length)
    step = make_train_step(loss, opt)
    state = TrainState(params=params, opt_state=opt.init(params),
                       step=jnp.zeros((), jnp.int32), rng=jnp.zeros((2,), jnp.uint32))
    return jax.jit(make_scan_update(step, epochs=2, minibatch_rows=2))(
        state, rows, jax.random.key(3))

  rows = _rows([6, 21, 13, 9], full=64)
  whole, m_whole = update(rows, None)
  cut, full = buckets.cut(rows, 8)
  assert cut.tokens.shape[1] == 24
  trimmed, m_cut = update(cut, full)
  for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(trimmed.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=1e-5)
  for k in ("loss/total", "loss/policy", "loss/kl_ref", "loss/entropy", "grad/norm"):
    np.testing.assert_allclose(float(m_whole[k]), float(m_cut[k]), rtol=1e-5, atol=1e-7)
  if agg == "seq-mean-token-sum-norm":  # without the full length, C would be the cut's 24
    kl = lambda mb, n: objective(apply_fn(params, mb.tokens, mb.position, mb.attention_mask),
                                 mb, jax.random.key(0), n)[1]["loss/kl_ref"]
    np.testing.assert_allclose(float(kl(cut, None)), float(kl(rows, None)) * 64 / 24,
                               rtol=1e-5)
    np.testing.assert_allclose(float(kl(cut, 64)), float(kl(rows, None)), rtol=1e-5)


@pytest.mark.parametrize("segment_len", [0, 16])
def test_scoring_rows_are_cut_and_restored_to_the_batch_layout(segment_len):
  """The rollout-time passes (critic values, reference / teacher log-probs) read
  `learner._rows(batch, length)`: windowed batches `[N, T * W]` as `[N * T, W]` rows, cut to
  `buckets.batch_length`, and their `[R, length]` result back in `[N, L]` with 0 after it."""
  import types
  from agent_rl.train.learner import _rows
  rng = np.random.default_rng(1)
  n, width = 3, 16
  segs = 2 if segment_len else 1
  filled = rng.integers(1, 10, (n * segs,))  # every row filled to at most 9 slots
  attn = (np.arange(width)[None, :] < filled[:, None]).reshape(n, segs * width)
  tok = jnp.asarray(rng.integers(1, 50, attn.shape), jnp.int32)
  batch = types.SimpleNamespace(tokens=tok, position=tok * 0, attention_mask=jnp.asarray(attn),
                                segment_len=segment_len)
  length = buckets.batch_length(batch, 4)
  assert length == 4 * -(-int(filled.max()) // 4) < width
  t, _, a, restore = _rows(batch, length)
  assert t.shape == (n * segs, length)
  np.testing.assert_array_equal(np.asarray(t), np.asarray(tok).reshape(n * segs, width)[:, :length])
  y = restore(jnp.asarray(t, jnp.float32))   # e.g. values of each slot: here the token ids
  np.testing.assert_array_equal(np.asarray(y), np.where(attn, np.asarray(tok), 0))
  assert buckets.batch_length(batch, 0) is None and buckets.batch_length(batch, 16) is None


def test_bad_length_bucket_is_refused_naming_the_field():
  for bad in (-1, True):  # ConfigDict's types refuse 2.5 and "256" on assignment already
    c = tiny_config()
    c.train.length_bucket = bad
    with pytest.raises(ValueError, match="train.length_bucket"):
      validate(c)


def _metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


# 2026-12-06 budget cut (70-139 s): the update's and the scoring passes' cuts are the unit
# tests above, a cut run's SFT and RL run in CI in tests/train/test_multiprocess.py
# (length_bucket=8), and the critic pre-fit on cut rows in tests/train/test_critic_prefit.py.
@pytest.mark.slow
def test_a_run_with_length_buckets_trains_on_cut_rows_with_the_same_losses(tmp_path, capsys):
  """PPO with a critic and a KL reference: the SFT steps, the scoring passes (critic values,
  reference log-probs) and the update all run on cut rows. Both runs also split each step in 2
  micro-batches and the scoring passes in 2 slices (the run wiring of `train.microbatches`,
  tests/train/test_microbatches.py), and pre-fit the critic on cut rows (`train.critic_prefit`)."""
  from agent_rl.train.run import run
  out = {}
  for bucket in (0, 8):
    c = tiny_config(iterations=1, sft_steps=2, credit="gae", critic="shared")
    c.loss.kl_coef = 0.05
    c.train.minibatch_episodes, c.train.microbatches = 4, 2
    c.train.length_bucket, c.train.critic_prefit = bucket, 1
    c.train.eval_every = 100  # the final evaluation only
    run(c, str(tmp_path / f"b{bucket}"))
    out[bucket] = _metrics(str(tmp_path / f"b{bucket}"))
  sft = {b: [m["sft/loss"] for m in ms if "sft/loss" in m] for b, ms in out.items()}
  rl = {b: [m for m in ms if "train/row_length" in m] for b, ms in out.items()}
  np.testing.assert_allclose(sft[8], sft[0], rtol=1e-5)
  assert len(sft[0]) == 2 and len(rl[0]) == len(rl[8]) == 1
  # the same rollout (sampling is upstream of the cut), a shorter update, the same loss
  full, cut = rl[0][0], rl[8][0]
  assert cut["train/row_length"] < full["train/row_length"]
  assert cut["train/row_length"] % 8 == 0
  assert cut["rollout/reward"] == full["rollout/reward"]
  for k in ("loss/total", "loss/policy", "loss/value", "loss/kl_ref", "grad/norm",
            "prefit/loss/value"):
    np.testing.assert_allclose(cut[k], full[k], rtol=1e-4, atol=1e-7)
  assert np.isfinite(cut["grad/norm"]) and cut["grad/norm"] > 0
  assert "train activations" in capsys.readouterr().out  # the start-up memory estimate
