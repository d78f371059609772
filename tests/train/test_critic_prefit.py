"""The critic fitted on the batch before its credit (`train.critic_prefit`, train/prefit.py):
IterPO's fit-Q-then-improve. On one RL batch: the policy LM is untouched, the values the
credit reads are the fitted critic's and sit closer to the batch's Monte-Carlo returns (a
NumPy loop) than the rollout-time critic's; a run records the pre-fit and resumes exactly
(slow; in CI within the critic warm-up's resume test); the config errors."""
import json
import os

import jax
import numpy as np
import pytest

from agent_rl.parallel.placement import make_placement
from agent_rl.train import learner, phases
from agent_rl.train.config import validate
from agent_rl.train.run import SimulatedKill, build_run, run
from agent_rl.train.state import init_params
from tests.credit import numpy_ref
from tests.train.tiny import same_tree, tiny_config


def _config(prefit=2, iterations=2):
  c = tiny_config(iterations=iterations, credit="iterpo", critic="separate")
  c.train.critic_prefit = prefit
  return c


def _mc_returns(reward, valid, turn_index):
  """Each token's undiscounted return-to-go of its turn `[N, L]` (NaN off the turns)."""
  _, g = numpy_ref.remax(reward, np.zeros(len(reward)), valid)  # (its loop's return-to-go)
  out = np.full(turn_index.shape, np.nan)
  on = turn_index >= 0
  out[on] = g[np.nonzero(on)[0], turn_index[on]]
  return out


def test_prefit_fits_q_on_the_batch_before_its_credit(tmp_path):
  c = _config()
  c.train.length_bucket = 8  # the passes and the re-scoring run on cut rows
  place = make_placement(c.mesh)
  with place.context():
    r = build_run(c, str(tmp_path), place)
    prog = phases.initial_progress(r, init_params(r.spec))
    p0 = jax.device_get(prog.state.params)  # the pre-fit's update donates prog.state
    out = phases.rl_batch(r, prog, 0)
    before = learner.critic_values(r.spec.graphdef, p0, out.batch)
    after = learner.critic_values(r.spec.graphdef, out.state.params, out.batch)
    ref_rows = learner.prepare_jit(out.batch, r.credit_fn(out.batch))
  p1 = out.state.params
  assert same_tree(p0["lm"], p1["lm"])
  critic = lambda p: {k: v for k, v in p.items() if k != "lm"}  # critic_lm, value_head
  assert not same_tree(critic(p0), critic(p1))
  # (rows cut at another length round differently: train/buckets.py)
  np.testing.assert_allclose(np.asarray(out.batch.values), np.asarray(after), rtol=1e-5, atol=1e-6)
  assert not np.allclose(np.asarray(before), np.asarray(after), atol=1e-3)
  np.testing.assert_array_equal(np.asarray(out.rows.advantages), np.asarray(ref_rows.advantages))
  b = jax.device_get(out.batch)
  g = _mc_returns(b.reward, b.valid, b.turn_index)
  on = (b.loss_mask > 0) & (b.turn_index >= 0)
  mse = lambda v: float(np.mean((np.asarray(v)[on] - g[on]) ** 2))
  assert mse(after) < 0.9 * mse(before), (mse(before), mse(after))
  assert np.isfinite(out.metrics["prefit/loss/value"])


def _records(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(ln).items() if not k.startswith("time/")} for ln in f]


@pytest.mark.slow  # three runs (~60-120 s); tests/train/test_critic_warmup.py resumes one in CI
def test_prefit_run_resumes_exactly(tmp_path):
  c = _config(prefit=1)
  wd, killed = str(tmp_path / "w"), str(tmp_path / "k")
  run(c, wd)
  rl = [r for r in _records(wd) if "prefit/loss/value" in r]
  assert len(rl) == 2 and all(np.isfinite(r["prefit/loss/value"]) for r in rl)
  with pytest.raises(SimulatedKill):
    run(c, killed, kill_after=1)
  run(c, killed)
  assert _records(killed) == _records(wd)


@pytest.mark.parametrize("setting,match", [
    (dict(prefit=-1), "must be an int >= 0"),
    (dict(prefit=True), "must be an int >= 0"),
    (dict(critic="none"), "need a critic"),
    (dict(terms="policy"), "needs the value term"),
    (dict(mode="separate"), "supported with agents.mode='shared'"),
])
def test_bad_prefit_is_a_clear_error(setting, match):
  c = _config(prefit=setting.get("prefit", 1))
  if "critic" in setting:
    c.model.critic, c.credit.name = setting["critic"], "grpo"
  if "terms" in setting:
    c.loss.terms = setting["terms"]
  if "mode" in setting:
    c.env.name, c.env.kwargs, c.agents.mode = "deal_lite", {}, setting["mode"]
    c.rollout.history, c.rollout.window_turns = "windowed", 1
  with pytest.raises(ValueError, match=rf"train.critic_prefit.*{match}"):
    validate(c)


def test_actor_critic_split_without_a_critic_is_a_clear_error():
  c = _config(prefit=0)
  c.optim.actor_critic_split, c.model.critic, c.credit.name = True, "none", "grpo"
  with pytest.raises(ValueError, match=r"optim.actor_critic_split.*need a critic"):
    validate(c)
