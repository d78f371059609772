"""CalcMath vs the plain-Python reference (reference.py): generator replayed on the same draws,
gold steps evaluated with fractions, solver plans through the jitted step, the calculator on
hypothesis expressions, fuzzed turns, faults from the key at the configured rates, budget,
construction errors, state hashes."""
from fractions import Fraction

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import arith_reference as ar
from agent_rl import envs
from agent_rl.envs.calc_math import CalcMath, calc, problem
import batched
from batched import vreset, vsample, vstep
from calc_math import reference as ref
from conftest import CharTokenizer

TOK = CharTokenizer()
A_LEN = 96
B = 16
# One env config for every test (each config costs a compile of the step, ~30 s on 2 cores):
# faults on, the problem repeated after each result; rows the host knows to be faulted
# (calc.fault_draws of the episode key and turn) are checked against the fault messages.
FAULT, BUSY = 0.25, 0.15
ENV = CalcMath(tokenizer=TOK, max_digits=4, fault_rate=FAULT, busy_rate=BUSY, max_turns=10,
               max_calls=8, repeat_problem=True)
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _actions(texts):
  return batched.texts(TOK, texts, A_LEN)


def _one(tree, k):
  return jax.tree.map(lambda x: x[k], tree)


def _decode(obs, k):
  return TOK.decode(np.asarray(obs.tokens[k])[:int(obs.length[k])])


def _fresh(env, seed=0):
  tasks = vsample(env, jax.random.key(seed), B)
  states, obs = vreset(env, jax.random.split(jax.random.key(seed + 1), B), tasks)
  return tasks, states, obs


def _faults(states, turn):
  """Host prediction of this turn's injected faults per row: (fatal [B], busy [B])."""
  d = np.stack([np.asarray(calc.fault_draws(jax.random.wrap_key_data(k), turn))
                for k in np.asarray(states.key)])
  fatal = d[:, 0] < FAULT
  return fatal, ~fatal & (d[:, 1] < BUSY)


def _feedback(obs, k, task):
  """The observation with the repeated problem stripped (asserted to be there)."""
  text, problem_text = _decode(obs, k), ENV.render_text(task)
  assert text.endswith(problem_text)
  return text[:len(text) - len(problem_text)]


def test_generator_matches_reference_and_gold_steps_evaluate_to_values():
  keys = jax.random.split(jax.random.key(3), B)
  tasks = jax.device_get(vsample(ENV, jax.random.key(3), B))
  for k in range(B):
    u = np.asarray(jax.random.uniform(keys[k], (ENV.problem_config.draws(),)))
    want = ref.sample(u, ENV.min_steps, ENV.max_steps, ENV.min_digits, ENV.max_digits,
                      ENV.max_factor, ENV.max_value)
    t = _one(tasks, k)
    n = int(t.num_steps)
    got = dict(name=int(t.name), item=int(t.item), start=int(t.start), digits=int(t.digits),
               ops=list(np.asarray(t.ops)[:n]), operands=list(np.asarray(t.operands)[:n]),
               values=list(np.asarray(t.values)[:n]), answer=int(t.answer))
    assert got == want, k
    vals = ref.gold_values(problem.gold_steps(t))
    assert vals == [Fraction(v) for v in want["values"]] and vals[-1] == want["answer"]
    assert all(0 <= v <= ENV.max_value for v in want["values"])
    assert 10 ** (want["digits"] - 1) <= want["start"] < 10 ** want["digits"]
  assert len({int(d) for d in tasks.digits}) >= 3 and len({int(n) for n in tasks.num_steps}) == 3


def test_reset_renders_the_problem_text():
  tasks, _, obs = _fresh(ENV)
  for k in range(B):
    t = _one(jax.device_get(tasks), k)
    text = ENV.render_text(t)
    assert _decode(obs, k) == text
    assert text.startswith(f"{ref.NAMES[int(t.name)]} has {int(t.start)} {ref.ITEMS[int(t.item)]}.")
    assert text.count(" Then ") == int(t.num_steps)


def test_solver_plans_with_retries_succeed_through_jitted_step():
  """The expert plan, each call repeated while the tool faults (the host knows when)."""
  tasks, states, _ = _fresh(ENV, seed=5)
  host = jax.device_get(tasks)
  plans = [ENV.solve(_one(host, k)) for k in range(B)]
  pos, done, retried = np.zeros(B, int), np.zeros(B, bool), 0
  for turn in range(ENV.max_turns):
    fatal, busy = _faults(states, turn)
    texts = [p[min(i, len(p) - 1)] for p, i in zip(plans, pos)]
    states, obs, reward, d, info = jax.device_get(vstep(ENV, states, _actions(texts)))
    for k, p in enumerate(plans):
      if done[k]:
        continue
      fb = _feedback(obs, k, _one(host, k)) if not d[k] else _decode(obs, k)
      if pos[k] < len(p) - 1:
        if fatal[k] or busy[k]:
          assert info["tool_error"][k] and bool(info["fatal"][k]) == fatal[k]
          assert ("crashed" if fatal[k] else "busy") in fb
          retried += 1
          continue
        value = ref.gold_values([p[pos[k]][7:-8]])[0]
        assert fb == f"\n\n<information>{ref.result_text(value)}</information>\n\n"
        assert info["step_correct"][k] and info["tool_call"][k] and not info["tool_error"][k]
      else:   # answers are never faulted
        assert info["success"][k] and info["answered"][k] and d[k] and reward[k] == 1.0
        assert "correct" in fb
      pos[k] += 1
    done |= d
  assert done.all() and retried > 0


def test_solver_rejects_plans_over_the_budget():
  env = CalcMath(tokenizer=TOK, min_steps=4, max_steps=4, max_calls=3)
  with pytest.raises(ValueError, match="max_calls=3"):
    env.solve(_one(jax.device_get(vsample(ENV, jax.random.key(0), B)), 0).replace(num_steps=4))


_NUM = st.integers(0, 10 ** 6).map(str)


def _expr(depth=3):
  if depth == 0:
    return _NUM
  sub = _expr(depth - 1)
  return st.one_of(_NUM, st.builds(lambda a, op, b: f"{a} {op} {b}", sub, st.sampled_from("+-*/"), sub),
                   sub.map(lambda e: f"({e})"), sub.map(lambda e: f"-{e}"))


@SETTINGS
@given(st.lists(_expr(), min_size=B, max_size=B))
def test_calculator_matches_fractions(exprs):
  tasks, states, _ = _fresh(ENV)
  fatal, busy = _faults(states, 0)
  _, obs, _, _, info = jax.device_get(vstep(ENV, states, _actions([f"<calc>{e}</calc>" for e in exprs])))
  host = jax.device_get(tasks)
  names = {ar.SYNTAX: "calc_syntax", ar.DIV_ZERO: "calc_div_zero", ar.OVERFLOW: "calc_overflow"}
  for k, e in enumerate(exprs):
    fb = _feedback(obs, k, _one(host, k))
    code, value, _ = ar.evaluate(e.encode())
    if len(e) > ENV.max_expr_bytes:
      assert info["tool_error"][k] and "longer than" in fb
    elif fatal[k] or busy[k]:
      assert fb == ENV.fmt.message_text(calc.FAULT if fatal[k] else calc.BUSY, 0)
    elif code == ar.OK:
      assert fb == f"\n\n<information>{ref.result_text(value)}</information>\n\n", e
      assert not info["tool_error"][k]
    else:
      assert fb == ENV.fmt.message_text(calc.E.code(names[code]), 0), e
      assert info["tool_error"][k] and not info["fatal"][k]
      np.testing.assert_array_equal(info["reward_terms"][k], [0, 0, 0, 1])


_PIECES = ["<calc>", "</calc>", "<answer>", "</answer>", "<think>", "</think>", " ", "1", "23",
           "-", "+", "*", "/", "(", ")", "x", "7", "0", "\n", "ab", "√"]


@SETTINGS
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=14).map("".join), min_size=B, max_size=B))
def test_fuzzed_turns_never_raise_and_match_reference(texts):
  tasks, states, _ = _fresh(ENV)
  fatal, busy = _faults(states, 0)
  _, _, reward, done, info = jax.device_get(vstep(ENV, states, _actions(texts)))
  host = jax.device_get(tasks)
  for k, text in enumerate(texts):
    t = _one(host, k)
    gold = list(np.asarray(t.values)[:int(t.num_steps)])
    exp = ref.expected_turn(text.encode(), int(t.answer), gold, ENV.max_expr_bytes)
    if exp["tag"] == "calc" and exp["outcome"] in ("ok", "tool_error") and (fatal[k] or busy[k]):
      exp = dict(exp, outcome="tool_error", step_correct=False)
    terms = {"success": [1, 0, 0, 0], "wrong": [0, 1, 0, 0], "invalid": [0, 0, 1, 0],
             "tool_error": [0, 0, 0, 1], "ok": [0, 0, 0, 0]}[exp["outcome"]]
    np.testing.assert_array_equal(info["reward_terms"][k], terms, err_msg=text)
    assert bool(info["valid_action"][k]) == (exp["outcome"] != "invalid"), text
    assert bool(done[k]) == (exp["outcome"] in ("success", "wrong")), text
    assert bool(info["step_correct"][k]) == bool(exp.get("step_correct", False)), text
    assert bool(info["tool_call"][k]) == (exp["tag"] == "calc"), text
    np.testing.assert_allclose(reward[k], np.dot(terms, ENV.reward_weights), err_msg=text)


def _calls(seed, turns):
  """Every episode calls `<calc> 1 + 1 </calc>` `turns` times; -> (infos, observations)."""
  tasks = vsample(ENV, jax.random.key(0), B)
  states, _ = vreset(ENV, jax.random.split(jax.random.key(seed), B), tasks)
  infos, obs = [], []
  for _ in range(turns):
    states, o, _, _, info = vstep(ENV, states, _actions(["<calc> 1 + 1 </calc>"] * B))
    infos.append(jax.device_get(info))
    obs.append(jax.device_get(o))
  return infos, obs


def test_faults_are_deterministic_from_the_key_and_at_the_configured_rate():
  runs = [_calls(seed, ENV.max_calls)[0] for seed in range(8)]
  again = _calls(0, ENV.max_calls)[0]
  for a, b in zip(runs[0], again):
    for key in ("fatal", "tool_error", "state_hash", "reward_terms"):
      np.testing.assert_array_equal(a[key], b[key])
  assert any(not np.array_equal(a["fatal"], b["fatal"]) for a, b in zip(runs[0], runs[1]))
  fatal = np.concatenate([i["fatal"] for r in runs for i in r])
  err = np.concatenate([i["tool_error"] for r in runs for i in r])
  n = fatal.size                                # 8 seeds * 8 calls * 16 episodes
  assert abs(fatal.mean() - FAULT) < 4 * np.sqrt(FAULT * (1 - FAULT) / n)
  busy = (1 - FAULT) * BUSY
  assert abs((err & ~fatal).mean() - busy) < 4 * np.sqrt(busy * (1 - busy) / n)


def test_tool_budget_and_declared_fatal_codes():
  infos, obs = _calls(0, ENV.max_calls + 1)
  assert infos[-1]["tool_error"].all() and not infos[-1]["fatal"].any()
  assert _decode(obs[-1], 0).startswith(f"\n\n<information>error: tool budget of {ENV.max_calls}")
  assert ENV.fmt.fatal_codes == (calc.FAULT,)
  every = CalcMath(tokenizer=TOK, fatal="*")
  assert set(every.fmt.fatal_codes) >= {calc.FAULT, calc.BUSY, calc.SYNTAX, calc.E.NO_CALL}


def test_state_hash_tracks_the_state():
  _, states, _ = _fresh(ENV)
  s1, _, _, _, i1 = vstep(ENV, states, _actions(["<calc> 1 + 1 </calc>"] * B))
  s2, _, _, _, i2 = vstep(ENV, states, _actions(["<calc> 1 + 1 </calc>"] * B))
  np.testing.assert_array_equal(i1["state_hash"], i2["state_hash"])
  np.testing.assert_array_equal(jax.vmap(ENV.state_hash)(s1), i1["state_hash"])
  assert not np.array_equal(jax.vmap(ENV.state_hash)(states), i1["state_hash"])


def test_registered_and_bad_config_names_the_field():
  assert isinstance(envs.make("calc_math", tokenizer=TOK), CalcMath)
  for kw, field in ((dict(min_steps=3, max_steps=2), "min_steps"), (dict(max_factor=1), "max_factor"),
                    (dict(fault_rate=1.5), "fault_rate"), (dict(max_value=2 ** 31), "max_value"),
                    (dict(max_digits=9), "max_digits"), (dict(max_turns=0), "max_turns")):
    with pytest.raises(ValueError, match=field):
      CalcMath(tokenizer=TOK, **kw)
  with pytest.raises(ValueError, match="tokenizer"):
    CalcMath(tokenizer=None)


def test_progress_counts_gold_values_computed():
  tasks, states, _ = _fresh(ENV, seed=5)
  host = jax.device_get(tasks)
  first = [ENV.solve(_one(host, k))[0] for k in range(B)]
  fatal, busy = _faults(states, 0)
  states, _, _, _, _ = vstep(ENV, states, _actions(first))
  want = np.where(fatal | busy, 0.0, 1.0 / np.asarray(host.num_steps))
  np.testing.assert_allclose(jax.vmap(ENV.progress)(states), want, rtol=1e-6)
