"""MiniShop vs the plain-Python world (reference.py): pages, rewards, done on random tasks and
random (valid and invalid) action sequences; solver replays; fuzzed turns; construction
errors; state hashes; privileged text; public step pieces."""
import functools
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agent_rl import envs
from agent_rl.envs.base import Text
from agent_rl.envs.minishop import MiniShop, pages
import batched
from batched import vstep
from conftest import CharTokenizer
from minishop.reference import PyMiniShop

TOK = CharTokenizer()
A_LEN = 72


def turns(strs, a_len=A_LEN):
  return batched.texts(TOK, strs, a_len)


# One compile per (env, shapes), shared by the tests: batch N, turns of A_LEN tokens.
N = 24


@functools.partial(jax.jit, static_argnums=0)
def vsample(env, keys):
  return jax.vmap(env.sample_task)(keys)


@functools.partial(jax.jit, static_argnums=0)
def vreset(env, tasks):
  return jax.vmap(env.reset)(jax.random.split(jax.random.key(0), tasks.product.shape[0]), tasks)


@functools.partial(jax.jit, static_argnums=0)
def vprogress(env, state):
  return jax.vmap(env.progress)(state)


def sample(env, seed, n=N):
  return vsample(env, jax.random.split(jax.random.key(seed), n))


def host(tree, i):
  return jax.tree.map(lambda x: np.asarray(x[i]), tree)


def goal_dict(env, task):
  cat = env.catalogue
  return dict(product=int(task.product), lead=int(task.lead), price_upper=int(task.price_upper),
              attrs=[cat.attributes[a] for a in task.attrs if a >= 0],
              options=[cat.values[v] for v in task.options])


@pytest.fixture(scope="module")
def env():
  return envs.make("minishop", tokenizer=TOK, num_products=120, max_steps=12)


@pytest.fixture(scope="module")
def env_actions():
  return envs.make("minishop", tokenizer=TOK, num_products=120, max_steps=12, list_actions=True,
                   page_size=5, num_results=40)


def random_turn(rng, ref, env, plan):
  """A page-aware mix: the expert's next action, clickables of the page, other clickables,
  random queries and malformed text."""
  cat = ref.cat
  p = cat.products[ref.item]
  shown = ref.results[ref.page_no * ref.pz:(ref.page_no + 1) * ref.pz]
  words = ["lipstick", "free", "natural", "shoes", "xyzzy", "Pack", "of", "12", "blue", "-"]
  r = rng.random()
  if plan and r < 0.45:
    return f"<answer>{plan.pop(0)}</answer>"
  if r < 0.65:
    names = list(pages.BUTTONS) + [cat.products[j].asin for j in shown]
    names += [v for _, vals in p.options for v in vals]
    return f"<answer>click[{rng.choice(names)}]</answer>"
  if r < 0.77:
    q = " ".join(rng.choice(words) for _ in range(rng.randint(0, 18)))
    return f"<answer> search[{q}] </answer>"
  if r < 0.85:
    other = rng.choice([cat.products[rng.randrange(len(cat))].asin, rng.choice(cat.values)])
    return f"<answer>CLICK[ {other} ]</answer>"
  return rng.choice(["click[buy now]", "<answer>click[buy now]", "<answer>click buy now</answer>",
                     "<answer>search[]</answer>", "<answer>click[]</answer>", "<answer></answer>",
                     "<answer>click[next >]]</answer>", "<answer>search[ red ]x</answer>",
                     "<answer>click[description]</answer><answer>click[< prev]</answer>",
                     "<think>hm</think><answer>click[back to search]</answer>", ""])


@pytest.mark.parametrize("list_actions", [False, True])
def test_rules_match_reference(env, env_actions, list_actions):
  e = env_actions if list_actions else env
  t_max = 12
  tasks = sample(e, 1)
  rng = random.Random(0)
  seqs, ref_out = [], []
  state, obs = vreset(e, tasks)
  for i in range(N):
    task = host(tasks, i)
    ref = PyMiniShop(e.catalogue, max_steps=e.max_steps, list_actions=list_actions,
                     page_size=e.page_size, num_results=e.num_results)
    assert TOK.decode(np.asarray(obs.tokens[i])[:int(obs.length[i])]) == ref.reset(goal_dict(e, task))
    plan = e.solve(task)
    seq, outs = [], []
    for _ in range(t_max):
      s = TOK.decode(TOK.encode(random_turn(rng, ref, e, plan))[:A_LEN])   # what the env reads
      seq.append(s)
      outs.append(ref.step(s))
    seqs.append(seq)
    ref_out.append(outs)
  bought = 0
  for t in range(t_max):
    state, obs, reward, done, info = vstep(e, state, turns([seqs[i][t] for i in range(N)]))
    progress = np.asarray(vprogress(e, state))
    for i in range(N):
      r_obs, r_rew, r_done, r_info = ref_out[i][t]
      ctx = (i, t, seqs[i][t])
      assert TOK.decode(np.asarray(obs.tokens[i])[:int(obs.length[i])]) == r_obs, ctx
      assert int(obs.length[i]) <= e.obs_len
      np.testing.assert_allclose(float(reward[i]), r_rew, atol=1e-6, err_msg=str(ctx))
      np.testing.assert_allclose(np.asarray(info["reward_terms"][i]), r_info["terms"], atol=1e-6)
      assert bool(done[i]) == r_done, ctx
      assert bool(info["valid_action"][i]) == r_info["valid"], ctx
      assert bool(info["success"][i]) == r_info["success"], ctx
      assert bool(info["truncated"][i]) == r_info["truncated"], ctx
      np.testing.assert_allclose(float(info["score"][i]), r_info["score"], atol=1e-6)
      np.testing.assert_allclose(progress[i], r_info["progress"], atol=1e-6, err_msg=str(ctx))
      bought += r_info["score"] > 0
  assert bought > 0   # some purchases were scored


def test_solver_replays_to_success_on_many_tasks(env):
  n = 2000
  tasks = sample(env, 7, n)
  plans = [env.solve(host(tasks, i)) for i in range(n)]
  lens = np.array([len(p) for p in plans])
  assert lens.max() <= env.max_steps
  state, _ = vreset(env, tasks)
  valid = []
  for t in range(lens.max()):
    act = turns([f"<answer>{p[t]}</answer>" if t < len(p) else "" for p in plans], 96)
    state, _, _, _, info = vstep(env, state, act)
    valid.append(np.asarray(info["valid_action"]))
  valid = np.stack(valid)
  assert all(valid[:lens[i], i].all() for i in range(n))
  assert np.asarray(state.done).all() and np.asarray(state.score).min() == 1.0
  assert np.asarray(info["success"]).all()


def test_fuzzed_turns_are_invalid_never_crash(env):
  state, _ = vreset(env, sample(env, 3))
  rng = np.random.default_rng(0)
  toks = rng.integers(-50, TOK.vocab_size + 500, (N, A_LEN)).astype(np.int32)
  lens = rng.integers(-3, A_LEN + 10, (N,)).astype(np.int32)
  new, obs, reward, done, info = vstep(env, state, Text(jnp.asarray(toks), jnp.asarray(lens)))
  assert not np.asarray(info["valid_action"]).any()
  np.testing.assert_allclose(np.asarray(reward), -0.1)
  assert (np.asarray(new.page) == pages.SEARCH_PAGE).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list("click[]search<>/answer BUYnow0123 |\n")), max_size=60))
def test_hypothesis_turns_match_reference(env, text):
  """On the results page (after a search), any text of action-like characters."""
  tasks = sample(env, 11)
  task = host(tasks, 0)
  text = TOK.decode(TOK.encode(text)[:A_LEN])
  ref = PyMiniShop(env.catalogue, max_steps=env.max_steps)
  ref.reset(goal_dict(env, task))
  ref.step("<answer>search[lipstick]</answer>")
  r_obs, r_rew, r_done, r_info = ref.step(text)
  state, _ = vreset(env, tasks)
  state, *_ = vstep(env, state, turns(["<answer>search[lipstick]</answer>"] * N))
  _, obs, reward, done, info = vstep(env, state, turns([text] * N))
  assert TOK.decode(np.asarray(obs.tokens[0])[:int(obs.length[0])]) == r_obs
  assert bool(info["valid_action"][0]) == r_info["valid"]
  np.testing.assert_allclose(float(reward[0]), r_rew, atol=1e-6)


def test_construction_errors():
  with pytest.raises(ValueError, match="tokenizer"):
    MiniShop()
  with pytest.raises(ValueError, match="goal_attrs"):
    MiniShop(tokenizer=TOK, goal_attrs=4, num_products=60)
  with pytest.raises(ValueError, match="num_results"):
    MiniShop(tokenizer=TOK, num_results=35, num_products=60)
  with pytest.raises(ValueError, match="page_size"):
    MiniShop(tokenizer=TOK, page_size=0, num_products=60)
  with pytest.raises(ValueError, match="num_products"):
    MiniShop(tokenizer=TOK, num_products=5)
  with pytest.raises(ValueError, match="reward_weights"):
    MiniShop(tokenizer=TOK, reward_weights=(1.0, 2.0), num_products=60)
  with pytest.raises(ValueError, match="max_steps"):
    MiniShop(tokenizer=TOK, max_steps=0, num_products=60)
  with pytest.raises(ValueError, match="max_bytes"):
    MiniShop(tokenizer=TOK, max_bytes=100, num_products=60)
  with pytest.raises(ValueError, match="bm25"):
    MiniShop(tokenizer=TOK, bm25_k1=-1.0, num_products=60)


def test_state_hash_render_text_and_privileged_text(env):
  tasks = sample(env, 11)
  task = host(tasks, 0)
  assert env.render_text(task) == PyMiniShop(env.catalogue).reset(goal_dict(env, task))
  plans = [env.solve(host(tasks, i)) for i in range(N)]
  state, _ = vreset(env, tasks)
  hashes = [np.asarray(jax.vmap(env.state_hash)(state))]
  for t in range(max(len(p) for p in plans)):
    act = turns([f"<answer>{p[t]}</answer>" if t < len(p) else "" for p in plans])
    state, obs, _, _, info = vstep(env, state, act)
    hashes.append(np.asarray(info["state_hash"]))
    assert env.render_text(host(state, 0)) == TOK.decode(np.asarray(obs.tokens[0])[:int(obs.length[0])])
  texts = env.episode_texts(task)
  assert len(texts) == len(plans[0]) + 1 and texts[0] == env.render_text(task)
  assert texts[-1] == env.render_text(host(state, 0)) and "Buy Now" in texts[-1]
  for i, p in enumerate(plans):
    h = [int(x[i]) for x in hashes[:len(p) + 1]]
    assert len(set(h)) == len(h)                  # every expert step changes the state
  s0, _ = vreset(env, tasks)
  _, _, _, _, info = vstep(env, s0, turns(["<answer>click[buy now]</answer>"] * N))
  np.testing.assert_array_equal(np.asarray(info["state_hash"]), hashes[0])   # invalid: same state
  assert len(set(hashes[0].tolist())) == N        # distinct goals, distinct hashes
  priv = jax.jit(env.privileged_text)(task)
  p = env.catalogue.products[int(task.product)]
  want = (f"Target product: {p.asin} [SEP] {p.title} [SEP] attributes: {', '.join(p.attributes)}"
          f" [SEP] options: {env.catalogue.values[task.options[0]]}, "
          f"{env.catalogue.values[task.options[1]]}")
  assert TOK.decode(np.asarray(priv.tokens)[:int(priv.length)]) == want
  assert priv.tokens.shape == (env.privileged_len,)


def test_sampled_goals_follow_webshop(env):
  arr = env.catalogue.arrays
  for i in range(240):
    t = host(sample(env, 100 + i // N), i % N)
    p = int(t.product)
    attrs = [a for a in t.attrs if a >= 0]
    assert 1 <= len(attrs) <= env.goal_attrs and set(attrs) <= set(arr["prod_attrs"][p])
    for k in range(2):
      assert t.options[k] in arr["prod_opts"][p, k, :arr["prod_n_opts"][p, k]]
    # goal.py: the larger of two of the four multiples of 10 above the price
    above = [10 * i for i in range(1, 100) if 10 * i > arr["price"][p] / 100][:4]
    assert int(t.price_upper) in above[1:]
