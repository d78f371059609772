"""Exact resume: a run killed mid-way and restarted continues bit for bit on CPU."""
import json
import os

import pytest

from agent_rl.train.run import SimulatedKill, run
from tests.train.tiny import tiny_config


def _records(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    recs = [json.loads(ln) for ln in f]
  # wall-clock metrics legitimately differ
  return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]


def test_killed_run_resumes_exactly(tmp_path):
  c = tiny_config(iterations=4, ckpt_every=2, sft_steps=2)
  full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
  run(c, full)
  # Dies after iteration 3: iterations 1-2 are checkpointed, iteration 3's metrics were
  # logged but its state lost; the restart must redo it identically.
  with pytest.raises(SimulatedKill):
    run(c, killed, kill_after=3)
  run(c, killed)
  assert _records(killed) == _records(full)
  # each start-up says which code ran it (train/provenance.py): the killed run's two, the full's one
  code = [json.loads(ln) for ln in open(os.path.join(killed, "code.jsonl"))]
  assert len(code) == 2 and len(open(os.path.join(full, "code.jsonl")).readlines()) == 1
  assert set(code[0]) == {"commit", "dirty", "started", "versions"} and code[0]["versions"]["jax"]


def test_sigterm_during_sft_resumes_exactly_with_its_schedule_and_stages(tmp_path, monkeypatch):
  """A preemption at SFT step 3 of 6 (warm-up 2, then cosine; the first 4 steps on copy rows,
  data/copy_corpus.py) saves the SFT phase (params and its optimizer's moments and count); the
  restart continues the schedule and the copy stage where it stopped, then the demos."""
  from agent_rl.train.checkpoint import RunCheckpoint
  from agent_rl.train.phases import Preempted
  c = tiny_config(iterations=0, sft_steps=6)  # a policy run: SFT, its evaluation, its save
  c.sft.warmup_steps, c.sft.schedule, c.sft.lr = 2, "cosine", 2e-3
  c.sft.copy_steps, c.sft.copy_width = 4, 64
  full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
  run(c, full)
  lrs = [r["sft/lr"] for r in _records(full) if "sft/lr" in r]  # warm-up 0, 1e-3; then cosine
  assert lrs == pytest.approx([0.0, 1e-3, 2e-3, 1.7071e-3, 1e-3, 0.2929e-3], abs=1e-7)
  sft_rows = [r for r in _records(full) if "sft/lr" in r]
  assert [r["sft/copy"] for r in sft_rows] == [1, 1, 1, 1, 0, 0]
  # the copy steps' NLL is on copy rows: logged apart from the demos'
  apart = ["sft/copy/loss" in r and "sft/loss" not in r for r in sft_rows]
  assert apart == [True] * 4 + [False] * 2
  real, hit = RunCheckpoint.preempted, []

  def sigterm_at_3(self, step):  # the SIGTERM flag, raised at SFT step 3's boundary
    if step == 3 and not hit:
      hit.append(step)
      return True
    return real(self, step)
  monkeypatch.setattr(RunCheckpoint, "preempted", sigterm_at_3)
  with pytest.raises(Preempted, match="during SFT"):
    run(c, killed)
  assert hit == [3]
  run(c, killed)
  assert _records(killed) == _records(full)
  # each start-up says which code ran it (train/provenance.py): the killed run's two, the full's one
  code = [json.loads(ln) for ln in open(os.path.join(killed, "code.jsonl"))]
  assert len(code) == 2 and len(open(os.path.join(full, "code.jsonl")).readlines()) == 1
  assert set(code[0]) == {"commit", "dirty", "started", "versions"} and code[0]["versions"]["jax"]


def test_corrupt_latest_checkpoint_falls_back(tmp_path, capsys):
  c = tiny_config(iterations=2, ckpt_every=1, sft_steps=0)
  wd = str(tmp_path / "w")
  run(c, wd)
  ck = os.path.join(wd, "checkpoints")
  latest = max(int(d) for d in os.listdir(ck) if d.isdigit())
  for root, _, files in os.walk(os.path.join(ck, str(latest))):
    for f in files:
      with open(os.path.join(root, f), "wb") as fh:
        fh.write(b"corrupt")
  c.train.iterations = 3
  run(c, wd)
  out = capsys.readouterr().out
  assert f"checkpoint step {latest}" in out and "corrupt" in out
  assert os.path.isdir(os.path.join(wd, "checkpoints_corrupt", str(latest)))  # kept, not deleted
  assert [r["step"] for r in _records(wd) if "rollout/success" in r] == [1, 2, 3]
  with open(os.path.join(wd, "metrics.jsonl")) as f:  # an iteration's time, split in two
    times = [r for r in map(json.loads, f) if "time/iteration_s" in r]
  for r in times:
    assert r["time/rollout_s"] > 0 and r["time/update_s"] > 0
    assert r["time/rollout_s"] + r["time/update_s"] == pytest.approx(r["time/iteration_s"])


def test_evaluate_from_checkpoint_alone_matches_the_run(tmp_path):
  from agent_rl.train.evaluate import evaluate_checkpoint
  c = tiny_config(iterations=2, ckpt_every=1, sft_steps=0)
  wd = str(tmp_path / "w")
  run(c, wd)
  final_eval = [r for r in _records(wd) if "eval/success" in r][-1]
  got = evaluate_checkpoint(c, wd, episodes=2)
  assert got["iteration"] == 2
  for k in ("eval/success", "eval/reward", "eval/pass@2", "eval/avg@2"):
    assert got[k] == final_eval[k], k
  assert os.path.exists(os.path.join(wd, "eval.json"))
  # The rendered episodes are the run's own "after" episodes (same params, same held-out tasks).
  with open(os.path.join(wd, "episodes.jsonl")) as f:
    after = [e["text"] for e in map(json.loads, f) if e["tag"] == "after"]
  assert len(after) == 3 and got["episodes"] == after[:2]  # log.episodes: 3
  with pytest.raises(ValueError, match="--episodes"):
    evaluate_checkpoint(c, wd, episodes=-1)
