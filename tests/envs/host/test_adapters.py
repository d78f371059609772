"""Host text-game adapters against their raw packages, on real episodes.

Each adapter: the package's expert plan replayed through the adapter wins; the score deltas
sum to the package's final score; observations and admissible lists equal the raw package's
(a second, independent instance stepped with the same commands); malformed commands are game
text, never exceptions; a missing package / Java / game folder is a clear error. The steps/s
of adapter vs raw package is a benchmark (`-m slow -s`, printed), not an assertion.
"""
import os
import random
import shutil
import sys
import time

import pytest

from agent_rl.envs.host.jvm import DETERMINISTIC_HASH, java_options
from tests.envs.host.alf_games import alfworld_game

BAD_COMMANDS = ("", "\n\nlook\ninventory", "\u00e9\u2211 go", "x" * 3000, "<answer>go</answer>")
TWX_PARAMS = "numLocations=1,numIngredients=1,numDistractorItems=0,includeDoors=0"
SW_TASK = "lifespan-longest-lived"


def _replay(adapter, raw_reset, raw_step, task_id, commands):
  """Steps the adapter and the raw package through `commands`; returns the adapter's steps
  and the raw final score. raw_reset() -> (text, admissible); raw_step(cmd) -> (text,
  admissible, score)."""
  obs = adapter.reset(task_id, 0)
  text, adm = raw_reset()
  assert obs.text == text and obs.admissible == tuple(adm)
  steps, score = [], 0
  for cmd in commands:
    step = adapter.step(cmd)
    text, adm, score = raw_step(cmd)
    assert step.obs.text == text and step.obs.admissible == tuple(adm), cmd
    steps.append(step)
  return steps, score


# -- TextWorld --------------------------------------------------------------------------------
tw_mod = pytest.importorskip("agent_rl.envs.host.textworld")


@pytest.fixture(scope="module")
def tw(tmp_path_factory):
  pytest.importorskip("textworld")
  game = tw_mod.TextWorldGame(world_size=2, nb_objects=3, quest_length=2, num_games=1, seed=0,
                              cache_dir=str(tmp_path_factory.getbasetemp() / "tw"))
  yield game
  game.close()


def _tw_raw(path):
  import textworld
  env = textworld.start(path, request_infos=textworld.EnvInfos(
      admissible_commands=True, won=True, lost=True, score=True, max_score=True))

  def reset():
    gs = env.reset()
    return gs.feedback, gs["admissible_commands"]

  def step(cmd):
    gs, score, _ = env.step(tw_mod.clean_command(cmd))
    return gs.feedback, gs["admissible_commands"], score
  return env, reset, step


def test_textworld_expert_wins_like_the_raw_game(tw):
  (task,) = tw.task_ids("train")
  plan = tw.expert(task, 0)
  env, reset, step = _tw_raw(tw.game_path(task))
  steps, final = _replay(tw, reset, step, task, plan)
  assert steps[-1].won and steps[-1].done and not any(s.done for s in steps[:-1])
  assert sum(s.score_delta for s in steps) == final == steps[-1].extras["max_score"] > 0
  # Random admissible commands after a reset: same text and lists as the raw game.
  cmds = _stream(tw, task, 12, random.Random(0))
  _replay(tw, reset, step, task, cmds[:cmds.index(None)])       # up to the first episode end
  env.close()


def test_textworld_state_key_follows_the_facts(tw):
  (task,) = tw.task_ids("train")
  start = tw.reset(task, 0).state_key
  assert len(start) == 16 and tw.step("look").obs.state_key == start       # look changes no fact
  assert tw.step(tw.expert(task, 0)[0]).obs.state_key != start
  assert tw.reset(task, 0).state_key == start


def test_textworld_malformed_commands_are_game_text(tw):
  (task,) = tw.task_ids("train")
  for cmd in BAD_COMMANDS:
    tw.reset(task, 0)
    step = tw.step(cmd)
    assert isinstance(step.obs.text, str) and not step.done and step.score_delta == 0


def test_textworld_game_dir_and_splits(tw, tmp_path):
  (task,) = tw.task_ids("train")
  src = tw.game_path(task)
  (tmp_path / "train").mkdir()
  for ext in (".z8", ".json"):
    shutil.copy(os.path.splitext(src)[0] + ext, tmp_path / "train" / ("g" + ext))
  game = tw_mod.TextWorldGame(game_dir=str(tmp_path))
  assert game.task_ids("train") == [os.path.join("train", "g.z8")]
  assert game.reset("train/g.z8", 0).text == tw.reset(task, 0).text
  game.close()
  (tmp_path / "test").mkdir()
  with pytest.raises(FileNotFoundError, match=str(tmp_path / "test")):
    game.task_ids("test")
  with pytest.raises(FileNotFoundError, match="textworld.game_dir"):
    tw_mod.TextWorldGame(game_dir=str(tmp_path / "missing"))
  seeds = {tw_mod.generation_seed(0, s, i) for s in tw_mod.SPLITS for i in range(50)}
  assert len(seeds) == 150                                   # splits never share a game


def test_textworld_missing_package(monkeypatch):
  monkeypatch.setitem(sys.modules, "textworld", None)
  with pytest.raises(ImportError, match="pip install textworld"):
    tw_mod.TextWorldGame()


# -- TextWorld-Express ------------------------------------------------------------------------
twx_mod = pytest.importorskip("agent_rl.envs.host.textworld_express")


@pytest.fixture(scope="module")
def twx():
  pytest.importorskip("textworld_express")
  game = twx_mod.TextWorldExpressGame(game="cookingworld", params=TWX_PARAMS, num_tasks=2)
  yield game
  game.close()


def test_twx_expert_wins_like_the_raw_game(twx):
  import textworld_express
  raw = textworld_express.TextWorldExpressEnv(envStepLimit=10 ** 9)
  raw.load("cookingworld", TWX_PARAMS)
  ids = {f: twx.task_ids(f) for f in twx_mod.FOLDS}
  assert len({t.split("/")[1] for f in ids for t in ids[f]}) == 6   # disjoint seed folds
  task = ids["dev"][0]
  fold, seed = twx.parse_task(task)
  plan = twx.expert(task, 0)

  def reset():  # the adapter opens the first observation with the task description
    obs, infos = raw.reset(seed=seed, gameFold=fold)
    return f"{infos['taskDescription']}\n\n{obs}", infos["validActions"]

  def step(cmd):
    obs, _, _, infos = raw.step(cmd)
    return obs, infos["validActions"], infos["score"]
  steps, final = _replay(twx, reset, step, task, plan)
  assert steps[-1].won and steps[-1].done and final == 1.0
  assert sum(s.score_delta for s in steps) == pytest.approx(final)
  assert twx.goal().startswith("You are hungry") and "cookingworld" in twx.instruction()
  raw.close()


def test_twx_games_of_a_process_share_one_jvm_and_play_as_if_alone(twx):
  """Games on one JVM (one `PythonInterface` each, jvm.py) stepped in turn play exactly as the
  package's own envs, one JVM each; the JVM closes with the last game of the process."""
  import textworld_express
  from agent_rl.envs.host import jvm
  other = twx_mod.TextWorldExpressGame(game="cookingworld", params=TWX_PARAMS, num_tasks=2)
  assert jvm.live_jvms() == 1
  tasks = [twx.task_ids("train")[0], twx.task_ids("dev")[1]]
  games, raws = [twx, other], []
  for t in tasks:
    fold, seed = twx.parse_task(t)
    raw = textworld_express.TextWorldExpressEnv(envStepLimit=10 ** 9)
    raw.load("cookingworld", TWX_PARAMS)
    obs, infos = raw.reset(seed=seed, gameFold=fold)
    raws.append(raw)
    assert games[len(raws) - 1].reset(t, 0).text == f"{infos['taskDescription']}\n\n{obs}"
  plans = [other.expert(t, 0) for t in tasks]
  for g, t in zip(games, tasks):
    g.reset(t, 0)
  last = [None, None]
  for i in range(max(map(len, plans))):   # interleaved: game 0, game 1, game 0, ...
    for k, (g, raw, plan) in enumerate(zip(games, raws, plans)):
      if i < len(plan):
        last[k] = step = g.step(plan[i])
        text, _, _, infos = raw.step(plan[i])
        assert (step.obs.text, step.obs.admissible) == (text, tuple(infos["validActions"]))
        assert step.extras["score"] == infos["score"]
  assert all(s.won for s in last)
  other.close()
  assert jvm.live_jvms() == 1   # twx (the module fixture) still holds it
  for r in raws:
    r.close()


def test_twx_state_from_tree_keys_the_world_not_the_text():
  """`state_from_tree`: the key is a digest of TWX's object tree: the same after a reset and
  after a look (the world did not change), another once an object moved."""
  pytest.importorskip("textworld_express")
  g = twx_mod.TextWorldExpressGame(game="cookingworld", params=TWX_PARAMS, num_tasks=2,
                                   state_from_tree=True)
  try:
    task = g.task_ids("train")[0]
    first = g.reset(task, 0)
    start = first.state_key
    assert isinstance(start, bytes) and g.reset(task, 1).state_key == start
    looked = g.step("look around")
    assert looked.obs.state_key == start and looked.obs.text != first.text
    assert g.step("take cookbook").obs.state_key != start
  finally:
    g.close()


def test_twx_bad_params_name_the_field():
  pytest.importorskip("textworld_express")
  for params in ("numLocations=zzz", "foo=3", "numLocations=99"):  # silent, unknown, too big
    with pytest.raises(ValueError, match="textworld_express.params"):
      twx_mod.TextWorldExpressGame(game="cookingworld", params=params)


def test_twx_malformed_commands_are_game_text(twx):
  task = twx.task_ids("train")[0]
  for cmd in BAD_COMMANDS + ("help",):
    twx.reset(task, 0)
    step = twx.step(cmd)
    assert isinstance(step.obs.text, str) and not step.done and step.score_delta == 0


def test_twx_missing_java_and_package(monkeypatch):
  pytest.importorskip("textworld_express")
  with pytest.raises(ValueError, match="textworld_express.game"):
    twx_mod.TextWorldExpressGame(game="zork")
  monkeypatch.setattr(twx_mod.shutil, "which", lambda name: None)
  with pytest.raises(RuntimeError, match="apt-get install openjdk-17-jre-headless"):
    twx_mod.TextWorldExpressGame()
  monkeypatch.setitem(sys.modules, "textworld_express", None)
  with pytest.raises(ImportError, match="pip install textworld-express"):
    twx_mod.TextWorldExpressGame()


# -- ScienceWorld -----------------------------------------------------------------------------
sw_mod = pytest.importorskip("agent_rl.envs.host.scienceworld")


@pytest.fixture(scope="module")
def sw():
  pytest.importorskip("scienceworld")
  game = sw_mod.ScienceWorldGame(tasks=[SW_TASK], num_variations=1)
  yield game
  game.close()


def test_scienceworld_expert_wins_like_the_raw_game(sw):
  import scienceworld
  ids = {s: sw.task_ids(s) for s in sw_mod.SPLITS}
  assert len({t for s in ids for t in ids[s]}) == 3                 # disjoint variation splits
  task = ids["train"][0]
  plan = sw.expert(task, 0)
  with java_options(DETERMINISTIC_HASH):  # the adapter's JVM (scienceworld.py): same hashes
    raw = scienceworld.ScienceWorldEnv("", envStepLimit=10 ** 9)
  raw.load(SW_TASK, sw.parse_task(task)[1], "")

  def reset():  # the adapter opens the first observation with the task description
    obs, info = raw.reset()
    return f"{info['taskDesc']}\n\n{obs}", info["valid"]

  def step(cmd):
    obs, _, _, info = raw.step(cmd)
    return obs, info["valid"], info["score"]
  steps, final = _replay(sw, reset, step, task, plan)
  assert steps[-1].won and steps[-1].done and final == 100
  assert sum(s.score_delta for s in steps) == final
  raw.close()
  for cmd in BAD_COMMANDS[:3]:
    sw.reset(task, 0)
    assert not sw.step(cmd).done


def test_scienceworld_plays_the_same_whatever_the_jit_threads(monkeypatch):
  """The tokenizer corpus of `configs/scienceworld.py:tiny` (16 variations played along their
  admissible commands in one JVM) is the same text with the JIT's compiler threads fixed as
  with HotSpot's dynamic ones. Without `jvm.DETERMINISTIC_HASH` it is not: the 11th game's
  art studio lists its three wood cups in another order (identity hashes seeded by thread
  starts), and under load the same happened between two plain starts."""
  pytest.importorskip("scienceworld")
  from agent_rl.envs.host.build import corpus
  from agent_rl.eval.reproduce.comparison import config_path, import_config
  c = import_config(config_path("scienceworld")).get_config("tiny")
  monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
  plain = corpus(c)
  monkeypatch.setenv("JAVA_TOOL_OPTIONS",
                     "-XX:-UseDynamicNumberOfCompilerThreads -XX:CICompilerCount=2")
  assert corpus(c) == plain


def test_scienceworld_missing_java_and_package(monkeypatch):
  monkeypatch.setattr(twx_mod.shutil, "which", lambda name: None)
  with pytest.raises(RuntimeError, match="openjdk-17-jre-headless"):
    sw_mod.ScienceWorldGame()
  monkeypatch.setitem(sys.modules, "scienceworld", None)
  with pytest.raises(ImportError, match="pip install scienceworld"):
    sw_mod.ScienceWorldGame()


# -- ALFWorld (generated games) ---------------------------------------------------------------
alf_mod = pytest.importorskip("agent_rl.envs.host.alfworld")


@pytest.fixture(scope="module")
def alf(tmp_path_factory):
  pytest.importorskip("alfworld")
  game = alfworld_game(tmp_path_factory)
  yield game
  game.close()


def _alf_raw(path):
  import textworld
  from textworld.envs import PddlEnv
  from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
  env = AlfredInfos(AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)),
                                    shuffle=False))
  env.load(path)

  def reset():
    gs = env.reset()
    return gs.feedback, gs["admissible_commands"]

  def step(cmd):
    gs, score, _ = env.step(cmd)
    return gs.feedback, gs["admissible_commands"], score
  return env, reset, step


def _alf_check(alf, families):
  import json
  for task in alf.task_ids("train"):
    if not any(f"/{alf_mod.alfworld_gen.TASK_TYPES[alf_mod.C.FAMILIES.index(f)]}-" in task
               for f in families):
      continue
    with open(os.path.join(alf.data_root, task)) as f:
      plan = json.load(f)["walkthrough"]         # the planner's plan, stored by the generator
    env, reset, step = _alf_raw(os.path.join(alf.data_root, task))
    steps, final = _replay(alf, reset, step, task, plan + ["go to the moon"])
    assert steps[-2].won and steps[-2].done and final == 1, task
    assert sum(s.score_delta for s in steps) == 1 and steps[-1].obs.text == "Nothing happens."
    assert alf.goal() and env.reset().feedback.endswith("Your task is to: " + alf.goal())
    env.close()


def test_alfworld_plans_win_like_the_raw_stack(alf):
  _alf_check(alf, ("pick_two_obj_and_place", "look_at_obj_in_light"))
  task = alf.task_ids("train")[0]
  start = alf.reset(task, 0).state_key
  assert alf.step("look").obs.state_key == start and alf.step("help").obs.state_key == start
  assert alf.step(alf.reset(task, 0).admissible[0]).obs.state_key != start    # "go to ..."


@pytest.mark.slow
def test_alfworld_all_families_win_like_the_raw_stack(alf):
  _alf_check(alf, alf_mod.C.FAMILIES)


def test_alfworld_expert_is_the_planner(alf):
  import json
  task = [t for t in alf.task_ids("train") if "/pick_and_place_simple-" in t][0]
  with open(os.path.join(alf.data_root, task)) as f:
    assert alf.expert(task, 0) == json.load(f)["walkthrough"]


def test_alfworld_no_games_is_an_error_not_a_hang(tmp_path, monkeypatch):
  pytest.importorskip("alfworld")
  (tmp_path / "json_2.1.1" / "train").mkdir(parents=True)
  game = alf_mod.ALFWorldGame(data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match=str(tmp_path / "json_2.1.1" / "train")):
    game.task_ids("train")
  with pytest.raises(FileNotFoundError, match="alfworld.data_dir"):
    alf_mod.ALFWorldGame(data_dir=str(tmp_path / "missing"))
  with pytest.raises(ValueError, match="alfworld.games_per_family"):
    alf_mod.ALFWorldGame(generated=True, games_per_family=0)
  monkeypatch.delenv("ALFWORLD_DATA", raising=False)
  with pytest.raises(FileNotFoundError, match="ALFWORLD_DATA"):
    alf_mod.ALFWorldGame()
  monkeypatch.setitem(sys.modules, "alfworld.info", None)
  with pytest.raises(ImportError, match="pip install alfworld"):
    alf_mod.ALFWorldGame(data_dir=str(tmp_path))


# -- adapter overhead (benchmark) -------------------------------------------------------------
def _stream(adapter, task, n, rng):
  """`n` random admissible commands played through the adapter, None where it reset."""
  obs, cmds = adapter.reset(task, 0), []
  while len(cmds) < n:
    cmds.append(rng.choice(obs.admissible))
    st = adapter.step(cmds[-1])
    obs = st.obs
    if st.done:
      cmds.append(None)
      obs = adapter.reset(task, 0)
  return cmds + [None]


def _rate(reset, step, commands):
  """(steps/s, this process's CPU µs per step) of `step` over `commands` (None = `reset`,
  untimed). The CPU time leaves out the JVMs' and waits, so it shows the adapter's own Python
  cost even on a loaded machine, where wall-clock rates swing several-fold."""
  reset()
  wall, cpu, n = 0.0, 0.0, 0
  for c in commands:
    if c is None:
      reset()
      continue
    t, p = time.perf_counter(), time.process_time()
    step(c)
    wall, cpu, n = wall + time.perf_counter() - t, cpu + time.process_time() - p, n + 1
  return n / wall, 1e6 * cpu / n


@pytest.mark.slow
def test_adapter_overhead_benchmark(tw, twx, sw, alf):
  """Steps/s of each adapter vs its raw package on the same game and command stream
  (printed; the target is <= 10% overhead). Best of 3 runs each, interleaved."""
  import scienceworld
  import textworld_express
  rng, cases = random.Random(0), {}
  (task,) = tw.task_ids("train")
  env, reset, step = _tw_raw(tw.game_path(task))
  cases["textworld"] = (tw, task, reset, step, 300)
  raw = textworld_express.TextWorldExpressEnv(envStepLimit=10 ** 9)
  raw.load("cookingworld", TWX_PARAMS)
  t_twx = twx.task_ids("train")[0]
  fold, seed = twx.parse_task(t_twx)
  cases["textworld_express"] = (twx, t_twx, lambda: raw.reset(seed=seed, gameFold=fold),
                                raw.step, 300)
  t_sw = sw.task_ids("train")[0]
  with java_options(DETERMINISTIC_HASH):  # the adapter's JVM: the adapter's cost alone
    sraw = scienceworld.ScienceWorldEnv("", envStepLimit=10 ** 9)
  sraw.load(SW_TASK, sw.parse_task(t_sw)[1], "")
  cases["scienceworld"] = (sw, t_sw, sraw.reset, sraw.step, 20)
  t_alf = alf.task_ids("train")[0]
  aenv, areset, astep = _alf_raw(os.path.join(alf.data_root, t_alf))
  cases["alfworld"] = (alf, t_alf, areset, astep, 40)
  for name, (adapter, task, raw_reset, raw_step, n) in cases.items():
    cmds = _stream(adapter, task, n, rng)
    a = r = (0.0, float("inf"))
    for _ in range(3):
      x = _rate(lambda: adapter.reset(task, 0), adapter.step, cmds)
      y = _rate(raw_reset, raw_step, cmds)
      a, r = (max(a[0], x[0]), min(a[1], x[1])), (max(r[0], y[0]), min(r[1], y[1]))
    print(f"{name}: adapter {a[0]:.1f} steps/s ({a[1]:.0f} us CPU/step), raw {r[0]:.1f} steps/s "
          f"({r[1]:.0f} us CPU/step); wall overhead {100 * (r[0] / a[0] - 1):.1f}%, CPU overhead "
          f"{100 * (a[1] / r[1] - 1):.1f}%")
  env.close(), raw.close(), sraw.close(), aenv.close()


def test_textworld_commands_reach_the_game_as_one_line_without_meta_commands():
  """dfrotz reads a leading backslash as its own meta-command (`\\p`, ...): model text must
  never reach it (random actions once made it answer "unknown command" without end)."""
  from agent_rl.envs.host.textworld import clean_command
  assert clean_command("\\p*' take key") == "p*' take key"
  assert clean_command("go\neast\\\\h") == "go east h"
  assert clean_command("  open   the chest\té ") == "open the chest"
  assert "\\" not in clean_command("\\" * 5) and clean_command("\\" * 5) == ""
