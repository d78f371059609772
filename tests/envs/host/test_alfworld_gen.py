"""ALFWorld-format games from `alfworld_gen`, played by the real ALFWorld stack.

References: ALFWorld's own `AlfredTWEnv` (its game collector and its textworld.gym env with
the AlfredDemangler / AlfredInfos wrappers, as its training scripts build it), TextWorld's
fast-downward planner, and TextHouse's catalogue (the household each game was drawn from).
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("alfworld")   # CI installs it (requirements-host.txt)

from agent_rl.envs.host import alfworld_gen as G  # noqa: E402
from agent_rl.envs.texthouse import catalog as C  # noqa: E402
from tests.envs.host.alf_games import (GAMES_PER_FAMILY, NUM_OBJECTS, alfred_tw_config,
                                       alfworld_game)  # noqa: E402


@pytest.fixture(scope="module")
def games(tmp_path_factory):
  """(data root, sorted absolute game files): one game of each of the six families."""
  game = alfworld_game(tmp_path_factory)
  ids = game.task_ids("train")
  game.close()
  return game.data_root, [os.path.join(game.data_root, t) for t in ids]


def _traj(path):
  with open(os.path.join(os.path.dirname(path), "traj_data.json")) as f:
    return json.load(f)


def _game(path):
  with open(path) as f:
    return json.load(f)


def test_alfred_tw_env_collects_every_family(games):
  from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv
  root, paths = games
  env = AlfredTWEnv(alfred_tw_config(root), train_eval="train")
  assert sorted(env.game_files) == paths
  assert sorted(_traj(p)["task_type"] for p in paths) == sorted(G.TASK_TYPES)
  assert all(_game(p)["solvable"] and _game(p)["walkthrough"] for p in paths)


def _expected_intro(path):
  """(receptacle names, goal sentence) of the TextHouse task a game was drawn from."""
  fam = G.TASK_TYPES.index(_traj(path)["task_type"])
  index = int(os.path.basename(os.path.dirname(path)).rsplit("_", 1)[1])
  task = {k: v[index] for k, v in G.draw_tasks(0, "train", fam, GAMES_PER_FAMILY, NUM_OBJECTS).items()}
  recs = [C.REC_NAMES[s] for s in range(C.R) if C.REC_NUM[s] <= task["rec_count"][C.REC_KIND[s]]]
  goal = C.GOALS[fam].format(o=C.OBJECT_KINDS[task["goal_obj"][0]][0],
                             r=C.RECEPTACLE_KINDS[task["goal_rec"][0]][0])
  return sorted(recs), goal


def test_planner_plans_win_through_textworld_gym(games):
  """Every family: ALFWorld's gym env (AlfredTWEnv.init_env, batch 1) replays the planner's
  plan (stored as the walkthrough by verify=True) to won=True. Its intro lists exactly the
  TextHouse task's receptacles (catalog names) and ends with TextHouse's goal sentence."""
  from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv
  root, paths = games
  env = AlfredTWEnv(alfred_tw_config(root), train_eval="train").init_env(batch_size=1)
  played = set()
  for _ in paths:
    obs, infos = env.reset()
    path = infos["extra.gamefile"][0]
    recs, goal = _expected_intro(path)
    seen = obs[0].split("you see ", 1)[1].split(".\n", 1)[0].replace(", and ", ", ").split(", ")
    assert sorted(x.removeprefix("a ") for x in seen) == recs, path
    assert obs[0].endswith("Your task is to: " + goal), (obs[0], goal)
    for cmd in _game(path)["walkthrough"]:
      assert cmd in infos["admissible_commands"][0], (path, cmd)
      obs, scores, dones, infos = env.step([cmd])
    assert list(infos["won"]) == [True] and list(dones) == [True] and list(scores) == [1], path
    played.add(path)
  env.close()
  assert played == set(paths)


def test_problem_facts_encode_the_task():
  """Plain-text reading of the PDDL problem: each object is in the receptacle TextHouse put it
  in, with the catalogue's properties, and the agent starts where no receptacle stands."""
  fam = C.HEAT_F
  task = {k: v[0] for k, v in G.draw_tasks(3, "train", fam, 1, NUM_OBJECTS).items()}
  goal = "(:goal (and))\n)"
  text = G.pddl_problem("p", task["rec_count"], task["obj_kind"], task["obj_loc"], goal)
  facts = {tuple(line.strip("() ").split()) for line in text.splitlines() if line.startswith("  (")}
  rec_of = {f[1]: f[2] for f in facts if f[0] == "inReceptacle"}
  rtype = {f[1]: f[2] for f in facts if f[0] == "receptacleType"}
  for o, kind in enumerate(task["obj_kind"]):
    if kind < 0:
      continue
    name = C.OBJECT_KINDS[kind][0]
    oid = f"{G.alfred_class(name)}_bar_{o}"
    want_rec = C.RECEPTACLE_KINDS[C.REC_KIND[task["obj_loc"][o]]][0]
    assert rtype[rec_of[oid]] == G.alfred_class(want_rec) + "Type"
    assert (("heatable", oid) in facts) == bool(C.HEATABLE[kind])
    assert (("pickupable", oid) in facts) == bool(C.PICKABLE[kind])
  assert ("atLocation", "agent1", "loc_bar_0") in facts
  assert not any(f[0] == "receptacleAtLocation" and f[2] == "loc_bar_0" for f in facts)


def test_writes_are_deterministic(tmp_path):
  fams = ("pick_and_place", "pick_two_obj_and_place")
  n = GAMES_PER_FAMILY  # the session's generator shape: no new compile
  a = G.write_games(str(tmp_path / "a"), families=fams, games_per_family=n, seed=5, verify=False)
  b = G.write_games(str(tmp_path / "b"), families=fams, games_per_family=n, seed=5, verify=False)
  c = G.write_games(str(tmp_path / "c"), families=fams, games_per_family=n, seed=6, verify=False)
  rel = lambda root, ps: [os.path.relpath(p, root) for p in ps]
  assert rel(tmp_path / "a", a) == rel(tmp_path / "b", b) and len(a) == 2 * n
  for pa, pb in zip(a, b):
    assert open(pa).read() == open(pb).read()
    assert _traj(pa) == _traj(pb)
  assert _game(a[0])["pddl_problem"] != _game(c[0])["pddl_problem"]


def test_splits_use_seen_and_unseen_pairs():
  n = GAMES_PER_FAMILY  # one generator shape per TextHouse split: two compiles in all
  for split, unseen in (("train", False), ("valid_seen", False), ("valid_unseen", True)):
    for seed in range(4):
      for fam in (C.PICK, C.COOL_F):
        t = G.draw_tasks(seed, split, fam, n, NUM_OBJECTS)
        assert np.all(C.UNSEEN[t["goal_obj"][:, 0], t["goal_rec"][:, 0]] == unseen), (split, fam)
  a = [G.draw_tasks(s, "train", C.PICK, n, NUM_OBJECTS)["obj_loc"] for s in range(4)]
  b = [G.draw_tasks(s, "valid_seen", C.PICK, n, NUM_OBJECTS)["obj_loc"] for s in range(4)]
  assert not np.array_equal(np.stack(a), np.stack(b))


def test_bad_arguments_name_the_field(tmp_path):
  with pytest.raises(ValueError, match="alfworld_gen.split"):
    G.write_games(str(tmp_path), split="valid")
  with pytest.raises(ValueError, match="alfworld_gen.families"):
    G.write_games(str(tmp_path), families=("pick_and_slice",))
  with pytest.raises(ValueError, match="alfworld_gen.games_per_family"):
    G.write_games(str(tmp_path), games_per_family=0)


def test_alfworld_data_points_at_the_data_root(tmp_path, monkeypatch):
  monkeypatch.delenv("ALFWORLD_DATA", raising=False)
  G.import_alfworld(str(tmp_path))
  assert os.environ["ALFWORLD_DATA"] == str(tmp_path)
  monkeypatch.setenv("ALFWORLD_DATA", "/user/own/data")      # the user's choice wins
  G.import_alfworld(str(tmp_path))
  assert os.environ["ALFWORLD_DATA"] == "/user/own/data"


@pytest.mark.slow
def test_import_does_not_touch_home_cache(tmp_path):
  """alfworld's import creates $ALFWORLD_DATA (default ~/.cache/alfworld): the adapter points
  the variable at its data root first (a fresh interpreter, HOME moved to tmp)."""
  data = tmp_path / "data" / "json_2.1.1" / "train"
  data.mkdir(parents=True)
  env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
  env["HOME"] = str(tmp_path / "home")
  code = ("from agent_rl.envs.host.alfworld import ALFWorldGame\n"
          f"ALFWorldGame(data_dir={str(tmp_path / 'data')!r})\n"
          "import os; print(os.environ['ALFWORLD_DATA'])")
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, cwd=pathlib.Path(G.__file__).parents[3])
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == str(tmp_path / "data")
  assert not (tmp_path / "home" / ".cache").exists()
