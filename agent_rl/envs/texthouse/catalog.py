"""TextHouse's fixed world catalog: receptacle and object kinds, task families, action grammar.

Everything here is host-side constants (tuples, numpy tables) shared by the generator, the
dynamics, the renderer, the parser, the solver and the plain-Python reference, so all of
them agree on ids by construction.

Names follow ALFWorld (Shridhar et al., 2021, arXiv:2010.03768): numbered instances
("cabinet 3", "mug 1"), the indefinite article is always "a" ("a apple 1"), as ALFWorld's
TextWorld grammar prints it. Receptacle instances of a kind are numbered 1..count in a task.
"""
from __future__ import annotations

import numpy as np

# -- receptacles: (kind, openable, min count, max count) --------------------------------------
RECEPTACLE_KINDS = (
    ("cabinet", True, 1, 4),
    ("drawer", True, 1, 3),
    ("countertop", False, 1, 2),
    ("shelf", False, 0, 2),
    ("fridge", True, 1, 1),
    ("microwave", True, 1, 1),
    ("sinkbasin", False, 1, 1),
    ("desk", False, 0, 1),
    ("sidetable", False, 0, 1),
    ("diningtable", False, 0, 1),
    ("garbagecan", False, 1, 1),
    ("coffeemachine", False, 0, 1),
)
RK = len(RECEPTACLE_KINDS)
RKIND = {k[0]: i for i, k in enumerate(RECEPTACLE_KINDS)}
# Receptacle slots: every instance any task may have, kind-major ("cabinet 1".."cabinet 4", ...).
REC_KIND = np.asarray([i for i, k in enumerate(RECEPTACLE_KINDS) for _ in range(k[3])], np.int32)
REC_NUM = np.asarray([n + 1 for k in RECEPTACLE_KINDS for n in range(k[3])], np.int32)
R = len(REC_KIND)
REC_NAMES = tuple(f"{RECEPTACLE_KINDS[k][0]} {n}" for k, n in zip(REC_KIND, REC_NUM))
REC_OPENABLE = np.asarray([RECEPTACLE_KINDS[k][1] for k in REC_KIND], bool)
REC_MIN = np.asarray([k[2] for k in RECEPTACLE_KINDS], np.int32)
REC_MAX = np.asarray([k[3] for k in RECEPTACLE_KINDS], np.int32)
# The appliance each transformation uses (ALFWorld: microwave / fridge / sinkbasin).
HEATER, COOLER, CLEANER = RKIND["microwave"], RKIND["fridge"], RKIND["sinkbasin"]
LAMP_HOLDERS = (RKIND["desk"], RKIND["sidetable"])

# -- objects: (kind, heatable, coolable, cleanable, sliceable, light source) ------------------
OBJECT_KINDS = (
    ("apple", 1, 1, 1, 1, 0), ("bread", 1, 1, 0, 1, 0), ("egg", 1, 1, 0, 0, 0),
    ("potato", 1, 1, 1, 1, 0), ("tomato", 1, 1, 1, 1, 0), ("lettuce", 0, 1, 1, 1, 0),
    ("mug", 1, 1, 1, 0, 0), ("cup", 1, 1, 1, 0, 0), ("plate", 1, 1, 1, 0, 0),
    ("bowl", 1, 1, 1, 0, 0), ("pan", 0, 1, 1, 0, 0), ("knife", 0, 0, 1, 0, 0),
    ("spoon", 0, 0, 1, 0, 0), ("book", 0, 0, 0, 0, 0), ("pen", 0, 0, 0, 0, 0),
    ("cellphone", 0, 0, 0, 0, 0), ("keychain", 0, 0, 0, 0, 0), ("alarmclock", 0, 0, 0, 0, 0),
    ("cd", 0, 0, 0, 0, 0), ("desklamp", 0, 0, 0, 0, 1),
)
OK_ = len(OBJECT_KINDS)
OKIND = {k[0]: i for i, k in enumerate(OBJECT_KINDS)}
LAMP = OKIND["desklamp"]
PROPS = np.asarray([k[1:] for k in OBJECT_KINDS], bool)          # [OK, 5]
HEATABLE, COOLABLE, CLEANABLE, SLICEABLE, LIGHT = (PROPS[:, i] for i in range(5))
PICKABLE = ~LIGHT                                                # lamps stay where they are
MAX_INSTANCES = 3
# Global object ids: kind-major, `g = kind * MAX_INSTANCES + (number - 1)`.
G = OK_ * MAX_INSTANCES
OBJ_NAMES = tuple(f"{k[0]} {n + 1}" for k in OBJECT_KINDS for n in range(MAX_INSTANCES))

# -- task families (ALFWorld's six) ------------------------------------------------------------
FAMILIES = ("pick_and_place", "pick_two_obj_and_place", "look_at_obj_in_light",
            "pick_clean_then_place", "pick_heat_then_place", "pick_cool_then_place")
PICK, TWO, LOOK, CLEAN_F, HEAT_F, COOL_F = range(6)
# Which goal kinds a family accepts (look_at: portable things one reads under a lamp).
FAMILY_OBJECTS = np.stack([
    PICKABLE, PICKABLE, PICKABLE & ~HEATABLE & ~COOLABLE & ~CLEANABLE,
    CLEANABLE, HEATABLE, COOLABLE])                              # [6, OK]
# Goal sentences: ALFWorld's first template of each family (alfworld/gen/goal_library);
# {o} object kind, {r} receptacle kind; look_at names the lamp.
GOALS = ("put a {o} in {r}.", "put two {o} in {r}.", "look at {o} under the desklamp.",
         "put a clean {o} in {r}.", "put a hot {o} in {r}.", "put a cool {o} in {r}.")
# Skill texts (SkillRL/SkillC-style per-family hints, injected after the goal on request).
_THEN_PLACE = "then go to the target and move it there."
SKILLS = (
    "Skill: find the object (open closed receptacles to look inside), take it, go to the "
    "target receptacle and move it there.",
    "Skill: find one object, take it, go to the target and move it there; then find the "
    "second object and do the same.",
    "Skill: find the object, take it, go to the desklamp and use the desklamp while holding "
    "the object.",
    "Skill: find the object, take it, go to the sinkbasin 1 and clean it with the sinkbasin 1, "
    + _THEN_PLACE,
    "Skill: find the object, take it, go to the microwave 1 and heat it with the microwave 1, "
    + _THEN_PLACE,
    "Skill: find the object, take it, go to the fridge 1 and cool it with the fridge 1, "
    + _THEN_PLACE,
)
# Subgoals flagged as milestones (BEACON-style): located, picked up, transformed, placed,
# second placed, lamp on. FAMILY_SUBGOALS[f, s]: whether family f has subgoal s.
SUBGOALS = ("located", "picked", "transformed", "placed", "placed_second", "lamp_on")
NSUB = len(SUBGOALS)
FAMILY_SUBGOALS = np.asarray([
    [1, 1, 0, 1, 0, 0], [1, 1, 0, 1, 1, 0], [1, 1, 0, 0, 0, 1],
    [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0]], bool)

# -- held-out combinations (ALFWorld's seen/unseen) --------------------------------------------
def _unseen_table() -> np.ndarray:
  """`[OK, RK] bool`: (goal object kind, target receptacle kind) pairs reserved for the unseen
  split, a fixed pseudo-random ~25% of pairs (multiplicative hash, no RNG state): the train
  split never samples them, the unseen split samples only them."""
  o, r = np.meshgrid(np.arange(OK_), np.arange(RK), indexing="ij")
  h = ((o * 2654435761 + r * 40503 + 12345) % (2 ** 32)) >> 7
  return (h % 4) == 0


UNSEEN = _unseen_table()
SPLITS = ("train", "unseen")

# -- actions -----------------------------------------------------------------------------------
# Verbs of ALFWorld's grammar (alfworld/data/alfred.twl2 at commit 1fa7e68, late 2024: "move
# {o} to {r}" replaced "put {o} in/on {r}"). Slice and the receptacle-object variants are left
# out (no task family needs them). (head text, arg1 kind, preposition, arg2 kind):
# kinds: None, "r" receptacle, "o" object.
VERBS = (
    ("look", None, None, None), ("inventory", None, None, None),
    ("go to", "r", None, None), ("open", "r", None, None), ("close", "r", None, None),
    ("examine", "r", None, None), ("examine", "o", None, None), ("use", "o", None, None),
    ("take", "o", "from", "r"), ("move", "o", "to", "r"), ("heat", "o", "with", "r"),
    ("cool", "o", "with", "r"), ("clean", "o", "with", "r"),
)
(LOOK_V, INV_V, GOTO_V, OPEN_V, CLOSE_V, EXAM_R_V, EXAM_O_V, USE_V, TAKE_V, MOVE_V, HEAT_V,
 COOL_V, CLEAN_V) = range(len(VERBS))
NV = len(VERBS)
HEADS = tuple(dict.fromkeys(v[0] for v in VERBS))              # distinct head words
PREPS = ("from", "to", "with")


def action_id(verb: int, obj: int = 0, rec: int = 0) -> int:
  """Flat action id `(verb * G + obj) * R + rec` (unused arguments are 0)."""
  return (verb * G + obj) * R + rec


def split_action(a: int) -> tuple[int, int, int]:
  return a // (G * R), (a // R) % G, a % R


def action_text(verb: int, obj: int = 0, rec: int = 0) -> str:
  head, a1, prep, a2 = VERBS[verb]
  parts = [head]
  if a1:
    parts.append(OBJ_NAMES[obj] if a1 == "o" else REC_NAMES[rec])
  if prep:
    parts += [prep, REC_NAMES[rec]]
  return " ".join(parts)


def all_actions() -> dict[str, int]:
  """Every action string of the grammar -> flat action id (the finite action space)."""
  out = {}
  for v, (_, a1, prep, _) in enumerate(VERBS):
    objs = range(G) if a1 == "o" else [0]
    recs = range(R) if (a1 == "r" or prep) else [0]
    for o in objs:
      for r in recs:
        out[action_text(v, o, r)] = action_id(v, o, r)
  return out
