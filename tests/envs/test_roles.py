"""The roles wrapper's per-role reward scales (envs/roles.py `role_rewards`) against a plain
Python loop: random episodes of KB-SearchQA stepped by the wrapper and by the bare base env
with the same action strings; every step's role columns equal scale_k x the base's term,
the acting agent follows the schedule, the team reward and observations are the base's.
Without the option the wrapper is what it was (the base's terms, names and weights). Bad
`role_rewards` are start-up errors naming the field."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.agents.rewards import role_terms
from agent_rl.envs.base import Text
from conftest import CharTokenizer

TOK = CharTokenizer()
A_LEN = 72
BASE_KW = dict(num_entities=60, num_questions=32, max_hops=2, max_searches=2, max_turns=4,
               result_tokens=24, parametric_frac=0.25)
ROLES = ("searcher", "answerer")
SCHEDULE = (0, 0, 1)
PAY = (("f1", 0.2), ("em", 1.0))
BASE = envs.make("kb_search_qa", tokenizer=TOK, **BASE_KW)
PAID = envs.make("roles", tokenizer=TOK, base="kb_search_qa", roles=ROLES, schedule=SCHEDULE,
                 base_kwargs=BASE_KW, role_rewards=PAY)
PLAIN = envs.make("roles", tokenizer=TOK, base="kb_search_qa", roles=ROLES, schedule=SCHEDULE,
                  base_kwargs=BASE_KW)


@functools.partial(jax.jit, static_argnums=0)
def _reset(env, tasks):
  return jax.vmap(env.reset)(jax.random.split(jax.random.key(1), tasks.question.shape[0]), tasks)


@functools.partial(jax.jit, static_argnums=0)
def _step(env, state, action):
  return jax.vmap(env.step)(state, action)


def _text(strs):
  toks = np.zeros((len(strs), A_LEN), np.int32)
  lens = np.zeros((len(strs),), np.int32)
  for i, s in enumerate(strs):
    ids = TOK.encode(s)[:A_LEN]
    toks[i, :len(ids)], lens[i] = ids, len(ids)
  return Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))


def _decode(text, i):
  return TOK.decode(np.asarray(text.tokens[i])[:int(text.length[i])])


def _random_turns(rng, env, task, turns):
  """A turn per step: the expert's, a full / partial / wrong answer, a random search, garbage."""
  q = env.question(task)
  plan = env.solve(task)
  words = q.answer.split()
  out = []
  for t in range(turns):
    kind = rng.integers(6)
    out.append([plan[min(t, len(plan) - 1)], f"<answer>{q.answer}</answer>",
                f"<answer>{words[0]} x</answer>", "<answer>nobody</answer>",
                f"<search>{' '.join(rng.choice(['film', 'born', 'city', words[-1]], 2))}</search>",
                "no tags here <answer"][kind])
  return out


def _run(env, tasks, turns):
  state, obs = _reset(env, tasks)
  steps = [(None, obs, None, None, None)]
  for t in range(len(turns[0])):
    state, obs, reward, done, info = _step(env, state, _text([row[t] for row in turns]))
    steps.append((state, obs, reward, done, jax.tree.map(np.asarray, info)))
  return steps


@pytest.fixture(scope="module")
def episodes():
  n, t = 12, 4
  rng = np.random.default_rng(0)
  tasks = jax.vmap(BASE.sample_task)(jax.random.split(jax.random.key(7), n))
  turns = [_random_turns(rng, BASE, jax.tree.map(lambda x: x[i], tasks), t) for i in range(n)]
  return turns, _run(BASE, tasks, turns), _run(PAID, tasks, turns), _run(PLAIN, tasks, turns)


def test_role_columns_are_the_scaled_base_terms_and_agents_follow_the_schedule(episodes):
  turns, base, paid, _ = episodes
  names = BASE.reward_names
  assert PAID.reward_names == names + ("role/searcher", "role/answerer")
  assert PAID.role_reward_terms == role_terms(PAID) == ("role/searcher", "role/answerer")
  assert PAID.reward_weights == tuple(BASE.reward_weights) + (0.0, 0.0)
  assert PAID.roles == ROLES
  paid_any = np.zeros(2)
  for i in range(len(turns)):  # the plain loop: per episode, per step, per role
    for t in range(1, len(turns[0]) + 1):
      b_terms = base[t][4]["reward_terms"][i]
      terms = paid[t][4]["reward_terms"][i]
      np.testing.assert_array_equal(terms[:len(names)], b_terms)
      for k, (term, scale) in enumerate(PAY):
        want = np.float32(scale) * b_terms[names.index(term)]
        assert terms[len(names) + k] == want, (i, t, k, terms, b_terms)
        paid_any[k] += abs(want)
      acted = SCHEDULE[(t - 1) % len(SCHEDULE)]
      assert int(paid[t][4]["agent_id"][i]) == acted
      assert int(paid[t][4]["next_agent"][i]) == SCHEDULE[t % len(SCHEDULE)]
      assert float(paid[t][2][i]) == float(base[t][2][i])            # the team reward
      assert bool(paid[t][3][i]) == bool(base[t][3][i])
      line = f"You are the {ROLES[SCHEDULE[t % len(SCHEDULE)]]}.\n"
      assert _decode(paid[t][1], i) == line + _decode(base[t][1], i)
  assert (paid_any > 0).all(), paid_any  # the episodes paid both roles: the test can fail
  # partial credit showed up: the searcher's column is not just a rescaled EM
  f1 = np.concatenate([paid[t][4]["reward_terms"][:, len(names)] for t in range(1, 5)])
  assert ((f1 > 0) & (f1 < 0.2 - 1e-6)).any(), f1


def test_without_role_rewards_the_wrapper_is_unchanged(episodes):
  turns, base, paid, plain = episodes
  assert PLAIN.reward_names == BASE.reward_names
  assert getattr(PLAIN, "role_reward_terms", None) is None and role_terms(PLAIN) is None
  assert PLAIN.reward_weights == BASE.reward_weights
  assert PLAIN.role_rewards == ()
  for t in range(1, len(turns[0]) + 1):
    np.testing.assert_array_equal(plain[t][4]["reward_terms"], base[t][4]["reward_terms"])
    np.testing.assert_array_equal(plain[t][4]["agent_id"], paid[t][4]["agent_id"])
    for a, b in ((plain[t][2], paid[t][2]), (plain[t][3], paid[t][3]),
                 (plain[t][1].tokens, paid[t][1].tokens),
                 (plain[t][4]["state_hash"], paid[t][4]["state_hash"])):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert sorted(plain[t][4]) == sorted(paid[t][4])
  # a base with its own per-role terms keeps them through the wrapper, as before
  deal = envs.make("roles", tokenizer=TOK, base="deal_lite", roles=("alice", "bob"))
  assert deal.role_reward_terms == deal.inner.role_reward_terms
  assert PLAIN != PAID and hash(PLAIN) != hash(PAID)


def test_role_rewards_string_form_equals_the_pairs():
  env = envs.make("roles", tokenizer=TOK, base="kb_search_qa", roles=ROLES, schedule=SCHEDULE,
                  base_kwargs=BASE_KW, role_rewards="f1=0.2, em=1")
  assert env.role_rewards == PAY and env == PAID


@pytest.mark.parametrize("pay, match", [
    ((("f1", 0.2),), r"roles.role_rewards: need one \(term, scale\) per role"),
    ((("f1", 0.2), ("em", 1.0), ("em", 1.0)), r"roles.role_rewards: need one"),
    ((("f1", 0.2), ("success", 1.0)), r"roles.role_rewards: 'success' is not a reward term of "
                                      r"base env 'kb_search_qa'; its terms: \('em', 'f1'"),
    ((("f1", "big"), ("em", 1.0)), r"roles.role_rewards: \('f1', 'big'\) is not a \(term, scale\)"),
    ((("f1", float("nan")), ("em", 1.0)), r"roles.role_rewards: the scale of 'f1' must be finite"),
    ("f1=0.2,em", r"roles.role_rewards: 'em' is not term=scale"),
])
def test_bad_role_rewards_name_the_field(pay, match):
  with pytest.raises(ValueError, match=match):
    envs.make("roles", tokenizer=TOK, base="kb_search_qa", roles=ROLES, base_kwargs=BASE_KW,
              role_rewards=pay)

