"""CLEANER rollback-purify (rollout/purify.py) vs a plain-Python reference on hand-made batches
in the concatenated layout (prompt, then per turn its action tokens and its observation)."""
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.rollout import STRATEGIES, from_turns
from agent_rl.rollout.purify import purify, removed_turns

N, T = 12, 6


def ref_removed(call, error, kind, valid):
  """The rule in words: a failed call at t whose first later successful call t' is of the same
  tool removes turns t .. t'-1."""
  removed = [[False] * len(row) for row in call]
  for i in range(len(call)):
    for t in range(len(call[i])):
      if not (valid[i][t] and call[i][t] and error[i][t]):
        continue
      for u in range(t + 1, len(call[i])):
        if valid[i][u] and call[i][u] and not error[i][u]:
          if kind[i][u] == kind[i][t]:
            for s in range(t, u):
              removed[i][s] = True
          break
  return removed


def _random_batch(seed):
  rng = random.Random(seed)
  n_turns = [rng.randint(1, T) for _ in range(N)]
  valid = np.array([[t < n for t in range(T)] for n in n_turns])
  call = np.array([[rng.random() < 0.8 for _ in range(T)] for _ in range(N)]) & valid
  error = np.array([[rng.random() < 0.5 for _ in range(T)] for _ in range(N)]) & valid
  kind = np.array([[rng.randint(0, 1) for _ in range(T)] for _ in range(N)]) * call
  # Token layout: prompt (turn -1), then per valid turn its action (turn t) and observation (-1).
  rows, lmax = [], 3 + T * 5          # one fixed L: one compile of purify for every seed
  for i in range(N):
    ti = [-1] * rng.randint(1, 3)
    for t in range(n_turns[i]):
      ti += [t] * rng.randint(1, 3) + [-1] * rng.randint(0, 3)
    rows.append(ti)
  turn_index = np.full((N, lmax), -1, np.int32)
  length = np.zeros(N, np.int32)
  for i, ti in enumerate(rows):
    turn_index[i, :len(ti)], length[i] = ti, len(ti)
  b = from_turns(np.ones((N, T), np.float32), valid, np.repeat(np.arange(N // 2), 2),
                 fatal=error, extras=dict(tool_call=call, tool_error=error, tool_kind=kind.astype(np.int32)))
  attn = np.arange(lmax)[None, :] < length[:, None]
  b = b.replace(turn_index=jnp.asarray(turn_index), loss_mask=jnp.asarray((turn_index >= 0), jnp.float32),
                attention_mask=jnp.asarray(attn), position=jnp.broadcast_to(jnp.arange(lmax), (N, lmax)),
                tokens=jnp.asarray(np.arange(N * lmax).reshape(N, lmax) % 97 + 1, jnp.int32),
                logprobs=jnp.asarray(np.random.default_rng(seed).normal(size=(N, lmax)), jnp.float32))
  return b, (call, error, kind, valid), rows


@pytest.mark.parametrize("seed", range(6))
def test_removed_turns_match_reference(seed):
  _, (call, error, kind, valid), _ = _random_batch(seed)
  removed, retry = jax.device_get(removed_turns(*map(jnp.asarray, (call, error, kind, valid))))
  want = ref_removed(call.tolist(), error.tolist(), kind.tolist(), valid.tolist())
  np.testing.assert_array_equal(removed, want)
  # Each removed span ends right before a retry: a successful call of the span's tool.
  for i in range(N):
    for t in range(T - 1):
      if removed[i, t] and not removed[i, t + 1]:
        assert retry[i, t + 1] and call[i, t + 1] and not error[i, t + 1]


def test_hand_made_episodes():
  # fail A, ok A (retry) | fail A, malformed, fail A, ok A | fail A, ok B (other tool) | fail, end
  call = [[1, 1, 0, 0], [1, 0, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]
  error = [[1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]]
  kind = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]]
  valid = [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
  arr = lambda x, d=bool: jnp.asarray(np.array(x, d))
  removed, retry = removed_turns(arr(call), arr(error), arr(kind, np.int32), arr(valid))
  np.testing.assert_array_equal(removed, [[1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
  np.testing.assert_array_equal(retry, [[0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize("seed", range(4))
def test_purified_batch_matches_reference(seed):
  b, (call, error, kind, valid), rows = _random_batch(seed)
  want = ref_removed(call.tolist(), error.tolist(), kind.tolist(), valid.tolist())
  out = jax.device_get(purify(b))
  full = jax.device_get(purify(b, attend="all"))
  for i in range(N):
    last, kept = -1, []
    for j, t in enumerate(rows[i]):
      last = t if t >= 0 else last                   # the turn a token's segment belongs to
      gone = last >= 0 and want[i][last]
      assert out.loss_mask[i, j] == float(t >= 0 and not gone)
      assert full.loss_mask[i, j] == float(t >= 0 and not want[i][t]) if t >= 0 else full.loss_mask[i, j] == 0
      assert bool(out.attention_mask[i, j]) == (not gone)
      if not gone:
        kept.append(j)
    # The purified row = the compacted sequence: kept tokens at consecutive positions.
    np.testing.assert_array_equal(out.position[i, kept], np.arange(len(kept)))
    assert not out.attention_mask[i, len(rows[i]):].any()
    for t in range(T):
      assert out.reward[i, t] == (0.0 if want[i][t] else float(b.reward[i, t]))
      assert bool(out.fatal[i, t]) == (bool(error[i][t]) and not want[i][t])
  np.testing.assert_array_equal(out.extras["purified"], want)
  np.testing.assert_array_equal(out.logprobs, b.logprobs)      # behaviour log-probs untouched
  np.testing.assert_array_equal(full.attention_mask, b.attention_mask)
  np.testing.assert_array_equal(full.position, b.position)


def test_windowed_batches_only_lose_the_loss_of_removed_turns():
  b, (call, error, kind, valid), _ = _random_batch(0)
  w = from_turns(b.reward, b.valid, b.group_id, tokens_per_turn=3, fatal=b.fatal, extras=b.extras)
  w = w.replace(segment_len=3)
  out = jax.device_get(purify(w))
  want = np.repeat(np.array(ref_removed(call.tolist(), error.tolist(), kind.tolist(), valid.tolist())), 3, 1)
  np.testing.assert_array_equal(out.loss_mask, np.where(want, 0.0, w.loss_mask))
  np.testing.assert_array_equal(out.position, w.position)


def test_strategy_registered_and_reports_metrics():
  b, (call, error, kind, valid), _ = _random_batch(1)
  strat = STRATEGIES.get("rollback_purify")
  out, metrics = strat.run(lambda p, t, k: (b, {"x": 1.0}), None, None, None, attend="purified")
  want = np.array(ref_removed(call.tolist(), error.tolist(), kind.tolist(), valid.tolist()))
  np.testing.assert_allclose(metrics["purify/removed_turns"], want.sum(1).mean())
  np.testing.assert_allclose(metrics["purify/episodes"], want.any(1).mean())
  assert metrics["x"] == 1.0
  with pytest.raises(TypeError, match="attned"):
    strat.run(lambda p, t, k: (b, {}), None, None, None, attned="all")
  with pytest.raises(ValueError, match="tool_error"):
    purify(b.replace(extras={"tool_call": b.extras["tool_call"]}))
  with pytest.raises(ValueError, match="attend"):
    purify(b, attend="some")


@pytest.mark.slow  # compiles a CalcMath rollout (~1-2 min on 2 cores)
def test_purified_calc_math_rollout_equals_the_clean_episode():
  """A scripted CalcMath episode (malformed call, its correction, the answer) purified equals,
  token for token on the attended slots, the clean episode of the same task (the correction
  then the answer): the failed turn, its error message and the chat glue are gone."""
  from agent_rl.data.scripted import encode_plans, scripted_policy
  from agent_rl.envs.calc_math import CalcMath
  from agent_rl.envs.tasks import sample_tasks
  from agent_rl.rollout import EpisodeConfig, SamplerConfig, chat_pieces, rollout
  from agent_rl.tokenizers import ByteTokenizer
  tok = ByteTokenizer()
  env = CalcMath(tokenizer=tok, min_steps=1, max_steps=1, max_digits=2, max_turns=3)
  tasks = sample_tasks(env, [0])
  plan = env.solve(jax.tree.map(lambda x: x[0], tasks))
  plans = [["<calc> 1 + </calc>"] + plan, plan + [plan[-1]]]
  end = tok.special("<|im_end|>")
  cfg = EpisodeConfig(sampler=SamplerConfig(max_tokens=40, stop_tokens=(end,), greedy=True),
                      max_turns=3, group_size=2, history="concatenated")
  forced = jnp.asarray(encode_plans(tok, plans, 3, 40, fmt="{}"))
  batch, _ = rollout(scripted_policy(tok.vocab_size), forced, env, tasks, jax.random.key(0), cfg,
                     chat_pieces(tok, "Solve."))
  assert bool(batch.success[0, 2]) and bool(batch.success[1, 1])
  np.testing.assert_array_equal(batch.extras["tool_error"][0], [True, False, False])
  out = jax.device_get(purify(batch))
  np.testing.assert_array_equal(out.extras["purified"], [[True, False, False], [False, False, False]])
  keep0 = np.asarray(out.attention_mask[0]).astype(bool)
  keep1 = np.asarray(batch.attention_mask[1]).astype(bool)
  np.testing.assert_array_equal(np.asarray(out.tokens[0])[keep0], np.asarray(batch.tokens[1])[keep1])
  np.testing.assert_array_equal(out.position[0][keep0], np.arange(keep0.sum()))
  np.testing.assert_array_equal(np.asarray(out.loss_mask[0])[keep0], np.asarray(batch.loss_mask[1])[keep1])
