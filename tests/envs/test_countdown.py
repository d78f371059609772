"""Countdown env: outcomes vs the Fraction reference, generator/solver, rendering, no retracing."""
import functools
import itertools
import random
from fractions import Fraction

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import arith_reference as ref
from agent_rl.envs import base, countdown
import batched
from batched import vreset, vsample
from conftest import CharTokenizer

TOK = CharTokenizer(extra_chars="×÷−\n\t")
A_LEN = 80   # action tokens (one per char with TOK)
B = 16       # every batched call uses B rows: one compile per env config
ENV = countdown.Countdown(tokenizer=TOK)
ENV_ALL = countdown.Countdown(tokenizer=TOK, use_all=True, max_turns=2, min_numbers=4)


@functools.partial(jax.jit, static_argnums=0)
@chex.assert_max_traces(n=3)  # ENV, ENV_ALL and the sentencepiece env; nothing retraces
def _step(env, states, actions):
  return jax.vmap(env.step)(states, actions)


def _tasks(env, seed, n):
  """n sampled tasks as a host batch and as a list of single tasks."""
  tasks = jax.device_get(vsample(env, jax.random.key(seed), n))
  return tasks, [jax.tree.map(lambda x: x[k], tasks) for k in range(n)]


def _actions(tok, texts, length=A_LEN):
  return batched.texts(tok, texts, length, rows=B)


def _stack(tasks):
  tasks = list(tasks) + [tasks[0]] * (B - len(tasks))
  return jax.tree.map(lambda *x: jnp.stack(x), *tasks)


def _expected(env, raw: bytes, numbers, target):
  """Reference outcome -> (valid, success, terms)."""
  span = ref.answer_span(raw, env.max_answer_bytes)
  code, value, lits = ref.evaluate(span) if span is not None else (ref.SYNTAX, None, None)
  valid = code == ref.OK
  success = valid and ref.uses_allowed(lits, numbers, env.use_all) and value == target
  terms = [float(success), float(valid and not success), float(not valid)]
  return valid, success, terms


def _check_outcomes(env, task, texts):
  numbers = [int(x) for x in np.asarray(task.numbers)[:int(task.count)]]
  states, _ = vreset(env, jax.random.split(jax.random.key(0), B), _stack([task]))
  _, obs, reward, done, info = jax.device_get(_step(env, states, _actions(TOK, texts)))
  for k, t in enumerate(texts):
    valid, success, terms = _expected(env, t.encode(), numbers, int(task.target))
    assert bool(info["valid_action"][k]) == valid, t
    assert bool(info["success"][k]) == success, t
    np.testing.assert_allclose(info["reward_terms"][k], terms, err_msg=t)
    assert reward[k] == pytest.approx(np.dot(terms, [env.success_reward, env.format_reward,
                                                     env.invalid_penalty]))
  return info, obs


def test_outcomes_and_reward_terms():
  task = ENV.task_from_numbers([3, 4, 6], 18)
  texts = ["<answer>3 * 6</answer>", "<think>3 times 6</think><answer> 3 × 6 </answer>",
           "<answer>(4 - 3) * 6 * 3</answer>", "<answer>3 + 4 + 6</answer>", "<answer>18</answer>",
           "<answer>6 / (4 - 4)</answer>", "<answer>3 +</answer>", "3 * 6", "<answer>3 * 6",
           "<answer></answer>", "<answer>-3 * -6</answer>", "<answer>(3*6)</answer> <answer>1</answer>",
           "<answer>6*3=18</answer>", "<answer>36/(6/3)</answer>", "<answer>6 * (4 - 3) * 3</answer>"]
  info, _ = _check_outcomes(ENV, task, texts)
  assert list(np.asarray(info["success"])[:3]) == [True, True, False]
  # use_all: a subset is well-formed but wrong; all four numbers exactly once succeeds.
  task4 = ENV_ALL.task_from_numbers([3, 4, 6, 1], 18)
  info, _ = _check_outcomes(ENV_ALL, task4, ["<answer>3 * 6</answer>", "<answer>(4 - 1) * 6 / 3 * 3</answer>",
                                             "<answer>(4 - 3) * 6 * 3 * 1</answer>"])
  assert list(np.asarray(info["success"])[:3]) == [False, False, False]
  _check_outcomes(ENV_ALL, task4, ["<answer>6 * 3 * (4 - 3) * 1</answer>", "<answer>6*3*(4-1)/3</answer>"])


_PIECES = ["<answer>", "</answer>", "(", ")", "+", "-", "*", "/", " ", "3", "4", "6", "1", "0", "×", "x"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=20), min_size=B, max_size=B))
def test_fuzzed_tokens_never_crash_and_match_reference(seqs):
  _check_outcomes(ENV, ENV.task_from_numbers([3, 4, 6], 18), ["".join(s) for s in seqs])


def test_generated_tasks_are_solvable_and_the_solver_succeeds():
  for env, n, seed in ((ENV, 128, 0), (ENV_ALL, 32, 1)):
    tasks, tl = _tasks(env, seed, n)
    count = np.asarray(tasks.count)
    assert count.min() >= env.min_numbers and count.max() <= env.max_numbers
    if env is ENV:
      assert set(count) == {3, 4}
    for k, task in enumerate(tl):
      nums = [int(x) for x in task.numbers[:count[k]]]
      assert all(env.min_value <= x <= env.max_value for x in nums)
      assert not np.any(task.numbers[count[k]:])
      assert 1 <= int(task.target) <= env.max_target
      (expr,) = env.solve(task)
      code, value, lits = ref.evaluate(expr.encode())
      assert code == ref.OK and value == int(task.target) and ref.uses_allowed(lits, nums, env.use_all)
    for i in range(0, n, B):
      batch = tl[i:i + B]
      texts = [f"<think>ok</think><answer>{env.solve(t)[0]}</answer>" for t in batch]
      states, _ = vreset(env, jax.random.split(jax.random.key(i), B), _stack(batch))
      _, _, reward, done, info = _step(env, states, _actions(TOK, texts))
      assert np.all(info["success"]) and np.all(done) and np.allclose(reward, env.success_reward), texts


def _reachable(numbers):
  """Independent reference: values reachable from each subset (bitmask DP over exact fractions)."""
  n = len(numbers)
  vals = {1 << i: {Fraction(x)} for i, x in enumerate(numbers)}
  for mask in range(1, 1 << n):
    if mask in vals:
      continue
    out = set()
    sub = (mask - 1) & mask
    while sub:
      rest = mask ^ sub
      for x, y in itertools.product(vals[sub], vals[rest]):
        out |= {x + y, x - y, x * y}
        if y:
          out.add(x / y)
      sub = (sub - 1) & mask
    vals[mask] = out
  return vals


def test_solver_against_subset_dp():
  rng = random.Random(0)
  for _ in range(60):
    numbers = [rng.randint(1, 13) for _ in range(rng.randint(1, 4))]
    target = rng.randint(0, 60)
    vals = _reachable(numbers)
    full = (1 << len(numbers)) - 1
    for use_all in (False, True):
      want = Fraction(target) in (vals[full] if use_all else set().union(*vals.values()))
      got = countdown.solve_numbers(numbers, target, use_all=use_all)
      assert (got is not None) == want, (numbers, target, use_all)
      if got is not None:
        code, value, lits = ref.evaluate(got.encode())
        assert code == ref.OK and value == target and ref.uses_allowed(lits, numbers, use_all)
  with pytest.raises(ValueError, match="no solution"):
    ENV.solve(ENV.task_from_numbers([1, 1], 97))


def test_observations_render_the_task_and_feedback():
  tasks, tl = _tasks(ENV, 5, B)
  states, obs = vreset(ENV, jax.random.split(jax.random.key(0), B), tasks)
  for k in range(B):
    assert TOK.decode(obs.tokens[k, :obs.length[k]]) == ENV.render_text(tl[k])
    assert np.all(np.asarray(obs.tokens[k, obs.length[k]:]) == TOK.pad_id)
  texts = ["<answer>" + ENV.solve(tl[0])[0] + "</answer>", "<answer>1+</answer>", "<answer>99*99*99</answer>",
           "<answer>" + str(int(tl[3].numbers[0])) + "</answer>"] * 4
  _, obs, _, _, info = _step(ENV, states, _actions(TOK, texts))
  fb = countdown._FEEDBACK
  assert TOK.decode(obs.tokens[0, :obs.length[0]]) == ENV.render_text(tl[0], fb[0])
  assert TOK.decode(obs.tokens[1, :obs.length[1]]) == ENV.render_text(tl[1], fb[3])
  assert TOK.decode(obs.tokens[2, :obs.length[2]]) == ENV.render_text(tl[2], fb[2])
  want = fb[0] if int(tl[3].numbers[0]) == int(tl[3].target) else fb[1]
  assert TOK.decode(obs.tokens[3, :obs.length[3]]) == ENV.render_text(tl[3], want)
  assert int(np.max(obs.length)) <= ENV.obs_len


def test_multi_turn_feedback_and_absorbing_done():
  task = ENV_ALL.task_from_numbers([3, 4, 6, 1], 18)
  s0, _ = vreset(ENV_ALL, jax.random.split(jax.random.key(0), B), _stack([task]))
  wrong = _actions(TOK, ["<answer>3+4+6+1</answer>"] * B)
  right = _actions(TOK, ["<answer>3*4+6*1</answer>"] * B)
  s1, _, r1, d1, i1 = _step(ENV_ALL, s0, wrong)
  assert not np.any(d1) and np.allclose(r1, 0.1) and not np.any(i1["success"])
  s2, _, r2, d2, i2 = _step(ENV_ALL, s1, right)
  assert np.all(d2) and np.allclose(r2, 1.0) and np.all(i2["success"])
  s3, _, r3, d3, i3 = _step(ENV_ALL, s2, right)
  assert np.all(d3) and np.allclose(r3, 0.0) and not np.any(i3["valid_action"])
  assert np.all(i3["success"]) and np.all(i3["reward_terms"] == 0)   # absorbing, still solved
  hashes = [np.asarray(i["state_hash"]) for i in (i1, i2, i3)]
  assert hashes[0][0] != hashes[1][0] and hashes[1][0] == hashes[2][0]   # s3 == s2
  assert np.all(hashes[0] == hashes[0][0])                                  # equal states
  # Two wrong answers end the episode at max_turns without success.
  _, _, _, d, info = _step(ENV_ALL, s1, wrong)
  assert np.all(d) and not np.any(info["success"])
  assert np.all(info["truncated"])                       # ended by the turn budget
  assert not np.any(i1["truncated"] | i2["truncated"] | i3["truncated"])


@pytest.fixture(scope="module")
def cd_tok(tmp_path_factory):
  """A sentencepiece tokenizer trained on Countdown text (agent_rl.tokenizers)."""
  from agent_rl.tokenizers import Tokenizer, train_tokenizer
  texts = [ENV.instruction] + list(countdown._FEEDBACK)
  for t in _tasks(ENV, 1, 64)[1]:
    texts.append(ENV.render_text(t) + f"<answer>{ENV.solve(t)[0]}</answer>")
  path = str(tmp_path_factory.mktemp("tok") / "countdown.model")
  return Tokenizer.load(train_tokenizer(texts, path, vocab_size=360, hard_vocab_limit=False))


@pytest.mark.slow  # trains a tokenizer and compiles a third env (~25 s on a loaded 2-core box)
def test_sentencepiece_tokenizer_round_trip(cd_tok):
  sp_tok = cd_tok
  env = countdown.Countdown(tokenizer=sp_tok)
  tasks, tl = _tasks(env, 9, B)
  states, obs = vreset(env, jax.random.split(jax.random.key(0), B), tasks)
  for k in range(B):
    assert sp_tok.decode(obs.tokens[k, :obs.length[k]]) == env.render_text(tl[k])
  texts = [f"<think>try</think><answer>{env.solve(t)[0]}</answer>" for t in tl]
  _, _, _, _, info = _step(env, states, _actions(sp_tok, texts, length=A_LEN))
  assert np.all(info["success"])


def test_registry_and_validation_errors():
  env = base.make("countdown", tokenizer=TOK, max_numbers=5, max_target=500)
  assert isinstance(env, countdown.Countdown) and env.reward_names == ("success", "format", "invalid")
  same = countdown.Countdown(tokenizer=CharTokenizer(extra_chars="×÷−\n\t"), max_numbers=5, max_target=500)
  assert hash(env) == hash(same) and env == same and env != ENV
  with pytest.raises(ValueError, match="numbers must hold"):
    ENV.task_from_numbers([1, 2, 3, 4, 5], 10)
  with pytest.raises(ValueError, match="target"):
    ENV.task_from_numbers([1, 2], 1000)
  with pytest.raises(ValueError, match="numbers must lie"):
    ENV.task_from_numbers([1, 200], 10)
  with pytest.raises(ValueError, match="max_target"):
    countdown.Countdown(tokenizer=TOK, max_target=50)
  with pytest.raises(ValueError, match="min_numbers"):
    countdown.Countdown(tokenizer=TOK, min_numbers=5)
  with pytest.raises(ValueError, match="max_turns"):
    countdown.Countdown(tokenizer=TOK, max_turns=0)
