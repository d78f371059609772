"""Two-armed bandit: payoff statistics (fixed seed), parsing, rendering, replay, no retracing."""
import functools
import math

import chex
import jax
import numpy as np
import pytest

from agent_rl.envs import bandit, base
import batched
from conftest import CharTokenizer

TOK = CharTokenizer()
N = 1024     # every batched call uses N rows: one compile per env
A_LEN = 48
ENV = bandit.Bandit(tokenizer=TOK)


@functools.partial(jax.jit, static_argnums=0)
@chex.assert_max_traces(n=2)  # ENV and the custom-payoff env; nothing retraces
def _episode(env, keys, tasks, actions):
  states, obs0 = jax.vmap(env.reset)(keys, tasks)
  states, obs, reward, done, info = jax.vmap(env.step)(states, actions)
  return obs0, obs, reward, done, info


def _actions(texts):
  return batched.texts(TOK, texts, A_LEN, rows=N, strict=True)


def _tasks(env, seed):
  tasks = jax.device_get(jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.key(seed), N)))
  return tasks, [jax.tree.map(lambda x: x[k], tasks) for k in range(N)]


def _run(env, seed, choose):
  """Episodes where the agent answers `choose(low_name, high_name)`."""
  tasks, tl = _tasks(env, seed)
  texts = [f"<think>hmm</think><answer>{choose(*env.pairs[int(t.pair)])}</answer>" for t in tl]
  keys = jax.random.split(jax.random.key(seed + 1000), N)
  return tl, keys, tasks, jax.device_get(_episode(env, keys, tasks, _actions(texts)))


def test_payoff_statistics_match_ragen_distributions():
  _, _, _, (_, _, r_lo, done, info_lo) = _run(ENV, 0, lambda lo, hi: lo)
  assert np.all(r_lo == np.float32(0.1)) and np.all(done) and np.all(info_lo["valid_action"])
  _, _, _, (_, _, r_hi, _, info_hi) = _run(ENV, 1, lambda lo, hi: hi)
  assert set(np.unique(r_hi)) <= {0.0, 1.0}
  # Binomial(N, 0.25) jackpot count: a 4-sigma band (fails with probability < 1e-4 for a
  # correct env; the seed is fixed, so the test is deterministic).
  k, p = int(np.sum(r_hi == 1.0)), 0.25
  assert abs(k - N * p) < 4 * math.sqrt(N * p * (1 - p)), k
  # The expert arm (higher mean) is the high-risk one, and it wins on average here too.
  lo_mean, hi_mean = ENV.means
  assert hi_mean == pytest.approx(0.25) and lo_mean == pytest.approx(0.1) and ENV.best_arm == 1
  assert r_hi.mean() > r_lo.mean()
  assert np.all(info_hi["success"]) and not np.any(info_lo["success"])


def test_custom_payoffs_and_expert_choice():
  env = bandit.Bandit(tokenizer=TOK, lo_arm_score=0.5, hi_arm_hiscore=2.0, hi_arm_loscore=-1.0,
                      hi_arm_hiscore_prob=0.4, split="test")
  assert env.means == pytest.approx((0.5, 0.2)) and env.best_arm == 0
  tl, _, _, (_, obs, r, _, info) = _run(env, 2, lambda lo, hi: hi)
  k, p = int(np.sum(r == 2.0)), 0.4
  assert set(np.unique(r)) <= {2.0, -1.0}
  assert abs(k - N * p) < 4 * math.sqrt(N * p * (1 - p)), k
  assert not np.any(info["success"])
  t = tl[0]
  assert TOK.decode(obs.tokens[0, :obs.length[0]]) == f"{env.pairs[int(t.pair)][1]}: {float(r[0])!r} points"
  # The solver's arm is the expert arm and succeeds.
  _, _, _, (_, _, r, _, info) = _run(env, 3, lambda lo, hi: lo)
  assert np.all(info["success"]) and np.all(r == np.float32(0.5))
  assert env.solve(tl[0]) == [env.pairs[int(tl[0].pair)][0]]


def test_replay_is_exact_and_keys_differ():
  _, keys, tasks, (_, _, r1, _, i1) = _run(ENV, 4, lambda lo, hi: hi)
  texts = [f"<answer>{ENV.solve(jax.tree.map(lambda x: x[k], tasks))[0]}</answer>" for k in range(N)]
  _, _, r2, _, i2 = _episode(ENV, keys, tasks, _actions(texts))
  np.testing.assert_array_equal(r1, np.asarray(r2))
  np.testing.assert_array_equal(i1["state_hash"], np.asarray(i2["state_hash"]))
  # Same task, different episode keys (a GRPO group): payoffs vary.
  same = jax.tree.map(lambda x: np.broadcast_to(x[:1], x.shape), tasks)
  _, _, r3, _, _ = _episode(ENV, jax.random.split(jax.random.key(7), N), same, _actions(texts[:1] * N))
  assert len(np.unique(np.asarray(r3))) == 2


def test_parsing_rendering_and_invalid_answers():
  tasks, tl = _tasks(ENV, 5)
  texts = []
  for k, t in enumerate(tl):
    lo, hi = ENV.pairs[int(t.pair)]
    other = ENV.pairs[(int(t.pair) + 1) % len(ENV.pairs)][0]
    texts.append([f"<answer>  {lo.upper()} </answer>", f"<answer>{hi.lower()}</answer>",
                  f"<answer>{other}</answer>", f"{hi}", f"<answer>{hi} || {lo}</answer>",
                  "<answer></answer>", f"<answer>{lo}{hi}</answer>", f"<think>{hi}</think><answer>{lo}"][k % 8])
  obs0, obs, r, done, info = jax.device_get(_episode(ENV, jax.random.split(jax.random.key(0), N), tasks,
                                                     _actions(texts)))
  want_valid = np.array([k % 8 in (0, 1, 4) for k in range(N)])
  np.testing.assert_array_equal(info["valid_action"], want_valid)
  np.testing.assert_allclose(info["reward_terms"][~want_valid], [[0.0, 1.0]] * int((~want_valid).sum()))
  np.testing.assert_allclose(info["reward_terms"][want_valid, 1], 0.0)
  np.testing.assert_allclose(r, np.where(want_valid, info["reward_terms"][:, 0], -0.1))
  assert not np.any(info["success"][~want_valid])
  assert np.all(done)
  for k in range(16):
    t = tl[k]
    assert TOK.decode(obs0.tokens[k, :obs0.length[k]]) == ENV.render_text(t)
    lo, hi = ENV.pairs[int(t.pair)]
    after = TOK.decode(obs.tokens[k, :obs.length[k]])
    if want_valid[k]:
      if k % 8 == 0:
        want = f"{lo}: {ENV.lo_arm_score!r} points"
      else:
        want = f"{hi}: {ENV.hi_arm_hiscore if r[k] == 1.0 else ENV.hi_arm_loscore!r} points"
      assert after == want
    else:
      assert after == "Invalid answer: no arm pulled."
  assert int(obs0.length.max()) <= ENV.obs_len and int(obs.length.max()) <= ENV.obs_len
  # Order is randomized: the high-risk arm is shown first about half the time.
  assert 0.4 < float(np.mean(tasks.swap)) < 0.6
  assert set(np.unique(tasks.pair)) == set(range(len(ENV.pairs)))


def test_host_helpers_and_errors():
  t = ENV.task_from_names("Phoenix", "Turtle")
  assert ENV.shown_names(t) == ("Phoenix", "Turtle") and ENV.solve(t) == ["Phoenix"]
  assert ENV.render_text(t) == "Arms: Phoenix and Turtle. Which arm do you pull?"
  assert isinstance(base.make("bandit", tokenizer=TOK), bandit.Bandit)
  with pytest.raises(ValueError, match="not an arm pair"):
    ENV.task_from_names("Phoenix", "Teacher")
  with pytest.raises(ValueError, match="split"):
    bandit.Bandit(tokenizer=TOK, split="dev")
  with pytest.raises(ValueError, match="hi_arm_hiscore_prob"):
    bandit.Bandit(tokenizer=TOK, hi_arm_hiscore_prob=1.5)
