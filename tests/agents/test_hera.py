"""Hera end to end (configs/hera_sokoban.py's pipeline at test scale): two frozen worker runs,
the router's imitation labels (device/cloud agreement), RL over the route env; the workers'
weights stay their runs' bit for bit, and the router learns to route (held-out calls per
episode rise from none). `turn_agreement` is checked against greedy decoding."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl import models
from agent_rl.agents.hera import turn_agreement
from agent_rl.agents.params import select_agent
from agent_rl.parallel.placement import make_placement
from agent_rl.train.config import validate
from agent_rl.train.pretrained import load_run_policy
from agent_rl.train.run import run
from tests.train.tiny import tiny_config

BASE = {"max_steps": 6}


def _worker(workdir, sft_steps, tokenizer=""):
  c = tiny_config(iterations=0, sft_steps=sft_steps)
  c.env.kwargs = dict(BASE)
  c.rollout.history, c.rollout.window_turns, c.rollout.window_tokens = "windowed", 0, 0
  c.rollout.max_action_tokens = 16
  c.tokenizer.path = tokenizer
  c.sft.lr, c.log.episodes = 3e-3, 0
  c.eval.num_tasks, c.eval.k = 2, 1
  run(c, workdir)
  return workdir


def _hera(device, cloud, *, sft_steps=30, iterations=1, **over):
  c = tiny_config(iterations=iterations, sft_steps=sft_steps, credit="gigpo")
  c.env.name = "route"
  c.env.kwargs = {"base": "sokoban", "base_kwargs": dict(BASE), "costs": (0.0, 1.0), **over}
  c.rollout.history, c.rollout.window_turns, c.rollout.window_tokens = "windowed", 0, 0
  c.rollout.max_turns, c.rollout.max_action_tokens = 6, 16
  c.model.init_from, c.tokenizer.path = device, os.path.join(device, "tokenizer.model")
  c.agents.mode, c.agents.init, c.agents.frozen = "separate", f",,{cloud}", "1,2"
  c.sft.plans, c.sft.lr, c.log.episodes = "route_agreement", 3e-3, 0
  c.eval.num_tasks, c.eval.k = 4, 1
  return c


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
  d = tmp_path_factory.mktemp("hera")
  device = _worker(str(d / "device"), 2)
  cloud = _worker(str(d / "cloud"), 20, os.path.join(device, "tokenizer.model"))
  return device, cloud


def _records(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(ln) for ln in f]


def test_router_learns_to_route_and_the_workers_stay_frozen(workers, tmp_path):
  device, cloud = workers
  wd = str(tmp_path / "hera")
  run(_hera(device, cloud), wd)
  recs = [r for r in _records(wd) if "eval/success" in r]
  calls = lambda r: r["eval/route/calls/device"] + r["eval/route/calls/cloud"]
  before, after_sft = recs[0], recs[1]
  assert before["step"] == 0 and after_sft["step"] == 30
  # The router starts as the (Sokoban) device policy: it never names a worker, so no worker
  # acts; imitation on the agreement labels makes it route.
  assert calls(before) == 0.0 and calls(after_sft) > 1.0, (before, after_sft)
  assert "rollout/route/calls/cloud" in _records(wd)[-1]
  place = make_placement(tiny_config().mesh)
  with place.context():
    theirs = {k: load_run_policy(p, _vocab(device), place).params
              for k, p in ((1, device), (2, cloud))}
    mine = load_run_policy(wd, _vocab(device), place, which="latest").params
    for k, p in theirs.items():
      for a, b in zip(jax.tree.leaves(select_agent("separate", mine, k, lm_only=True)),
                      jax.tree.leaves(p)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    router = jax.tree.leaves(select_agent("separate", mine, 0, lm_only=True))
    start = jax.tree.leaves(theirs[1])  # the router started from the device run
    assert any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(router, start))


def test_forced_baseline_is_evaluated_without_training(workers, tmp_path):
  device, cloud = workers
  wd = str(tmp_path / "cloud_only")
  c = _hera(device, cloud, sft_steps=0, iterations=0, force="cloud")
  c.sft.plans = "expert"
  run(c, wd)
  (rec,) = _records(wd)
  assert rec["step"] == 0 and rec["eval/route/calls/device"] == 0.0
  assert rec["eval/route/calls/cloud"] > 0
  assert os.path.isdir(os.path.join(wd, "checkpoints", "0"))


def _vocab(run_dir):
  from agent_rl.tokenizers import load_tokenizer
  return load_tokenizer(os.path.join(run_dir, "tokenizer.model")).vocab_size


def test_agreement_labels_need_the_route_env_with_a_router(workers):
  device, cloud = workers
  c = _hera(device, cloud, force="cloud")
  validate(c)
  with pytest.raises(ValueError, match="sft.plans"):
    run(c, "/tmp/never_used_hera_run")


def test_turn_agreement_is_greedy_decoding_equality():
  """Reference: decode greedily from each row's prompt, token by token (a fresh forward per
  token); a row agrees iff that decode reproduces its generated span."""
  cfg = models.get_preset("tiny", vocab_size=7, hidden=16, num_layers=1, num_heads=2,
                          num_kv_heads=1, intermediate=32, head_dim=8)
  g, p = nnx.split(models.Transformer(cfg, rngs=nnx.Rngs(0)))
  r = np.random.default_rng(1)
  rows, length, prompt = 16, 9, 4
  tok = r.integers(0, 7, (rows, length)).astype(np.int32)

  def greedy(row):
    seq = list(row[:prompt])
    for _ in range(length - prompt):
      x = jnp.asarray([seq], jnp.int32)
      logits, _ = models.forward(g, p, x, jnp.arange(len(seq))[None], jnp.ones_like(x, bool))
      seq.append(int(jnp.argmax(logits[0, -1])))
    return seq
  for i in range(0, rows, 2):  # half the rows are the model's own greedy continuation
    tok[i] = greedy(tok[i])
  mask = np.zeros((rows, length), np.int32)
  mask[:, prompt:] = 1
  got = turn_agreement(g, p, jnp.asarray(tok), jnp.tile(jnp.arange(length), (rows, 1)),
                       jnp.ones((rows, length), bool), jnp.asarray(mask))
  want = [greedy(tok[i]) == list(tok[i]) for i in range(rows)]
  assert list(np.asarray(got)) == want and sum(want) >= rows // 2
