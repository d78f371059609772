"""Branched rollouts on host games (rollout/branch.py): TextHostEnv.clone_rows rebuilds a
group root's game in its copies by replay (pool op "replay": the root's reset and the
commands its game stepped), in this process and across workers; a game that does not replay
fails the copy's episode, not the run; the overlapped loop branches as the plain one."""
import dataclasses
import functools

import jax
import numpy as np
import pytest

from agent_rl.envs.host.pool import GamePool
from agent_rl.envs.host.text_env import TextHostEnv
from agent_rl.envs.host.toy import KeyRoomGame
from agent_rl.rollout.branch import BranchConfig

from tests.envs.host.helpers import TOK, _actions, _cfg, _env, _same, plain_and_overlapped
from tests.envs.host.hostgames import DriftGame


def _step(env, commands):
  tok, length = _actions(commands)
  return env.step(tok, length, np.ones((len(commands),), bool))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_copy_plays_on_from_its_roots_state(workers):
  env = _env(n=4, workers=workers)  # raw format: the action text is the command
  try:
    env.reset(np.asarray([0, 1], np.int32), np.asarray([[0, 1], [2, 3]], np.uint32), 2)
    plan = KeyRoomGame().expert(*env._reset_arg[0])  # rows 0 and 1 play task 0
    _step(env, [plan[0], "look", "look", "look"])     # the root moves on, its member looks
    assert env._hash[1] != env._hash[0]
    env.clone_rows([1], [0])  # games 0 and 1 live in different workers when workers=2
    assert env._hash[1] == env._hash[0] and env._played[1] == env._played[0] == [plan[0]]
    tok, length, reward, done, info = _step(env, [plan[1], plan[1], "look", "look"])
    assert np.array_equal(tok[1], tok[0]) and length[1] == length[0]
    assert reward[1] == reward[0] and info["state_hash"][1] == info["state_hash"][0]
    assert reward[0] == 1.0 or plan[1].startswith("go to")  # the plan's step, not a no-op
    assert env.stats["replay_diverged"] == 0
    # the other group was left alone
    assert env._played[2] == env._played[3] == ["look", "look"]
  finally:
    env.close()


def test_a_game_that_does_not_replay_fails_the_copy_not_the_run():
  env = _env(DriftGame, n=2)
  try:
    env.reset(np.asarray([0], np.int32), np.asarray([[0, 1]], np.uint32), 2)
    _step(env, ["look", "look"])
    env.clone_rows([1], [0])
    assert env.stats["replay_diverged"] == 1
    _, _, _, done, info = _step(env, ["look", "look"])
    assert not done[0] and done[1] and info["fatal"][1] and not info["fatal"][0]
  finally:
    env.close()


def test_the_overlapped_loop_branches_as_the_plain_loop():
  cfg = dataclasses.replace(_cfg(turns=3, group=2), branch=BranchConfig(min_turn=1, max_turn=2))
  plain, pooled = _env(n=8), _env(n=8, workers=2)
  try:
    (ref, mref), (got, mgot) = plain_and_overlapped(cfg, plain, pooled, jax.random.key(2))
    _same(ref, got)
    assert float(mgot["rollout/branched_episodes"]) == float(mref["rollout/branched_episodes"]) > 0
    assert pooled.stats["replay_diverged"] == plain.stats["replay_diverged"] == 0
  finally:
    plain.close()
    pooled.close()


def _real_game(name, tmp_path):
  """A factory of one small game of each real package (skipped where it is not installed)."""
  pytest.importorskip(name)
  if name == "textworld":
    from agent_rl.envs.host.textworld import TextWorldGame
    return functools.partial(TextWorldGame, world_size=2, nb_objects=3, quest_length=3,
                             num_games=1, seed=0, cache_dir=str(tmp_path / "tw"))
  if name == "textworld_express":
    from agent_rl.envs.host.textworld_express import TextWorldExpressGame
    return functools.partial(TextWorldExpressGame, game="cookingworld", num_tasks=1,
                             params="numLocations=2,numIngredients=1,numDistractorItems=0,"
                                    "includeDoors=0")
  if name == "scienceworld":
    from agent_rl.envs.host.scienceworld import ScienceWorldGame
    return functools.partial(ScienceWorldGame, tasks=["lifespan-longest-lived"], num_variations=1)
  from agent_rl.envs.host.alfworld import ALFWorldGame
  from tests.envs.host.alf_games import GAMES_PER_FAMILY, NUM_OBJECTS
  return functools.partial(ALFWorldGame, generated=True, games_per_family=GAMES_PER_FAMILY,
                           num_objects=NUM_OBJECTS, seed=0, cache_dir=str(tmp_path / "alf"))


@pytest.mark.parametrize("name", ["textworld", "textworld_express", "scienceworld", "alfworld"])
def test_real_games_replay_into_a_copy(name, tmp_path):
  """The root plays its expert's first commands, the member something else; after
  clone_rows the copy's next step is the root's (text, reward, state)."""
  env = TextHostEnv(GamePool(_real_game(name, tmp_path), 2), TOK, obs_len=512,
                    action_format="raw")
  try:
    tasks, keys = np.asarray([0], np.int32), np.asarray([[4, 5]], np.uint32)
    items, _ = env._reset_items(tasks, keys, 2)
    plan = env.pool.call("expert", [(0, items[0][1])])[0]
    k = min(2, len(plan) - 1)
    assert k >= 1, plan
    env.reset(tasks, keys, 2)
    for cmd in plan[:k]:
      _step(env, [cmd, "inventory"])
    assert env._last[1].text != env._last[0].text or env._hash[1] != env._hash[0]
    env.clone_rows([1], [0])
    tok, length, reward, done, info = _step(env, [plan[k], plan[k]])
    assert env.stats["replay_diverged"] == 0 and not info["fatal"].any()
    assert np.array_equal(tok[1], tok[0]) and length[1] == length[0] > 0
    assert reward[1] == reward[0] and done[1] == done[0]
    assert info["state_hash"][1] == info["state_hash"][0]
  finally:
    env.close()
