"""A host env trains from a config like a JAX env: same run, checkpoints, eval, exact resume.

The game is the pure-Python KeyRoom toy (agent_rl/envs/host/toy.py, adapter "toy"), so the
whole path — tokenizer corpus, worker pool, overlapped rollout, credit, update, eval — runs
in seconds.
"""
import json
import os

import pytest

from agent_rl.train.config import validate
from agent_rl.train.run import SimulatedKill, run
from tests.train.tiny import host_config


def _records(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    recs = [json.loads(ln) for ln in f]
  return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]


def test_host_run_resumes_exactly(tmp_path):
  c = host_config(workers=0)
  full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
  last = run(c, full)
  assert "eval/success" in last and "rollout/success" in last
  with pytest.raises(SimulatedKill):
    run(c, killed, kill_after=1)
  run(c, killed)
  assert _records(killed) == _records(full)
  assert [r["step"] for r in _records(full) if "rollout/success" in r] == [1, 2]


def test_host_run_renders_held_out_episodes(tmp_path):
  """`log.episodes` on a host env: the report's before/after episodes are the held-out panel's
  games (env.host.eval_split), played through the host loop, as a JAX env's are."""
  c = host_config(iterations=1)
  c.log.episodes = 2
  run(c, str(tmp_path / "ep"))
  with open(tmp_path / "ep" / "episodes.jsonl") as f:
    eps = [json.loads(ln) for ln in f]
  assert [(e["tag"], e["index"]) for e in eps] == [("before", 0), ("before", 1),
                                                   ("after", 0), ("after", 1)]
  for e in eps:
    assert e["text"].startswith(f"episode {e['index']} (task ")
    assert "Goal: unlock the door." in e["text"] and "[turn 0] action:" in e["text"]
  assert eps[0]["text"] != eps[1]["text"]  # two different held-out games
  report = (tmp_path / "ep" / "report.md").read_text()
  assert "### before training" in report and eps[2]["text"].splitlines()[0] in report


@pytest.mark.slow
def test_host_run_with_pool_matches_in_process(tmp_path):
  """Two worker processes and overlap give the run the same metrics as in-process games."""
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  run(host_config(workers=0, overlap=False, iterations=1), a)
  run(host_config(workers=2, overlap=True, iterations=1), b)
  ra, rb = _records(a), _records(b)
  for x, y in zip(ra, rb):
    x.pop("rollout/decode_steps", None), y.pop("rollout/decode_steps", None)
    assert x.keys() == y.keys()
    for k in x:
      assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-6), k


# CI budget (2026-12-07: 66 s): the resets ahead are claimed, dropped and skipped in
# tests/envs/host/test_host_pool.py; that they leave a whole run unchanged runs with -m slow.
@pytest.mark.parametrize("strategy", [pytest.param("plain", marks=pytest.mark.slow),
                                      pytest.param("dapo", marks=pytest.mark.slow),
                                      pytest.param("remax", marks=pytest.mark.slow),
                                      pytest.param("branch", marks=pytest.mark.slow)])
def test_host_run_resets_ahead_without_changing_the_run(tmp_path, monkeypatch, strategy):
  """`env.host.prefetch_resets`: the next iteration's resets start in the workers before the
  update (after it when an evaluation comes first) and the rollout claims them (the strategy's
  first key: DAPO folds its key) — the metrics are those of a run without it, bit for bit.
  The host split of each iteration's time is in the metrics. "remax": the plain strategy with
  ReMax's credit, whose greedy baseline rollout resets the same games again after the rollout
  (before the resets ahead start). "branch": groups branch at turn 1, their copies' games
  rebuilt by replay in the worker (TextHostEnv.clone_rows)."""
  from agent_rl.envs.host.pool import GamePool
  claimed = []
  claim = GamePool._claim
  monkeypatch.setattr(GamePool, "_claim", lambda self, t: claimed.append(t.seq) or claim(self, t))
  recs = {}
  for ahead in (True, False):
    c = host_config(workers=1, iterations=3)
    c.train.eval_every, c.env.host.prefetch_resets = 2, ahead
    if strategy == "remax":
      c.credit.name = "remax"
    else:
      c.rollout.strategy = strategy
    if strategy == "dapo":
      c.rollout.strategy_kwargs = dict(max_num_gen_batches=1)
    wd = str(tmp_path / f"{ahead}")
    run(c, wd)
    recs[ahead] = _records(wd)
    if ahead:  # iteration 1 before its update; iteration 2 after the evaluation at 2
      assert len(claimed) == 2, claimed
      with open(os.path.join(wd, "metrics.jsonl")) as f:
        rl = [json.loads(ln) for ln in f if "time/env_reset_s" in ln]
      assert len(rl) == 3 and all(r["time/policy_s"] > 0 for r in rl)
  assert len(claimed) == 2
  assert recs[True] == recs[False]
  if strategy == "remax":
    assert sum("remax/baseline_return" in r for r in recs[True]) == 3
  if strategy == "branch":
    assert sum(r.get("rollout/branched_episodes", 0) for r in recs[True]) > 0


def test_host_run_with_a_hindsight_teacher_reading_the_expert_plans(tmp_path, monkeypatch):
  """`config.hindsight` on a host game: the teacher's privileged text is each task's expert plan
  from the rollout's own starts (TextHostEnv.privileged_plans with the tasks and reset keys of
  the reset just before it), and the gap moves the advantages."""
  import numpy as np
  from agent_rl.envs.host.text_env import TextHostEnv
  calls = []
  reset, plans = TextHostEnv.reset, TextHostEnv.privileged_plans
  monkeypatch.setattr(TextHostEnv, "reset", lambda self, t, k, g: calls.append(
      ("reset", np.array(t), np.array(k))) or reset(self, t, k, g))
  monkeypatch.setattr(TextHostEnv, "privileged_plans", lambda self, t, k, w: calls.append(
      ("plans", np.array(t), np.array(k))) or plans(self, t, k, w))
  c = host_config(workers=0, iterations=2)
  c.hindsight.mode, c.env.host.privileged_tokens = "bonus", 48  # moves even zero advantages
  run(c, str(tmp_path))
  recs = [r for r in _records(str(tmp_path)) if "hindsight/gap" in r]
  assert len(recs) == 2 and all(r["hindsight/adv_change"] > 0 for r in recs)
  assert all(10 < r["hindsight/privileged_tokens"] <= 48 for r in recs)  # the plans, read
  at = [i for i, call in enumerate(calls) if call[0] == "plans"]
  assert len(at) == 2
  for i in at:
    last = [x for x in calls[:i] if x[0] == "reset"][-1]
    np.testing.assert_array_equal(calls[i][1], last[1])
    np.testing.assert_array_equal(calls[i][2], last[2])


@pytest.mark.parametrize("field,value,match", [
    ("env.name", "host:nope", "registered: .*host:toy"),
    ("env.host.workers", -1, "env.host.workers"),
    ("env.host.action_format", "json", "env.host.action_format"),
    ("env.host.step_timeout_s", 0.0, "env.host.step_timeout_s"),
    ("env.host.score_scale", 0.0, "env.host.score_scale"),
    ("rollout.strategy", "tsr", "rollout.strategy"),
    ("env.host.privileged_tokens", 0, "env.host.privileged_tokens"),
    ("env.host.role_scales", "1,2", "env.host.role_scales needs env.host.roles"),
])
def test_host_config_is_validated_before_anything_builds(field, value, match):
  c = host_config()
  node, leaf = c, field.split(".")
  for k in leaf[:-1]:
    node = node[k]
  node[leaf[-1]] = value
  with pytest.raises(ValueError, match=match):
    validate(c)


def test_host_adapter_kwargs_are_checked():
  c = host_config()
  c.env.kwargs.rooms = 3
  with pytest.raises(ValueError, match="config.env.kwargs.*'rooms'"):
    validate(c)


def test_host_sft_demos_replay_the_games_expert_plans():
  """The SFT rows of a host run: each demo game's expert plan (KeyRoom's shortest plan)
  replayed through the host rollout, in chunks of the pool's size; the loss-mask tokens are
  the plan's turns and every replayed demo wins."""
  import jax
  import numpy as np
  from agent_rl.data.host_demos import host_demo_batches
  from agent_rl.envs.host.pool import GamePool
  from agent_rl.envs.host.text_env import TextHostEnv
  from agent_rl.envs.host.text_rules import reset_seed
  from agent_rl.envs.host.toy import KeyRoomGame
  from agent_rl.eval.evaluate import episode_config
  from agent_rl.rollout.compiled import episode_keys
  from agent_rl.rollout.layout import chat_pieces
  from agent_rl.tokenizers import ByteTokenizer
  tok = ByteTokenizer()
  env = TextHostEnv(GamePool(KeyRoomGame, 3, workers=0), tok, obs_len=48)
  c = host_config()
  c.rollout.max_turns, c.rollout.max_action_tokens = 4, 40
  ecfg = episode_config(c, tok)
  batches, st, _ = host_demo_batches(env, tok, ecfg, chat_pieces(tok, env.instruction, "sys"),
                                     tok.vocab_size, 7, 1000)
  plans = st.pop("plans")
  assert st == dict(demos=7, skipped=0, replayed_success=1.0, iwm_failed=0) and len(batches) == 3
  b = batches[0]
  first = np.asarray(b.tokens)[0][np.asarray(b.loss_mask)[0] > 0]
  reset_keys, _, _ = episode_keys(jax.random.fold_in(jax.random.key(0), 0), 3, 1)
  from agent_rl.envs.tasks import sample_tasks
  task0 = int(np.asarray(sample_tasks(env, [1000]))[0])
  plan = KeyRoomGame().expert(env.task_ids[task0], reset_seed(np.asarray(reset_keys)[0]))
  text = tok.decode([int(x) for x in first])
  assert [seg.split("</answer>")[0] for seg in text.split("<answer>")[1:]] == plan
  assert plans[0][0] == plan  # each chunk's plans come back row-aligned


# CI budget (2026-12-07: 65 s): the demos replay the expert plans (the test above), SFT lifts
# held-out success in CI in tests/train/test_configs.py::test_config_learns; this run, -m slow.
@pytest.mark.slow
def test_host_run_sft_warm_start_lifts_held_out_success(tmp_path):
  """SFT on the toy game's expert plans: held-out success after SFT above before it. A policy
  run (no RL iteration) renders its held-out episodes after SFT as well as before."""
  c = host_config(iterations=0)
  c.rollout.max_turns, c.rollout.max_action_tokens = 4, 16  # plans are up to 4 commands
  c.sft.steps, c.sft.num_demos, c.sft.batch_size = 150, 32, 8
  c.optim.lr = 3e-3
  c.log.episodes = 1
  run(c, str(tmp_path / "sft"))
  recs = [r for r in _records(str(tmp_path / "sft")) if "eval/success" in r]
  assert len(recs) >= 2 and recs[-1]["eval/success"] > recs[0]["eval/success"], recs
  with open(tmp_path / "sft" / "episodes.jsonl") as f:
    eps = [json.loads(ln) for ln in f]
  assert [(e["tag"], e["step"]) for e in eps] == [("before", 0), ("after", 150)]
  # The same held-out game: return -0.4 (invalid commands) before SFT, 0.0 after it.
  assert eps[0]["text"].splitlines()[0] != eps[1]["text"].splitlines()[0]
