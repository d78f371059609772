"""TextHouse's expert planner (host side) and the host task constructor with its checks.

The planner reads the true state (it knows what closed receptacles hold) and, stage by stage,
walks the scripted ALFWorld routine: go to the goal object's receptacle, open it if closed,
take the object, go to the appliance and transform it (heat / cool / clean), go to the first
instance of the target kind, open it if closed, move the object there (twice for pick_two);
look_at takes the object to the desklamp and uses it. Plans are short but not guaranteed
optimal (no search over which instance or target to use); tests replay them to success.

`search=True` is the searching expert (ALFWorld's hand-coded agent explores receptacles instead
of knowing where things are): to find an object (or the desklamp) it sweeps the room's
receptacles in the listed (catalogue) order, skipping those it has already looked into and,
for a goal object, the target kind (goal objects never start there), opens each closed one
and stops where the object is in view. Every decision depends only on what the plan has
observed so far, so a policy can imitate it; the planner's demos go straight to a hidden
object, which no policy can (the floor of the stop-36 TextHouse rows). Plans are longer: a
sweep visits ~half the room's receptacles on average.
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from agent_rl.envs.texthouse import catalog as C
from agent_rl.envs.texthouse.world import HouseTask

_APPLIANCE = {C.HEAT_F: ("heat", C.HEATER), C.COOL_F: ("cool", C.COOLER),
              C.CLEAN_F: ("clean", C.CLEANER)}


def plan(task: HouseTask, stages: int, search: bool = False) -> list[str]:
  """Action strings solving every stage of `task` in order; ValueError if a stage is impossible.
  search: find objects by sweeping receptacles (module docstring) instead of reading the state."""
  count = np.asarray(task.rec_count)
  kind, num = np.asarray(task.obj_kind), np.asarray(task.obj_num)
  loc = np.asarray(task.obj_loc).copy()
  fam, gobj, grec = (np.asarray(x) for x in (task.goal_family, task.goal_obj, task.goal_rec))
  name = lambda s: C.OBJ_NAMES[kind[s] * C.MAX_INSTANCES + num[s] - 1]  # noqa: E731
  first_slot = lambda rk: int(np.flatnonzero(C.REC_KIND == rk)[0])      # noqa: E731
  out: list[str] = []
  st = {"at": -1, "held": -1, "opened": set(), "seen": set()}
  listed = [r for r in range(C.R) if C.REC_NUM[r] <= count[C.REC_KIND[r]]]  # the room's order

  def goto(r):
    if st["at"] != r:
      out.append(f"go to {C.REC_NAMES[r]}")
      st["at"] = r
      if not C.REC_OPENABLE[r]:
        st["seen"].add(r)            # "On the countertop 1, you see ..."

  def ensure_open(r):
    if C.REC_OPENABLE[r] and r not in st["opened"]:
      out.append(f"open {C.REC_NAMES[r]}")
      st["opened"].add(r)
    st["seen"].add(r)

  def find(r_true, kinds):
    """Walk to `r_true` (where the sought object is) the way a searcher would: through the
    unseen receptacles of `kinds` in the listed order, looking into each, until it is in view."""
    if not search or r_true in st["seen"]:
      goto(r_true)
      return
    likely = [r for r in listed if kinds[C.REC_KIND[r]]]   # then the rest (a hand-made task's
    for r in likely + [r for r in listed if r not in likely]:  # object may sit anywhere)
      if r in st["seen"]:
        continue
      goto(r)
      ensure_open(r)
      if r == r_true:
        return
    raise AssertionError(f"{C.REC_NAMES[r_true]} is not among the receptacles searched")

  def first_found(objs):
    """The planner takes its first candidate; a searcher the one it knows of, or else the one
    its sweep reaches first."""
    if not search:
      return objs[0]
    return min(objs, key=lambda s: (int(loc[s]) not in st["seen"], listed.index(int(loc[s]))))

  def take(s, kinds):
    r = int(loc[s])
    find(r, kinds)
    ensure_open(r)
    out.append(f"take {name(s)} from {C.REC_NAMES[r]}")
    loc[s], st["held"] = -1, s

  def put(s, r):
    goto(r)
    ensure_open(r)
    out.append(f"move {name(s)} to {C.REC_NAMES[r]}")
    loc[s], st["held"] = r, -1

  for k in range(stages):
    f, ok_, tk = int(fam[k]), int(gobj[k]), int(grec[k])
    if st["held"] >= 0:                      # free the hands where we stand (look_at leftovers)
      put(st["held"], st["at"])
    cands = [s for s in range(len(kind)) if kind[s] == ok_]
    need = 2 if f == C.TWO else 1
    if len(cands) < need or count[tk] < 1:
      raise ValueError(f"stage {k} ({C.FAMILIES[f]}) needs {need} {C.OBJECT_KINDS[ok_][0]} and a "
                       f"{C.RECEPTACLE_KINDS[tk][0]}")
    not_target = np.arange(C.RK) != tk    # goal objects never start in their target kind
    if f == C.LOOK:
      lamps = [s for s in range(len(kind)) if kind[s] == C.LAMP]
      if not lamps:
        raise ValueError(f"stage {k} (look_at_obj_in_light) has no desklamp")
      take(first_found(cands), not_target)
      find(int(loc[lamps[0]]), ~not_target)   # the lamp stands on an instance of the goal's kind
      out.append(f"use {name(lamps[0])}")
      continue
    target = first_slot(tk)
    todo = list(cands[:need] if not search else cands)
    for _ in range(need):
      s = first_found(todo)
      todo.remove(s)
      take(s, not_target)
      if f in _APPLIANCE:
        verb, ak = _APPLIANCE[f]
        r = first_slot(ak)
        goto(r)
        out.append(f"{verb} {name(s)} with {C.REC_NAMES[r]}")
      put(s, target)
  return out


def task_from_spec(env: Any, *, layout: dict, objects: list, goals: list, skill: bool = False) -> HouseTask:
  """See TextHouse.task_from_spec. Raises ValueError naming the offending field."""
  kinds = [k[0] for k in C.RECEPTACLE_KINDS]
  okinds = [k[0] for k in C.OBJECT_KINDS]
  count = C.REC_MIN.copy()
  for k, n in dict(layout).items():
    if k not in kinds:
      raise ValueError(f"layout: unknown receptacle kind {k!r}; known: {kinds}")
    if not 0 <= int(n) <= C.REC_MAX[kinds.index(k)]:
      raise ValueError(f"layout[{k!r}] = {n} must be in [0, {C.REC_MAX[kinds.index(k)]}]")
    count[kinds.index(k)] = int(n)
  present = {C.REC_NAMES[r] for r in range(C.R) if C.REC_NUM[r] <= count[C.REC_KIND[r]]}
  no = env.num_objects
  if len(objects) > no:
    raise ValueError(f"objects: {len(objects)} objects, more than num_objects={no}")
  kind = np.full((no,), -1, np.int32)
  num = np.zeros((no,), np.int32)
  loc = np.zeros((no,), np.int32)
  seen = set()
  for i, (ok_, n, rname) in enumerate(objects):
    if ok_ not in okinds:
      raise ValueError(f"objects[{i}]: unknown object kind {ok_!r}; known: {okinds}")
    if not 1 <= int(n) <= C.MAX_INSTANCES or (ok_, int(n)) in seen:
      raise ValueError(f"objects[{i}]: instance {ok_} {n} must be unique and in 1..{C.MAX_INSTANCES}")
    if rname not in present:
      raise ValueError(f"objects[{i}]: receptacle {rname!r} is not in the layout {sorted(present)}")
    seen.add((ok_, int(n)))
    kind[i], num[i], loc[i] = okinds.index(ok_), int(n), C.REC_NAMES.index(rname)
  if len(goals) != env.stages:
    raise ValueError(f"goals: {len(goals)} given, the env has stages={env.stages}")
  fam, gobj, grec = (np.zeros((env.stages,), np.int32) for _ in range(3))
  for k, (f, ok_, tk) in enumerate(goals):
    if f not in C.FAMILIES:
      raise ValueError(f"goals[{k}]: unknown family {f!r}; known: {C.FAMILIES}")
    if ok_ not in okinds or tk not in kinds:
      raise ValueError(f"goals[{k}]: unknown object kind {ok_!r} or receptacle kind {tk!r}")
    fi, oi, ti = C.FAMILIES.index(f), okinds.index(ok_), kinds.index(tk)
    if not C.FAMILY_OBJECTS[fi, oi]:
      raise ValueError(f"goals[{k}]: a {ok_} cannot be the object of {f}")
    have = int(np.sum(kind == oi))
    if have < (2 if fi == C.TWO else 1):
      raise ValueError(f"goals[{k}]: {f} needs {2 if fi == C.TWO else 1} {ok_} in objects, found {have}")
    if count[ti] < 1:
      raise ValueError(f"goals[{k}]: target kind {tk!r} is not in the layout")
    if fi == C.LOOK and not np.any((kind == C.LAMP) & (C.REC_KIND[loc] == ti)):
      raise ValueError(f"goals[{k}]: look_at needs a desklamp on a {tk} in objects")
    if fi != C.LOOK and np.any((kind == oi) & (C.REC_KIND[loc] == ti)):
      raise ValueError(f"goals[{k}]: a {ok_} already starts in a {tk}; the goal would hold at reset")
    fam[k], gobj[k], grec[k] = fi, oi, ti
  unseen = bool(np.all(C.UNSEEN[gobj, grec]))
  return HouseTask(rec_count=jnp.asarray(count, jnp.int32), obj_kind=jnp.asarray(kind),
                   obj_num=jnp.asarray(num), obj_loc=jnp.asarray(loc), goal_family=jnp.asarray(fam),
                   goal_obj=jnp.asarray(gobj), goal_rec=jnp.asarray(grec), skill=jnp.bool_(skill),
                   unseen=jnp.bool_(unseen))
