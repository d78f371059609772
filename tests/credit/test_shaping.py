"""DAPO overlong shaping and KL-in-reward (estimators, controllers) vs NumPy loops."""
import importlib.util
import pathlib

import numpy as np
import pytest

from agent_rl.credit import shaping
from agent_rl.rollout.batch import from_turns

_spec = importlib.util.spec_from_file_location("credit_shaping_numpy_ref",
                                               pathlib.Path(__file__).with_name("numpy_ref.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


def test_overlong_penalty():
  lengths = np.array([0, 50, 80, 90, 100, 130])
  got = shaping.overlong_penalty(lengths, max_response_length=100, overlong_buffer_len=20, penalty_factor=0.5)
  np.testing.assert_allclose(got, [ref.overlong(y, 100, 20, 0.5) for y in lengths], atol=1e-6)
  with pytest.raises(ValueError, match="overlong_buffer_len"):
    shaping.overlong_penalty(lengths, max_response_length=100, overlong_buffer_len=0)


def test_apply_overlong_penalty_hits_last_valid_turn():
  reward = np.zeros((3, 4))
  valid = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
  batch = from_turns(reward, valid, np.zeros(3, np.int32), tokens_per_turn=5)  # 15, 20, 0 tokens
  out = shaping.apply_overlong_penalty(batch, max_response_length=20, overlong_buffer_len=10)
  want = np.zeros((3, 4))
  want[0, 2] = ref.overlong(15, 20, 10, 1.0)
  want[1, 3] = ref.overlong(20, 20, 10, 1.0)
  np.testing.assert_allclose(out.reward, want, atol=1e-6)


@pytest.mark.parametrize("kind", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+"])
def test_kl_estimators(kind):
  rng = np.random.default_rng(0)
  lp, rf = rng.normal(size=64) * 3, rng.normal(size=64) * 3
  lp[:2], rf[:2] = 30.0, -30.0  # exercises the k3 clamps
  got = shaping.kl_estimate(lp, rf, kind)
  np.testing.assert_allclose(got, [ref.kl_value(a, b, kind.rstrip("+")) for a, b in zip(lp, rf)], rtol=1e-5,
                             atol=1e-5)


def test_kl_in_reward_and_controllers():
  rng = np.random.default_rng(1)
  B, L = 6, 7
  scores = rng.normal(size=(B, L))
  lp, rf = rng.normal(size=(B, L)), rng.normal(size=(B, L))
  m = (rng.random((B, L)) > 0.3).astype(np.float64)
  m[0] = 0.0  # an empty row counts as KL 0 in the batch mean, as verl's masked_mean
  out, kl = shaping.kl_in_reward(scores, lp, rf, m, 0.05, kl_penalty="k3")
  kld = np.array([[ref.kl_value(lp[i, t], rf[i, t], "k3") * m[i, t] for t in range(L)] for i in range(B)])
  np.testing.assert_allclose(out, scores - 0.05 * kld, rtol=1e-5, atol=1e-6)
  want_kl = np.mean([kld[i].sum() / (m[i].sum() + 1e-8) for i in range(B)])
  assert float(kl) == pytest.approx(want_kl, rel=1e-5)
  assert shaping.KL_CONTROLLERS.get("fixed")(0.001, 5.0, B) == 0.001
  adaptive = shaping.KL_CONTROLLERS.get("adaptive")
  for cur in (0.0, 0.09, 0.1, 0.5):
    assert float(adaptive(0.01, cur, 256)) == pytest.approx(ref.adaptive_beta(0.01, cur, 256), rel=1e-6)
  with pytest.raises(ValueError, match="horizon"):
    adaptive(0.01, 0.1, 256, horizon=0)
  with pytest.raises(KeyError, match="unknown kl estimator"):
    shaping.kl_estimate(lp, rf, "k7")
  with pytest.raises(ValueError, match="full"):  # needs logits, not sampled log-probs
    shaping.kl_estimate(lp, rf, "full")


def test_turn_kl_penalty_sums_each_turns_tokens():
  rng = np.random.default_rng(2)
  reward = rng.normal(size=(3, 2))
  valid = np.array([[1, 1], [1, 0], [1, 1]], bool)
  batch = from_turns(reward, valid, np.zeros(3, np.int32), tokens_per_turn=3)
  lp, rf = rng.normal(size=(3, 6)), rng.normal(size=(3, 6))
  batch = batch.replace(logprobs=lp.astype(np.float32), ref_logprobs=rf.astype(np.float32))
  out, kl = shaping.turn_kl_penalty(batch, 0.1)
  lm, ti = np.asarray(batch.loss_mask), np.asarray(batch.turn_index)
  want = reward.copy()
  for i in range(3):
    for l in range(6):
      if ti[i, l] >= 0 and lm[i, l] > 0:
        want[i, ti[i, l]] -= 0.1 * (lp[i, l] - rf[i, l])
  np.testing.assert_allclose(out.reward, want, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="ref_logprobs"):
    shaping.turn_kl_penalty(batch.replace(ref_logprobs=None), 0.1)
