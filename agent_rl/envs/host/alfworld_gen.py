"""ALFWorld-format games written offline: `.tw-pddl` + `traj_data.json`, no download.

ALFWorld (Shridhar et al., 2021, arXiv:2010.03768) plays its households as PDDL problems
through TextWorld's PDDL engine and the fast-downward planner; its games come from
`alfworld-download` (the network). The wheel ships the domain (`alfworld/data/alfred.pddl`),
the text grammar (`alfred.twl2`) and the goal library (`alfworld.gen.goal_library`: each task
family's PDDL goal and sentence templates), which is all a game needs besides the problem's
objects and initial facts. This module draws those from our TextHouse generator
(`agent_rl.envs.texthouse.world.generate`, the same households, six families, receptacle and
object kinds and seen/unseen pairs as the JAX stand-in) and writes them in the layout
`AlfredTWEnv` reads:

    <root>/json_2.1.1/<split>/<task_type>-<Object>-None-<Receptacle>-<n>/trial_s<seed>_<i>/
        traj_data.json    task_type, pddl_params, turk_annotations (the goal sentence)
        game.tw-pddl      pddl_domain, grammar (goal sentence filled in), pddl_problem,
                          solvable, walkthrough (the planner's plan when verified)

Splits: ALFWorld's train / valid_seen / valid_unseen; train and valid_seen draw the
TextHouse "train" (seen) goal pairs from different seeds, valid_unseen the held-out pairs.
Every receptacle stands at its own location; the agent starts in the middle of the room (a
location with no receptacle), as ALFWorld's games do. `canContain` holds for every pair of
present kinds (TextHouse's rule: any object may be moved to any receptacle).
"""
from __future__ import annotations

import functools
import json
import os
from typing import Optional, Sequence

import numpy as np

from agent_rl.envs.texthouse import catalog as C

SPLITS = ("train", "valid_seen", "valid_unseen")
_HOUSE_SPLIT = {"train": "train", "valid_seen": "train", "valid_unseen": "unseen"}
_SPLIT_SALT = {"train": 0, "valid_seen": 1, "valid_unseen": 2}
# ALFWorld's task_type names (alfworld.agents.environment.alfred_tw_env.TASK_TYPES), in the
# order of catalog.FAMILIES.
TASK_TYPES = ("pick_and_place_simple", "pick_two_obj_and_place", "look_at_obj_in_light",
              "pick_clean_then_place_in_recep", "pick_heat_then_place_in_recep",
              "pick_cool_then_place_in_recep")
# ALFRED class names of the catalogue's kinds (alfworld.gen.constants.OBJECTS spelling).
_CLASS = {"countertop": "CounterTop", "sinkbasin": "SinkBasin", "sidetable": "SideTable",
          "diningtable": "DiningTable", "garbagecan": "GarbageCan",
          "coffeemachine": "CoffeeMachine", "cellphone": "CellPhone", "keychain": "KeyChain",
          "alarmclock": "AlarmClock", "cd": "CD", "desklamp": "DeskLamp"}
DATA_DIR = "json_2.1.1"


def alfred_class(kind: str) -> str:
  return _CLASS.get(kind, kind.capitalize())


def import_alfworld(data_root: Optional[str] = None):
  """`(alfred.pddl text, alfred.twl2 text, goal library)` from the alfworld wheel.

  alfworld's package import creates `$ALFWORLD_DATA` (default `~/.cache/alfworld`), so the
  variable is pointed at `data_root` first when the user has not set it."""
  if data_root is not None:
    os.environ.setdefault("ALFWORLD_DATA", os.path.abspath(data_root))
  try:
    import alfworld.info as info
    import alfworld.gen.goal_library as glib
  except ImportError as e:
    raise ImportError("ALFWorld games need the alfworld package (it builds fast-downward, ~2 "
                      "min): pip install alfworld==0.4.2 (or bash launch/install.sh host)") from e
  with open(info.ALFRED_PDDL_PATH) as f:
    domain = f.read()
  with open(info.ALFRED_TWL2_PATH) as f:
    grammar = f.read()
  return domain, grammar, glib


@functools.lru_cache(maxsize=None)
def _generator(num_objects: int, house_split: str):
  """The jitted, vmapped TextHouse generator (the family mask is traced, so every family
  shares one compile per (num_objects, split))."""
  import jax
  from agent_rl.envs.texthouse import world
  kinds = np.ones(C.OK_, bool)
  return jax.jit(jax.vmap(lambda key, fam: world.generate(
      key, stages=1, num_objects=num_objects, families=fam, kinds=kinds, split=house_split,
      skill_prob=0.0), in_axes=(0, None)))


def draw_tasks(seed: int, split: str, family: int, n: int, num_objects: int) -> dict:
  """`n` TextHouse tasks of one family and split, as numpy arrays: rec_count [n, RK],
  obj_kind / obj_loc [n, NO], goal_family / goal_obj / goal_rec [n, 1]."""
  import jax
  import jax.numpy as jnp
  from agent_rl.envs.texthouse import world
  fam = np.eye(6, dtype=bool)[family]
  world.check_feasible(1, num_objects, fam, np.ones(C.OK_, bool), _HOUSE_SPLIT[split], "alfworld_gen")
  base = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), _SPLIT_SALT[split]), family)
  keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n))
  task = _generator(num_objects, _HOUSE_SPLIT[split])(keys, jnp.asarray(fam))
  return {k: np.asarray(getattr(task, k)) for k in
          ("rec_count", "obj_kind", "obj_loc", "goal_family", "goal_obj", "goal_rec")}


def pddl_problem(name: str, rec_count: np.ndarray, obj_kind: np.ndarray, obj_loc: np.ndarray,
                 goal: str) -> str:
  """The PDDL problem of one household: rec_count [RK], obj_kind / obj_loc [NO] (kind -1 =
  empty slot, loc a catalog receptacle slot); goal: the family's `(:goal ...)` text with its
  closing parenthesis of the define (as the goal library writes it)."""
  recs = [s for s in range(C.R) if C.REC_NUM[s] <= rec_count[C.REC_KIND[s]]]
  rid = {}
  for s in recs:
    cls = alfred_class(C.RECEPTACLE_KINDS[C.REC_KIND[s]][0])
    # ALFWorld's Demangler names an id by its text before "_bar_" and appends "basin" to any
    # id holding "basin": ALFRED's sink basins are "Sink|..|SinkBasin", so "sinkbasin 1".
    rid[s] = f"Sink_bar_{s}_bar_SinkBasin" if cls == "SinkBasin" else f"{cls}_bar_{s}"
  objs = [o for o in range(len(obj_kind)) if obj_kind[o] >= 0]
  oid = {o: f"{alfred_class(C.OBJECT_KINDS[obj_kind[o]][0])}_bar_{o}" for o in objs}
  rtypes = sorted({alfred_class(C.RECEPTACLE_KINDS[C.REC_KIND[s]][0]) for s in recs})
  otypes = sorted({alfred_class(C.OBJECT_KINDS[obj_kind[o]][0]) for o in objs})
  loc = {s: f"loc_bar_{s + 1}" for s in recs}
  start = "loc_bar_0"                                   # the middle of the room

  objects = ["agent1 - agent", f"{start} - location"]
  objects += [f"{loc[s]} - location" for s in recs]
  objects += [f"{rid[s]} - receptacle" for s in recs] + [f"{oid[o]} - object" for o in objs]
  objects += [f"{t}Type - rtype" for t in rtypes] + [f"{t}Type - otype" for t in otypes]
  init = [f"(atLocation agent1 {start})"]
  for s in recs:
    kind, openable = C.RECEPTACLE_KINDS[C.REC_KIND[s]][:2]
    init += [f"(receptacleType {rid[s]} {alfred_class(kind)}Type)",
             f"(receptacleAtLocation {rid[s]} {loc[s]})"]
    if openable:
      init.append(f"(openable {rid[s]})")
  for o in objs:
    k = obj_kind[o]
    init += [f"(objectType {oid[o]} {alfred_class(C.OBJECT_KINDS[k][0])}Type)",
             f"(inReceptacle {oid[o]} {rid[obj_loc[o]]})",
             f"(objectAtLocation {oid[o]} {loc[obj_loc[o]]})"]
    for flag, pred in ((C.HEATABLE, "heatable"), (C.COOLABLE, "coolable"),
                       (C.CLEANABLE, "cleanable"), (C.SLICEABLE, "sliceable"),
                       (C.PICKABLE, "pickupable"), (C.LIGHT, "toggleable")):
      if flag[k]:
        init.append(f"({pred} {oid[o]})")
  init += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes]
  return (f"(define (problem {name})\n(:domain alfred)\n(:objects\n  "
          + "\n  ".join(objects) + "\n)\n(:init\n  " + "\n  ".join(init) + "\n)\n" + goal)


def write_games(root: str, *, split: str = "train", families: Sequence[str] = C.FAMILIES,
                games_per_family: int = 1, seed: int = 0, num_objects: int = 6,
                verify: bool = True) -> list[str]:
  """Writes `games_per_family` games of each family in `families` for `split` under
  `root/json_2.1.1/<split>/` and returns their `game.tw-pddl` paths (sorted).

  verify: solve each game with ALFWorld's planner (TextWorld's PddlEnv `policy_commands`,
  fast-downward) and store the plan as the walkthrough; a game the planner cannot solve is
  written with `solvable: false` (AlfredTWEnv skips it) instead of failing the batch.
  Deterministic: the same arguments write the same files byte for byte.
  """
  if split not in SPLITS:
    raise ValueError(f"alfworld_gen.split must be one of {SPLITS}, got {split!r}")
  unknown = [f for f in families if f not in C.FAMILIES]
  if unknown or not families:
    raise ValueError(f"alfworld_gen.families: unknown or empty {unknown or families}; known: "
                     f"{C.FAMILIES}")
  for name, v, low in (("games_per_family", games_per_family, 1), ("seed", seed, 0),
                       ("num_objects", num_objects, 3)):
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
      raise ValueError(f"alfworld_gen.{name} must be an int >= {low}, got {v!r}")
  domain, grammar, glib = import_alfworld(root)
  paths = []
  for fam_name in families:
    f = C.FAMILIES.index(fam_name)
    tasks = draw_tasks(seed, split, f, games_per_family, num_objects)
    for i in range(games_per_family):
      paths.append(_write_one(root, split, seed, i, f, {k: v[i] for k, v in tasks.items()},
                              domain, grammar, glib, verify))
  return sorted(paths)


def _write_one(root, split, seed, i, f, task, domain, grammar, glib, verify) -> str:
  task_type = TASK_TYPES[f]
  obj = alfred_class(C.OBJECT_KINDS[task["goal_obj"][0]][0])
  rec = alfred_class(C.RECEPTACLE_KINDS[task["goal_rec"][0]][0])
  toggle = "DeskLamp" if f == C.LOOK else ""
  parent = "" if f == C.LOOK else rec
  goal = glib.gdict[task_type]["pddl"].replace("#", "-").format(obj=obj, recep=rec, toggle=toggle)
  # The first template of each family, as TextHouse's GOALS (ALFWorld picks one at random).
  desc = glib.gdict[task_type]["templates"][0].format(
      obj=obj.lower(), recep=rec.lower(), toggle=toggle.lower())
  trial = f"trial_s{seed}_{i}"
  folder = os.path.join(root, DATA_DIR, split, f"{task_type}-{obj}-None-{parent or rec}-{f}", trial)
  os.makedirs(folder, exist_ok=True)
  problem = pddl_problem(f"plan_{trial}", task["rec_count"], task["obj_kind"], task["obj_loc"], goal)
  traj = {"task_type": task_type, "task_id": trial, "split": split,
          "pddl_params": {"object_target": obj, "parent_target": parent, "toggle_target": toggle,
                          "mrecep_target": "", "object_sliced": False},
          "turk_annotations": {"anns": [{"task_desc": desc, "high_descs": [], "votes": []}]}}
  game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", desc),
          "pddl_problem": problem, "solvable": True, "walkthrough": None}
  path = os.path.join(folder, "game.tw-pddl")
  _dump(os.path.join(folder, "traj_data.json"), traj)
  _dump(path, game)
  if verify:
    plan = planner_plan(path)
    game["solvable"], game["walkthrough"] = plan is not None, plan
    _dump(path, game)
  return path


def _dump(path: str, obj) -> None:
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1, sort_keys=True)
  os.replace(tmp, path)                  # a reader never sees half a file


def planner_plan(game_file: str) -> Optional[list[str]]:
  """ALFWorld's planner plan from the start state (fast-downward through TextWorld's PddlEnv
  `policy_commands`, object names demangled as the game prints them), None when unsolvable."""
  import textworld
  from textworld.envs import PddlEnv
  from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
  env = AlfredDemangler(PddlEnv(textworld.EnvInfos(policy_commands=True)), shuffle=False)
  try:
    env.load(game_file)
    plan = env.reset()["policy_commands"]   # [] when fast-downward finds no plan
  finally:
    env.close()
  return list(plan) if plan else None
