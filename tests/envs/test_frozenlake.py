"""FrozenLake env vs gymnasium FrozenLake-v1 on the same maps and actions (deterministic exactly,
slippery by matching gymnasium's transition table statistically), plus generator/solver checks."""
import random

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.envs.toy_text.frozen_lake import is_valid

from agent_rl import envs
from agent_rl.envs import frozenlake
from agent_rl.envs.base import Text
from conftest import CharTokenizer

TOK = CharTokenizer()
A_LEN = 40
MAP4 = ["SFFF", "FHFH", "FFFH", "HFFG"]
LETTERS = "FHGS"


def turn_text(s):
  ids = TOK.encode(s)[:A_LEN]
  toks = np.zeros((A_LEN,), np.int32)
  toks[:len(ids)] = ids
  return Text(tokens=jnp.asarray(toks), length=jnp.int32(len(ids)))


def as_rows(desc):
  return ["".join(LETTERS[int(c)] for c in row) for row in np.asarray(desc)]


def ragen_render(rows, pos):
  """RAGEN's text: P/_/O/G, X = player in hole, √ = player on goal."""
  n = len(rows)
  out = ""
  for r in range(n):
    for c in range(n):
      ch = rows[r][c]
      if r * n + c == pos:
        out += {"H": "X", "G": "√"}.get(ch, "P")
      else:
        out += {"H": "O", "G": "G"}.get(ch, "_")
    out += "\n"
  return out


@pytest.mark.parametrize("size", [4, 8])
def test_deterministic_matches_gymnasium(size):
  env = envs.make("frozenlake", tokenizer=TOK, size=size, is_slippery=False, max_steps=1000)
  step = jax.jit(env.step)
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(size), 6))
  rng = random.Random(size)
  for i in range(6):
    rows = as_rows(tasks.desc[i])
    assert is_valid([list(r) for r in rows], size)
    g = gym.make("FrozenLake-v1", desc=rows, is_slippery=False)
    gs, _ = g.reset(seed=0)
    state, obs = env.reset(jax.random.key(0), env.task_from_map(rows))
    for _ in range(25):
      a = rng.randrange(4)
      state, obs, r, done, info = step(state, turn_text(f"<answer>{frozenlake.ACTIONS[a]}</answer>"))
      gs, gr, term, trunc, _ = g.step(a)
      assert int(state.pos) == gs and float(info["reward_terms"][0]) == gr and bool(done) == term
      assert TOK.decode(np.asarray(obs.tokens)[:int(obs.length)]) == ragen_render(rows, gs)
      if term:
        break


def test_slippery_transitions_match_gymnasium():
  env = envs.make("frozenlake", tokenizer=TOK, size=4, is_slippery=True)
  task = env.task_from_map(MAP4)
  g = gym.make("FrozenLake-v1", desc=MAP4, is_slippery=True).unwrapped
  n = 4000

  @jax.jit
  def sample(pos, text):
    def one(k):
      s, _ = env.reset(k, task)
      return env.step(s.replace(pos=pos), text)[0].pos
    return jax.vmap(one)(jax.random.split(jax.random.key(1), n))

  for s in (0, 1, 2, 6, 9, 14):
    for a in range(4):
      want = np.zeros(16)
      for p, s2, _, _ in g.P[s][a]:
        want[s2] += p
      got = np.bincount(np.asarray(sample(jnp.int32(s), turn_text(f"<answer>{frozenlake.ACTIONS[a]}</answer>"))),
                        minlength=16) / n
      # 5 standard errors of a binomial frequency at p = 1/3.
      np.testing.assert_allclose(got, want, atol=5 * np.sqrt(2 / 9 / n))


def test_slippery_policy_value_matches_gymnasium_rollouts():
  env = envs.make("frozenlake", tokenizer=TOK, size=4, is_slippery=True, max_steps=200)
  task = env.task_from_map(MAP4)
  actions, values = env.policy(task)
  g = gym.make("FrozenLake-v1", desc=MAP4, is_slippery=True, max_episode_steps=200)
  wins, episodes = 0, 1500
  for ep in range(episodes):
    s, _ = g.reset(seed=ep)
    while True:
      s, r, term, trunc, _ = g.step(int(actions[s]))
      if term or trunc:
        wins += r
        break
  assert abs(wins / episodes - values[0]) < 0.05
  assert env.solve(task)[0] in frozenlake.ACTIONS


def test_solver_plan_reaches_goal():
  env = envs.make("frozenlake", tokenizer=TOK, size=8, is_slippery=False, max_actions=3, max_steps=200)
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(3), 10))
  step = jax.jit(env.step)
  for i in range(10):
    task = jax.tree.map(lambda x: x[i], tasks)
    plan = env.solve(task)
    state, _ = env.reset(jax.random.key(0), task)
    for k in range(0, len(plan), 3):
      state, _, r, done, info = step(state, turn_text("<answer>" + " || ".join(plan[k:k + 3]) + "</answer>"))
    assert bool(info["success"]) and bool(done) and float(r) == 1.0


def test_invalid_turn_is_noop_with_penalty():
  env = envs.make("frozenlake", tokenizer=TOK, size=4, is_slippery=False, max_steps=2)
  state, _ = env.reset(jax.random.key(0), env.task_from_map(MAP4))
  step = jax.jit(env.step)
  state, _, r, done, info = step(state, turn_text("<answer>sideways</answer>"))
  assert not bool(info["valid_action"]) and int(state.pos) == 0 and float(r) == pytest.approx(-0.1)
  assert not bool(done) and not bool(info["truncated"])
  state, _, r, done, info = step(state, turn_text("Down"))
  assert bool(done) and int(state.steps) == 2   # max_steps reached by two invalid turns
  assert bool(info["truncated"])
  state, _, _, done, info = step(state, turn_text("Down"))   # a done state stays as it is
  assert bool(done) and int(state.steps) == 2 and not bool(info["truncated"])
  with pytest.raises(ValueError, match="unknown letters"):
    env.task_from_map(["SFFF", "FXFH", "FFFH", "HFFG"])


def test_vmap_no_retrace_and_hash():
  env = envs.make("frozenlake", tokenizer=TOK, size=4, is_slippery=False)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def run(keys, actions):
    tasks = jax.vmap(env.sample_task)(keys)
    states, _ = jax.vmap(env.reset)(keys, tasks)
    return jax.vmap(env.step)(states, actions)

  acts = jax.tree.map(lambda *x: jnp.stack(x), *[turn_text("<answer>Right</answer>")] * 3)
  for seed in range(3):
    _, _, _, _, info = run(jax.random.split(jax.random.key(seed), 3), acts)
  task = env.task_from_map(MAP4)
  s, _ = env.reset(jax.random.key(0), task)
  step = jax.jit(env.step)
  h1 = step(step(s, turn_text("<answer>right</answer>"))[0], turn_text("<answer>left</answer>"))[4]
  h2 = step(s, turn_text("<answer>left</answer>"))[4]
  h3 = step(s, turn_text("<answer>right</answer>"))[4]
  assert int(h1["state_hash"]) == int(h2["state_hash"]) != int(h3["state_hash"])
