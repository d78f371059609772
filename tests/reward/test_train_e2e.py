"""End to end at micro scale: a policy warm-started by SFT generates Sokoban rollouts, an
outcome RM trained with Bradley-Terry on pairs ranked by env return reaches held-out pairwise
accuracy well above chance (asserted), a PRM on the box-on-target milestones reports
per-step accuracy / AUC, both restore as reward sources of an RL run that logs env and RM
rewards side by side; a policy run is refused as a reward model; DPO on the same pairs
fits the held-out preferences; an RM learns from a pairs JSONL. Slow (minutes on 2 cores)."""
import json
import os

import pytest

from agent_rl.reward.train import train_reward_model
from agent_rl.train.run import run
from tests.train.tiny import tiny_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
  wd = str(tmp_path_factory.mktemp("policy"))
  c = tiny_config(iterations=0, sft_steps=40)
  c.sft.num_demos, c.sft.lr = 32, 3e-3
  c.log.sinks, c.log.episodes = "jsonl", 0
  run(c, wd)
  return wd


def _rm_config(policy, kind):
  c = tiny_config()
  c.log.sinks = "jsonl"
  c.rollout.num_tasks, c.rollout.group_size = 8, 8
  c.train.minibatch_episodes = 8
  c.rm.kind, c.rm.policy_run, c.model.init_from = kind, policy, policy
  c.rm.rollout_batches, c.rm.held_out_batches = 4, 3
  c.rm.steps, c.rm.eval_every, c.rm.batch_size, c.rm.lr = 150, 75, 16, 1e-3
  return c


@pytest.fixture(scope="module")
def outcome_rm(policy, tmp_path_factory):
  wd = str(tmp_path_factory.mktemp("rm"))
  return wd, train_reward_model(_rm_config(policy, "outcome"), wd)


def test_outcome_rm_beats_chance_held_out(outcome_rm):
  wd, m = outcome_rm
  assert m["eval/rm_accuracy"] >= 0.7, m  # chance is 0.5
  assert 0.0 <= m["eval/rm_ece"] <= 0.5 and 0.0 <= m["eval/rm_brier"] <= 0.25
  rep = json.load(open(os.path.join(wd, "rm_report.json")))
  assert rep["held_out"]["eval/rm_accuracy"] == pytest.approx(m["eval/rm_accuracy"])
  assert os.path.isdir(os.path.join(wd, "checkpoints", "150"))
  logged = [json.loads(ln) for ln in open(os.path.join(wd, "metrics.jsonl")) if ln.strip()]
  assert [r["rm/lr"] for r in logged] == [1e-3] * len(logged) and len(logged) >= 3


def test_rm_run_resumes_at_its_end(policy, outcome_rm):
  wd, m = outcome_rm
  again = train_reward_model(_rm_config(policy, "outcome"), wd)  # nothing left to train
  assert again["eval/rm_accuracy"] == pytest.approx(m["eval/rm_accuracy"])


def _rl(policy, rm, use, wd):
  c = tiny_config(iterations=2)
  c.log.sinks, c.log.episodes = "jsonl", 0
  c.tokenizer.path = os.path.join(policy, "tokenizer.model")
  c.model.init_from = policy
  c.reward.model, c.reward.shapers, c.reward.model_use = rm, "reward_model", use
  return run(c, wd)


def test_rl_run_uses_the_outcome_rm(policy, outcome_rm, tmp_path):
  last = _rl(policy, outcome_rm[0], "add", str(tmp_path))
  for k in ("rollout/env_reward", "rollout/rm_reward", "rollout/rm_env_corr", "rm/hacking"):
    assert k in last, k
  # add, coefficients 1: the shaped reward is env + RM outcome, episode means.
  assert last["rollout/reward"] == pytest.approx(last["rollout/env_reward"] + last["rollout/rm_reward"],
                                                 abs=1e-4)


def test_prm_trains_reports_step_metrics_and_shapes_turns(policy, tmp_path):
  wd = str(tmp_path / "prm")
  m = train_reward_model(_rm_config(policy, "process"), wd)
  assert {"eval/rm_accuracy", "eval/rm_auc", "eval/rm_positive_rate"} <= set(m)
  last = _rl(policy, wd, "process", str(tmp_path / "rl"))
  assert "rollout/rm_turn_reward" in last
  assert last["rollout/reward"] == pytest.approx(
      last["rollout/env_reward"] + last["rollout/rm_turn_reward"], abs=1e-4)


def test_export_cli_writes_a_sequence_classifier_of_the_best_step(outcome_rm, tmp_path):
  """`agent_rl.export` on a reward-model run: HF's score on an episode's rows (+ the bias
  in config.json) equals the run's own scoring of the same rows; its tokenizer comes along."""
  import numpy as np
  import torch
  import transformers
  from flax import nnx
  from agent_rl import export
  from agent_rl.models.hf_export import SCORE_BIAS_KEY
  from agent_rl.reward.use import restore_reward_model
  wd, _ = outcome_rm
  out = str(tmp_path / "hf_rm")
  info = export.export_run(wd, out)
  assert info["architecture"].endswith("ForSequenceClassification") and info["kind"] == "outcome"
  assert "tokenizer.model" in info["files"]
  place = _place()
  with place.context():
    rm = restore_reward_model(wd, place)
  assert info["checkpoint_step"] == rm.source.step
  model = nnx.merge(rm.source.graphdef, rm.source.params)
  ids = rm.tokenizer.encode("You are in a room. <answer>Up</answer>")
  tok = np.asarray([ids], np.int32)
  valid = np.ones_like(tok, bool)
  _, hidden, _ = model.lm.apply(tok, np.arange(tok.shape[1])[None].astype(np.int32), valid)
  ours = float(np.asarray(model.head(hidden, valid))[0])
  hf = transformers.AutoModelForSequenceClassification.from_pretrained(out, dtype=torch.float32)
  with torch.no_grad():
    got = float(hf(input_ids=torch.tensor(tok, dtype=torch.long)).logits[0, 0])
  assert got + json.load(open(os.path.join(out, "config.json")))[SCORE_BIAS_KEY] == \
      pytest.approx(ours, abs=1e-4)


def test_policy_run_is_not_a_reward_model(policy, tmp_path):
  with pytest.raises(ValueError, match="is not a reward-model run"):
    _rl(policy, policy, "add", str(tmp_path))


def test_outcome_rm_cannot_give_process_rewards(policy, outcome_rm, tmp_path):
  with pytest.raises(ValueError, match="config.reward.model_use: 'process' needs a process reward model"):
    _rl(policy, outcome_rm[0], "process", str(tmp_path))


def test_dpo_baseline_on_the_same_pairs(policy, tmp_path):
  from agent_rl.reward.offline import train_preference_policy
  from agent_rl.train.pretrained import load_run_policy
  c = _rm_config(policy, "dpo")
  c.loss.terms, c.loss.term_kwargs.dpo = "dpo", 1.0
  c.rm.steps, c.rm.eval_every, c.rm.batch_size, c.rm.lr = 40, 40, 8, 3e-4
  c.rm.warmup_steps = 4  # so the logged lr has a shape to check
  m = train_preference_policy(c, str(tmp_path))
  assert m["before/eval/pref_accuracy"] == 0.5  # the reference itself: every margin is 0
  assert m["eval/pref_accuracy"] >= 0.7 and "eval/success" in m
  assert load_run_policy(str(tmp_path), 400, _place()).step == 40  # a policy run's checkpoint
  logged = [json.loads(ln) for ln in open(tmp_path / "metrics.jsonl") if ln.strip()]
  # step t's update u = t - 1 (Hugging Face's warm-up: lr * u / 4 until u = 4); step 0: before
  want = [3e-4 * min(1.0, (t - 1) / 4) for t in range(1, 41)]
  assert [r["rm/lr"] for r in logged if r["step"] > 0] == pytest.approx(want, rel=1e-6)


def _place():
  from agent_rl.parallel.placement import make_placement
  return make_placement(tiny_config().mesh)


def test_rm_from_a_pairs_dataset(tmp_path):
  """source=pairs: the JSONL format through its TFDS dataset; the preferred completion is the
  move that reaches the target named in the prompt, learnable from the text alone."""
  moves = ["Up", "Down", "Left", "Right"]
  r = __import__("numpy").random.default_rng(0)
  with open(tmp_path / "pairs.jsonl", "w") as f:
    for i in range(60):
      good, bad = r.choice(4, 2, replace=False)
      f.write(json.dumps({"prompt": f"Push the box {moves[good]}.",
                          "chosen": f"<answer>{moves[good]}</answer>",
                          "rejected": f"<answer>{moves[bad]}</answer>"}) + "\n")
  c = tiny_config()
  c.log.sinks = "jsonl"
  c.rm.source, c.rm.pairs_path, c.rm.held_out_frac = "pairs", str(tmp_path / "pairs.jsonl"), 0.25
  c.rm.steps, c.rm.eval_every, c.rm.batch_size, c.rm.lr = 150, 150, 8, 2e-3
  m = train_reward_model(c, str(tmp_path / "rm"))
  assert m["eval/rm_accuracy"] >= 0.8, m
