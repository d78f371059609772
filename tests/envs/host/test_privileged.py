"""A host env's privileged text for hindsight teachers (train/hindsight.py): each task's expert
plan from the rollout's start, against the game's own `expert` on a fresh game."""
import jax
import numpy as np

from agent_rl.envs.host.text_rules import PLAN_PREFIX, reset_seed
from agent_rl.envs.host.toy import KeyRoomGame
from agent_rl.rollout.compiled import episode_keys
from agent_rl.train.hindsight import host_episode_privileged

from tests.envs.host.helpers import TOK, _env
from tests.envs.host.hostgames import FaultyGame


def _reference(task_ids, tasks, reset_keys, width):
  """Expected tokens [n, width] and lengths [n]: "Expert plan: c1; c2; ..." of a fresh game
  reset at (task, seed), cut to width; empty where the game cannot start."""
  tok = np.full((len(tasks), width), TOK.pad_id, np.int32)
  length = np.zeros((len(tasks),), np.int32)
  for i, (t, k) in enumerate(zip(tasks, reset_keys)):
    try:
      plan = FaultyGame().expert(task_ids[int(t)], reset_seed(np.asarray(k)))
    except RuntimeError:
      continue
    ids = TOK.encode(PLAN_PREFIX + "; ".join(plan))[:width]
    tok[i, :len(ids)], length[i] = ids, len(ids)
  return tok, length


def test_privileged_plans_are_the_games_expert_plans_from_the_rollouts_starts():
  env = _env(game=FaultyGame, n=8)
  bad = env.task_ids.index("keyroom-13")  # FaultyGame: this task does not start
  tasks = np.array([0, bad, 5, 2], np.int32)
  reset_keys = np.asarray(episode_keys(jax.random.key(4), len(tasks), 2)[0])
  for width in (64, 9):  # whole plans, and plans cut to 9 tokens
    priv = env.privileged_plans(tasks, reset_keys, width)
    want_tok, want_len = _reference(env.task_ids, tasks, reset_keys, width)
    np.testing.assert_array_equal(priv.length, want_len)
    np.testing.assert_array_equal(priv.tokens, want_tok)
  assert want_len[1] == 0 and (want_len[[0, 2, 3]] == 9).all()
  # Per episode: task i // G's text, G = 2.
  ep = host_episode_privileged(env, tasks, reset_keys, 2, 64)
  tok, length = _reference(env.task_ids, tasks, reset_keys, 64)
  np.testing.assert_array_equal(np.asarray(ep.tokens), np.repeat(tok, 2, axis=0))
  np.testing.assert_array_equal(np.asarray(ep.length), np.repeat(length, 2))
  assert len({bytes(r) for r in tok[[0, 2, 3]]}) == 3  # the plans differ between tasks


def test_the_plan_depends_on_the_reset_seed():
  g = KeyRoomGame()
  plans = {tuple(g.expert("keyroom-0", s)) for s in range(12)}
  assert len(plans) > 1  # why the teacher's text needs the rollout's reset keys, not the task
