"""ALFWorld households as a `TextGame` (Shridhar et al., 2021, arXiv:2010.03768).

ALFWorld's text games are PDDL problems played by TextWorld's PDDL engine (`PddlEnv`) with
ALFWorld's `AlfredDemangler` (object ids -> "apple 1") and `AlfredInfos` wrappers, the stack
`AlfredTWEnv.init_env` builds, without its batched gym (the host pool runs games in parallel).
Games come from one of:
  data_dir    a folder laid out as `alfworld-download` writes `$ALFWORLD_DATA`
              (`json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/`); default: the
              `ALFWORLD_DATA` environment variable.
  generated   `generated=True`: games our generator (`alfworld_gen`) writes once per
              (seed, settings) under `cache_dir`, same layout, so tests and tiny runs use the
              real engine and planner with no download.
A split's panel is the games `AlfredTWEnv.collect_game_files` would collect (traj_data.json
beside game.tw-pddl, no movable/sliced trials, the configured task types, `solvable` set),
sorted; task ids are game files relative to the data root. An empty panel is an error naming
the folder: `AlfredTWEnv` itself would spin forever on it (`textworld.gym`'s
`shuffled_cycle` loops over an empty list), and this adapter never reaches that loop.

Reward: ALFWorld's score is 1 once the goal holds, so the step's reward (its change) is 1 on
the winning step. State key: a digest of the PDDL state's facts without ALFWorld's `checked`
bookkeeping (the domain's look / examine / open / inventory / help add `checked ?x`, so
looking around would otherwise make a new state: TextHouse's state has no such flag either);
never None. Games are
deterministic (ALFWorld's `domain_randomization`, a renumbering of objects drawn from the
global `random`, is off as in its eval configs): `reset`'s seed does not change the game.
"""
from __future__ import annotations

import json
import os
import tempfile
import zlib
from typing import Optional, Sequence

from agent_rl.envs.host import alfworld_gen
from agent_rl.envs.host.game import ADAPTERS, GameObs, GameStep
from agent_rl.envs.host.textworld import facts_key
from agent_rl.envs.texthouse import catalog as C

SPLITS = alfworld_gen.SPLITS
DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "agent_rl_alfworld_games")
_MAX_OPEN = 8            # loaded games kept per worker (a load parses the PDDL, ~1-3 s)
_TASK_PREFIX = "Your task is to: "
INSTRUCTION = ("You are an agent in a household (ALFWorld). The first observation lists what "
               "is around you and states your task. Reply with one command per turn, for "
               "example: go to cabinet 1, open fridge 1, take mug 1 from cabinet 1, move mug 1 "
               "to countertop 1, heat mug 1 with microwave 1, use desklamp 1.")


def state_key(facts) -> bytes:
  """16-byte digest of the world facts (every fact but `checked`, see the module doc)."""
  return facts_key(f for f in facts if f.name != "checked")


def collect_games(data_root: str, split: str, task_types: Sequence[str]) -> list[str]:
  """Game files of a split, relative to `data_root`, by `AlfredTWEnv.collect_game_files`'
  rules (a plain walk; no prints, no progress bar)."""
  folder = os.path.join(data_root, alfworld_gen.DATA_DIR, split)
  out = []
  for root, _, files in os.walk(folder):
    if "traj_data.json" not in files or "movable" in root or "Sliced" in root:
      continue
    game = os.path.join(root, "game.tw-pddl")
    with open(os.path.join(root, "traj_data.json")) as f:
      if json.load(f)["task_type"] not in task_types or not os.path.exists(game):
        continue
    with open(game) as f:
      if not json.load(f).get("solvable"):
        continue
    out.append(os.path.relpath(game, data_root))
  return sorted(out)


@ADAPTERS.register("alfworld")
class ALFWorldGame:
  """ALFWorld games (see the module doc). data_dir: an ALFWorld data root (None: the
  `ALFWORLD_DATA` variable, unless `generated`); generated: write games with `alfworld_gen`
  (games_per_family of each of `families` per split, num_objects objects, from `seed`) under
  cache_dir; families: task families kept (catalog.FAMILIES names; None = all six)."""

  def __init__(self, *, data_dir: Optional[str] = None, generated: bool = False,
               families: Optional[Sequence[str]] = None, games_per_family: int = 2,
               num_objects: int = 6, seed: int = 0, cache_dir: str = DEFAULT_CACHE):
    families = tuple(C.FAMILIES if families is None else families)
    unknown = [f for f in families if f not in C.FAMILIES]
    if unknown or not families:
      raise ValueError(f"alfworld.families: unknown or empty {unknown or families}; known: "
                       f"{C.FAMILIES}")
    self.task_types = tuple(alfworld_gen.TASK_TYPES[C.FAMILIES.index(f)] for f in families)
    self.families, self.generated = families, generated
    self.gen_settings = dict(families=families, games_per_family=games_per_family,
                             num_objects=num_objects, seed=seed)
    if generated:
      if data_dir is not None:
        raise ValueError("alfworld: set data_dir or generated=True, not both")
      for name, v, low in (("games_per_family", games_per_family, 1), ("seed", seed, 0),
                           ("num_objects", num_objects, 3)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
          raise ValueError(f"alfworld.{name} must be an int >= {low}, got {v!r}")
      tag = zlib.crc32(repr(sorted(self.gen_settings.items())).encode())
      data_dir = os.path.join(cache_dir, f"alfgen_s{seed}_n{games_per_family}_o{num_objects}_{tag:08x}")
    elif data_dir is None:
      data_dir = os.environ.get("ALFWORLD_DATA")
      if not data_dir:
        raise FileNotFoundError(
            "alfworld: no games: set ALFWORLD_DATA (or alfworld.data_dir) to the folder "
            "`alfworld-download` wrote on a machine with network, or generated=True")
    if not generated and not os.path.isdir(data_dir):
      raise FileNotFoundError(f"alfworld.data_dir {data_dir!r} is not a directory (run "
                              f"`alfworld-download` or set generated=True)")
    self.data_root = os.path.abspath(data_dir)
    # alfworld's import creates $ALFWORLD_DATA (default ~/.cache/alfworld): point it here.
    alfworld_gen.import_alfworld(self.data_root)
    import textworld
    from textworld.envs import PddlEnv
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    self._make_env = lambda: AlfredInfos(AlfredDemangler(
        PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])),
        shuffle=False))
    self._envs: dict[str, object] = {}
    self._env = None
    self._score = 0
    self._task = ""

  def _ensure_generated(self, split: str) -> None:
    done = os.path.join(self.data_root, f".done_{split}")
    if self.generated and not os.path.exists(done):
      # Deterministic and written file by file atomically, so two workers that generate the
      # same split at once write the same bytes.
      alfworld_gen.write_games(self.data_root, split=split, verify=True, **self.gen_settings)
      with open(done, "w") as f:
        f.write("ok\n")

  def task_ids(self, split: str) -> Sequence[str]:
    if split not in SPLITS:
      raise ValueError(f"alfworld: unknown split {split!r}; ALFWorld's are {SPLITS}")
    self._ensure_generated(split)
    games = collect_games(self.data_root, split, self.task_types)
    if not games:
      raise FileNotFoundError(
          f"alfworld: no solvable games of task types {self.task_types} under "
          f"{os.path.join(self.data_root, alfworld_gen.DATA_DIR, split)!r} (ALFWorld's data "
          f"comes from `alfworld-download`; or set generated=True)")
    return games

  def _load(self, task_id: str):
    env = self._envs.pop(task_id, None)
    if env is None:
      path = os.path.join(self.data_root, task_id)
      if not os.path.exists(path):
        raise FileNotFoundError(f"alfworld: game file {path!r} does not exist")
      env = self._make_env()
      env.load(path)
    self._envs[task_id] = env                      # most recently used last
    while len(self._envs) > _MAX_OPEN:
      self._envs.pop(next(iter(self._envs))).close()
    return env

  def instruction(self) -> str:
    """What every ALFWorld game asks (the game's intro, the first observation, states the
    task)."""
    return INSTRUCTION

  def goal(self) -> str:
    """The current game's task sentence ("put a clean mug in cabinet."; after a reset)."""
    return self._task

  def reset(self, task_id: str, seed: int) -> GameObs:
    del seed  # see the module doc
    self._env = self._load(task_id)
    gs = self._env.reset()
    self._score = gs["score"] if "score" in gs else 0
    text = gs.feedback
    self._task = text[text.rfind(_TASK_PREFIX) + len(_TASK_PREFIX):].strip() if _TASK_PREFIX in text else ""
    return GameObs(text=text, admissible=tuple(gs["admissible_commands"]),
                   state_key=state_key(gs["_facts"]))

  def step(self, command: str) -> GameStep:
    if self._env is None:
      raise RuntimeError("alfworld: step before reset")
    # PddlEnv matches the command against its admissible list ("Nothing happens." otherwise).
    gs, score, done = self._env.step(" ".join(command.split()))
    delta, self._score = score - self._score, score
    return GameStep(obs=GameObs(text=gs.feedback, admissible=tuple(gs["admissible_commands"]),
                                state_key=state_key(gs["_facts"])),
                    score_delta=float(delta), done=bool(done), won=bool(gs["won"]),
                    lost=bool(gs["lost"]), extras={})

  def expert(self, task_id: str, seed: int) -> list[str]:
    """ALFWorld's planner plan from the start state (fast-downward via PddlEnv's
    `policy_commands`, what `AlfredExpert(expert_type="planner")` returns; alfworld 0.4.2's
    `AlfredTWEnv` passes its configured expert type positionally and so always gets the
    hand-coded expert, hence the direct call)."""
    del seed
    plan = alfworld_gen.planner_plan(os.path.join(self.data_root, task_id))
    if plan is None:
      raise ValueError(f"alfworld: the planner finds no plan for {task_id!r}")
    return plan

  def close(self) -> None:
    for env in self._envs.values():
      env.close()
    self._envs.clear()
    self._env = None
