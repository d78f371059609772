"""LedgerStream through jitted env.step: solver plans answer every question right, the
observations decode to render_text, tool errors come back as messages, QA turns are
functions of (final bank, question) only, fuzzed turns never raise, construction errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agent_rl import envs
from agent_rl.envs.ledger_stream import LedgerStream, memory as M
from agent_rl.envs.ledger_stream.env import ANSWER_EARLY, READ_ONLY
from agent_rl.envs.tools import errors as E
from ledger_stream import reference as R
from ledger_stream.common import TOK, decode, make_env, row, sample, turns, vreset, vstep

N = 8   # one batch size for every test: vstep compiles once


def replay(env, tasks, plans):
  """Steps a batch through per-episode turn texts; returns the per-turn outputs. Fewer
  plans than tasks: the other rows play their solver plans."""
  plans = list(plans) + [env.solve(row(tasks, i)) for i in range(len(plans), N)]
  state, obs = vreset(env, tasks)
  outs = [(state, obs)]
  for t in range(env.num_turns):
    state, obs, r, d, info = vstep(env, state, turns([p[t] for p in plans]))
    outs.append((state, obs, r, d, info))
  return outs


def test_solver_plans_answer_every_question():
  env = make_env()
  assert envs.make("ledger_stream", tokenizer=TOK, **{k: getattr(env, k) for k in (
      "num_accounts", "num_names", "num_slots", "num_chunks", "chunk_events", "num_questions",
      "raw_window", "max_ops", "max_arg_bytes", "max_bytes")}) == env
  tasks = sample(env, 1, N)
  plans = [env.solve(row(tasks, i)) for i in range(N)]
  assert all(len(p) == env.num_turns for p in plans)
  outs = replay(env, tasks, plans)
  c = env.num_chunks
  for t, (state, obs, r, d, info) in enumerate(outs[1:]):
    np.testing.assert_array_equal(info["valid_action"], True)
    np.testing.assert_array_equal(info["question_index"], 0 if t < c else t - c + 1)
    np.testing.assert_array_equal(info["tool_call"], t < c)
    np.testing.assert_array_equal(info["answered"], t >= c)
    np.testing.assert_array_equal(info["qa_correct"], t >= c)
    np.testing.assert_allclose(r, 1.0 if t >= c else 0.0)
    np.testing.assert_array_equal(d, t == env.num_turns - 1)
    np.testing.assert_array_equal(info["success"], t == env.num_turns - 1)
    if t == c - 1:        # after the stream the bank holds exactly the live accounts
      for i in range(N):
        accts = R.replay(row(tasks, i).events.tolist(), env.num_accounts)
        bank = sorted((int(n), int(b)) for n, b in zip(state.bank.name[i], state.bank.balance[i])
                      if n >= 0)
        assert bank == sorted((a["name"], a["balance"]) for a in accts if a["live"])
  for t, out in enumerate(outs):          # observations decode to render_text
    for i in range(3):
      assert decode(out[1], i) == env.render_text(row(out[0], i)), (t, i)
  text = decode(outs[c][1], 0)
  assert text.startswith("Memory:\n") and "Question 1/3: " in text


def test_tool_errors_and_phases():
  env = make_env()
  tasks = sample(env, 2, N)
  plan = env.solve(row(tasks, 0))
  bad = ["<memory> delete 3 </memory>", "<answer> alice </answer>", "<memory> add bob 5",
         "<memory> noop </memory>", "<answer> 999999 </answer>", plan[env.num_chunks + 2]]
  outs = replay(env, tasks, [bad])
  info = [o[4] for o in outs[1:]]
  terms = np.stack([np.asarray(i["reward_terms"][0]) for i in info])
  # turn 0: op on an empty slot -> tool error (slot empty) with its message next turn
  assert terms[0].tolist() == [0, 0, 1] and bool(info[0]["tool_error"][0])
  assert "error: that memory slot is empty" in decode(outs[1][1], 0)
  assert int(outs[1][0].error[0]) == M.SLOT_EMPTY
  # turn 1: an answer during the stream -> format error
  assert terms[1].tolist() == [0, 1, 0] and int(outs[2][0].error[0]) == ANSWER_EARLY
  assert "error: the stream is not over" in decode(outs[2][1], 0)
  # turn 2: unclosed tag -> format error with the tool layer's message (QA turn next: no feedback)
  assert terms[2].tolist() == [0, 1, 0] and int(outs[3][0].error[0]) == E.UNCLOSED
  # QA turn 1: a memory call is read-only -> format error, wrong
  assert terms[3].tolist() == [0, 1, 0] and int(outs[4][0].error[0]) == READ_ONLY
  assert terms[4].tolist() == [0, 0, 0] and not bool(info[4]["qa_correct"][0])
  assert terms[5][0] == 1.0 and bool(outs[6][3][0]) and not bool(info[5]["success"][0])
  np.testing.assert_array_equal(outs[6][0].bank.name[0], -1)       # bad calls wrote nothing


def test_qa_turns_see_only_final_bank_and_question():
  """QA observations equal those of a fresh state holding just (final bank, turn); two
  different answers to earlier questions leave later QA observations unchanged."""
  env = make_env()
  tasks = sample(env, 3, N)
  plan = env.solve(row(tasks, 0))
  c = env.num_chunks
  wrong = plan[:c] + ["<answer> zzz </answer>", "<memory> noop </memory>", plan[-1]]
  outs_a = replay(env, tasks, [plan])
  outs_b = replay(env, tasks, [wrong])
  for t in range(c, env.num_turns):
    np.testing.assert_array_equal(outs_a[t][1].tokens, outs_b[t][1].tokens)
  final = outs_a[c][0]
  for t in range(c, env.num_turns):
    fresh = env.initial_state(row(tasks, 0)).replace(bank=row(final.bank, 0), turn=jnp.int32(t))
    assert env.render_text(fresh) == decode(outs_a[t][1], 0)


def test_state_hash_and_determinism():
  env = make_env()
  tasks = sample(env, 4, N)
  plans = [env.solve(row(tasks, i)) for i in range(N)]
  a, b = replay(env, tasks, plans), replay(env, tasks, plans)
  for x, y in zip(a[1:], b[1:]):
    jax.tree.map(np.testing.assert_array_equal, x, y)
  h = [np.asarray(o[4]["state_hash"]) for o in a[1:]]
  assert len({int(v) for v in np.concatenate(h)}) == len(np.concatenate(h))  # distinct states


ACTION = st.one_of(
    st.text(alphabet=st.sampled_from(list("<>/ |:0123456789abcdemnoprtuwy\n")), max_size=90),
    st.builds(lambda t, a: f"<{t}>{a}</{t}>", st.sampled_from(["memory", "answer", "think", "mem"]),
              st.text(alphabet=st.sampled_from(list(" |:-0123456789adelnopbucrtix")), max_size=80)))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ACTION, min_size=6, max_size=6))
def test_fuzzed_turns_never_raise(actions):
  env = make_env()
  tasks = sample(env, 5, N)
  outs = replay(env, tasks, [actions])
  for t, out in enumerate(outs[1:]):
    state, obs, r, d, info = out
    assert np.isfinite(np.asarray(r)).all() and int(obs.length[0]) <= env.obs_len
    assert int(state.turn[0]) == t + 1
    names = np.asarray(state.bank.name[0])
    assert ((names >= -1) & (names < env.num_names)).all()
    assert (np.asarray(state.bank.balance[0]) >= 0).all()
    assert decode(obs, 0) == env.render_text(row(state, 0))


@pytest.mark.parametrize("kw, field", [
    (dict(num_slots=2), "num_slots"), (dict(max_ops=1), "max_ops"),
    (dict(question_types=("balance", "oops")), "question_types"), (dict(num_names=2), "num_names"),
    (dict(event_weights=(1, 1, 1)), "event_weights"), (dict(raw_window=99), "raw_window"),
    (dict(reward_weights=(1.0,)), "reward_weights"), (dict(num_chunks=0), "num_chunks")])
def test_bad_config_names_the_field(kw, field):
  from ledger_stream.common import SMALL
  with pytest.raises(ValueError, match=field):
    LedgerStream(tokenizer=TOK, **{**SMALL, **kw})


@pytest.mark.slow
def test_full_config_env_solves_and_fits():
  """configs/uma_ledger.py's full-scale env: expert plans replayed answer everything."""
  import importlib.util
  import os
  path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs", "uma_ledger.py")
  spec = importlib.util.spec_from_file_location("uma_ledger", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  env = LedgerStream(tokenizer=TOK, **mod.FULL_ENV)
  tasks = sample(env, 6, N)
  outs = replay(env, tasks, [env.solve(row(tasks, i)) for i in range(N)])
  np.testing.assert_array_equal(outs[-1][4]["success"], True)
