"""Sokoban env vs a plain-Python implementation of the rules (ref_sokoban.py), plus solver,
generator, text-level, hashing and no-retrace checks."""
import random

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs import sokoban
from agent_rl.envs.base import Text
from conftest import CharTokenizer
from ref_sokoban import PySokoban

TOK = CharTokenizer()
A_LEN = 40
LEVEL = """
#######
#     #
# .$@ #
#  *  #
#######
"""


def turn_text(s: str) -> Text:
  ids = TOK.encode(s)[:A_LEN]
  toks = np.zeros((A_LEN,), np.int32)
  toks[:len(ids)] = ids
  return Text(tokens=jnp.asarray(toks), length=jnp.int32(len(ids)))


def host(task_or_state, i=None):
  f = (lambda x: np.asarray(x)) if i is None else (lambda x: np.asarray(x[i]))
  return jax.tree.map(f, task_or_state)


@pytest.fixture(scope="module")
def env():
  return envs.make("sokoban", tokenizer=TOK, dim_room=(6, 6), num_boxes=1, max_steps=12, max_actions=2)


@pytest.fixture(scope="module")
def tasks(env):
  return jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.key(0), 24))


def test_generated_levels_solvable_and_replayed(env, tasks):
  big = sokoban.Sokoban(tokenizer=TOK, max_steps=100)
  step = jax.jit(big.step)
  for i in range(24):
    task = host(tasks, i)
    assert task.walls[0].all() and task.walls[-1].all() and task.walls[:, 0].all()
    assert task.boxes.sum() == 1 and task.targets.sum() == 1 and not (task.boxes & task.targets).any()
    assert not task.walls[tuple(task.player)] and not task.boxes[tuple(task.player)]
    plan = env.solve(task)
    assert plan and len(plan) <= 40
    state, _ = env.reset(jax.random.key(0), task)
    for a in plan:
      state, _, _, done, info = step(state, turn_text(f"<answer>{a}</answer>"))
    assert bool(info["success"]) and bool(done)


def test_matches_python_rules_on_random_turns(env, tasks):
  step = jax.jit(env.step)
  rng = random.Random(0)
  words = ["Up", "down", "LEFT", "right", "jump"]
  for i in range(12):
    task = host(tasks, i)
    ref = PySokoban(task.walls, task.targets, task.boxes, task.player, max_steps=12)
    state, obs = env.reset(jax.random.key(0), task)
    assert TOK.decode(np.asarray(obs.tokens)[:int(obs.length)]) == ref.render()
    for _ in range(14):
      names = [rng.choice(words) for _ in range(rng.randint(1, 3))]
      fmt = rng.random()
      text = "<answer>" + " || ".join(names) + "</answer>" if fmt < 0.85 else " || ".join(names)
      valid = fmt < 0.85 and all(n.lower() in ("up", "down", "left", "right") for n in names[:2])
      live = not ref.done
      want_r = ref.turn([n.lower() for n in names[:2]], valid)
      state, obs, r, done, info = step(state, turn_text(text))
      assert bool(info["valid_action"]) == valid, text
      np.testing.assert_allclose(float(r), want_r, atol=1e-5)
      assert bool(done) == ref.done and bool(info["success"]) == ref.solved()
      # the step budget, not the level, ended a live episode this turn
      assert bool(info["truncated"]) == (live and ref.done and not ref.solved())
      assert TOK.decode(np.asarray(obs.tokens)[:int(obs.length)]) == ref.render()


def test_text_level_and_render(env):
  big = sokoban.Sokoban(tokenizer=TOK, dim_room=(6, 8), max_actions=3)
  task = host(big.task_from_text(LEVEL))
  ref = PySokoban(task.walls, task.targets, task.boxes, task.player)
  assert big.render_text(task) == ref.render()
  state, _ = big.reset(jax.random.key(0), task)
  state, obs, r, done, info = jax.jit(big.step)(state, turn_text("<answer>Left</answer>"))
  assert bool(done) and bool(info["success"]) and float(r) == pytest.approx(10 + 1 - 0.1)
  assert big.solve(task) == ["Left"]
  with pytest.raises(ValueError, match="unknown glyph 'Z'"):
    big.task_from_text("#Z#")
  with pytest.raises(ValueError, match="exactly one player"):
    big.task_from_text("#.$#")


def test_state_hash_equal_for_equal_states(env):
  big = sokoban.Sokoban(tokenizer=TOK, dim_room=(6, 8), max_actions=2)
  task = big.task_from_text(LEVEL)
  s0, _ = big.reset(jax.random.key(0), task)
  step = jax.jit(big.step)
  _, _, _, _, i1 = step(s0, turn_text("<answer>up || down</answer>"))
  _, _, _, _, i2 = step(s0, turn_text("<answer>right || left</answer>"))
  _, _, _, _, i3 = step(s0, turn_text("<answer>up</answer>"))
  assert i1["state_hash"].dtype == jnp.uint32
  assert int(i1["state_hash"]) == int(i2["state_hash"]) != int(i3["state_hash"])


def test_vmap_jit_no_retrace(env, tasks):
  @jax.jit
  @chex.assert_max_traces(n=1)
  def run(tasks, actions):
    states, obs = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 4), tasks)
    return jax.vmap(env.step)(states, actions)

  actions = jax.tree.map(lambda *x: jnp.stack(x), *[turn_text(t) for t in
                         ["<answer>up</answer>", "x", "<answer>Left||Down</answer>", ""]])
  for lo in (0, 4, 8):
    sub = jax.tree.map(lambda x: x[lo:lo + 4], tasks)
    _, obs, reward, done, info = run(sub, actions)
    assert obs.tokens.shape == (4, env.obs_len)
    np.testing.assert_array_equal(np.asarray(info["valid_action"]), [True, False, True, False])


def test_bad_config_errors():
  with pytest.raises(ValueError, match="reward_weights"):
    sokoban.Sokoban(tokenizer=TOK, reward_weights=(1.0,))
  with pytest.raises(ValueError, match="tokenizer"):
    sokoban.Sokoban()
  with pytest.raises(KeyError, match="unknown environment 'sokobann'"):
    envs.make("sokobann", tokenizer=TOK)


@pytest.mark.slow
def test_sentencepiece_rendering_compact(sp_tok):
  env_sp = envs.make("sokoban", tokenizer=sp_tok)
  env_ch = envs.make("sokoban", tokenizer=TOK)
  tasks = jax.jit(jax.vmap(env_sp.sample_task))(jax.random.split(jax.random.key(7), 8))
  states, obs = jax.jit(jax.vmap(env_sp.reset))(jax.random.split(jax.random.key(0), 8), tasks)
  _, obs_ch = jax.jit(jax.vmap(env_ch.reset))(jax.random.split(jax.random.key(0), 8), tasks)
  for i in range(8):
    toks = np.asarray(obs.tokens[i])[:int(obs.length[i])]
    assert sp_tok.decode(toks) == env_sp.render_text(host(tasks, i))
  # Trained on env text, the chunked rendering needs far fewer tokens than one per character.
  assert float(jnp.mean(obs.length)) < 0.6 * float(jnp.mean(obs_ch.length))
  state, _, _, _, info = jax.jit(env_sp.step)(jax.tree.map(lambda x: x[0], states),
                                     Text(*map(jnp.asarray, _sp_turn(sp_tok, "<answer>Up</answer>"))))
  assert bool(info["valid_action"])


def _sp_turn(tok, s):
  ids = tok.encode(s)
  toks = np.zeros((A_LEN,), np.int32)
  toks[:len(ids)] = ids
  return toks, np.int32(len(ids))
