"""Plain-Python reference of TextHouse's rules, text and action parsing (no JAX).

Written from the rules in agent_rl/envs/texthouse/dynamics.py's docstring and ALFWorld's
feedback strings; it shares only the catalog's constant tables (names, kinds, properties)
with the JAX env. Tests step both on the same tasks and actions and compare observation
text, reward terms, done, success and milestones; a benchmark may import it too.

    ref = RefHouse(task, stages)        # task: a HouseTask with numpy leaves
    text = ref.reset_text()
    obs, terms, done, info = ref.step(action_bytes)   # terms = [success, milestone, format]
"""
from __future__ import annotations

import numpy as np

from agent_rl.envs.texthouse import catalog as C

WS = b" \t\n\r\x0b\x0c"


def parse(turn: bytes, max_answer_bytes: int = 64):
  """(verb, obj, rec) of a well-formed turn, else None (actions.py's rule, max_actions=1:
  only the first "||" segment counts)."""
  i = turn.find(b"<answer>")
  if i < 0:
    return None
  start = i + len(b"<answer>")
  j = turn.find(b"</answer>", start)
  if j < 0 or j - start > max_answer_bytes:
    return None
  word = turn[start:j].split(b"||")[0].strip(WS).lower()
  a = _ACTIONS.get(word)
  return None if a is None else C.split_action(a)


_ACTIONS = {k.encode(): v for k, v in C.all_actions().items()}


def join(items: list[str]) -> str:
  """TextWorld's list: "a x." / "a x, and a y." / "a x, a y, and a z."; empty -> "nothing."."""
  if not items:
    return "nothing."
  if len(items) == 1:
    return items[0] + "."
  return ", ".join(items[:-1]) + ", and " + items[-1] + "."


class RefHouse:
  def __init__(self, task, stages: int, max_steps: int = 50, max_answer_bytes: int = 64,
               list_actions: bool = False, repeat_goal: bool = False, repeat_room: bool = False):
    self.list_actions, self.repeat_goal, self.repeat_room = list_actions, repeat_goal, repeat_room
    g = lambda x: np.asarray(x).tolist()  # noqa: E731
    self.count = g(task.rec_count)
    self.kind, self.num, self.loc = g(task.obj_kind), g(task.obj_num), g(task.obj_loc)
    self.fam, self.gobj, self.grec = g(task.goal_family), g(task.goal_obj), g(task.goal_rec)
    self.skill = bool(np.asarray(task.skill))
    self.stages, self.max_steps, self.max_answer_bytes = stages, max_steps, max_answer_bytes
    self.present = [C.REC_NUM[r] <= self.count[C.REC_KIND[r]] for r in range(C.R)]
    self.slots = [s for s in range(len(self.kind)) if self.kind[s] >= 0]
    self.at = None
    self.held = None
    self.opened = set()
    self.hot, self.cold, self.clean, self.on = set(), set(), set(), set()
    self.stage, self.steps, self.done = 0, 0, False
    self.reached = [set() for _ in range(stages)]

  # -- text -------------------------------------------------------------------------------
  def oname(self, s):
    return f"{C.OBJECT_KINDS[self.kind[s]][0]} {self.num[s]}"

  def overview(self):
    return join([f"a {C.REC_NAMES[r]}" for r in range(C.R) if self.present[r]])

  def contents(self, r):
    return join([f"a {self.oname(s)}" for s in self.slots if self.loc[s] == r and self.held != s])

  def describe(self, r):
    name = C.REC_NAMES[r]
    if C.REC_OPENABLE[r]:
      return (f"The {name} is open. In it, you see {self.contents(r)}" if r in self.opened
              else f"The {name} is closed.")
    return f"On the {name}, you see {self.contents(r)}"

  def goal_text(self):
    goals = []
    for k in range(self.stages):
      o = C.OBJECT_KINDS[self.gobj[k]][0]
      r = C.RECEPTACLE_KINDS[self.grec[k]][0]
      goals.append(C.GOALS[self.fam[k]].format(o=o, r=r))
    return "\n\nYour task is to: " + " Then, ".join(goals)

  def reset_text(self):
    text = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking "
            f"quickly around you, you see {self.overview()}" + self.goal_text())
    if self.skill:
      text += "".join("\n" + C.SKILLS[f] for f in self.fam)
    return text + self.listing()

  def privileged_text(self):
    parts = [f"The {self.oname(s)} is in {C.REC_NAMES[self.loc[s]]}." for s in self.slots
             if self.kind[s] in self.gobj]
    return " ".join(parts)

  # -- rules --------------------------------------------------------------------------------
  def accessible(self, r):
    return r is not None and (not C.REC_OPENABLE[r] or r in self.opened)

  def find(self, g):
    for s in self.slots:
      if self.kind[s] * C.MAX_INSTANCES + self.num[s] - 1 == g:
        return s
    return None

  def apply(self, verb, g, r):
    """Returns the feedback string; changes the state when the preconditions hold."""
    name = C.REC_NAMES[r]
    s = self.find(g)
    sname = self.oname(s) if s is not None else None
    carrying = s is not None and self.held == s
    if verb == C.LOOK_V:
      if self.at is None:
        return "You are in the middle of a room. Looking quickly around you, you see " + self.overview()
      return f"You are facing the {C.REC_NAMES[self.at]}. Next to it, you see nothing."
    if verb == C.INV_V:
      return (f"You are carrying: a {self.oname(self.held)}." if self.held is not None
              else "You are not carrying anything.")
    if verb == C.GOTO_V and self.present[r] and self.at != r:
      self.at = r
      return f"You arrive at {name}. " + self.describe(r)
    if verb == C.OPEN_V and self.at == r and C.REC_OPENABLE[r] and r not in self.opened:
      self.opened.add(r)
      return f"You open the {name}. " + self.describe(r)
    if verb == C.CLOSE_V and self.at == r and C.REC_OPENABLE[r] and r in self.opened:
      self.opened.discard(r)
      return f"You close the {name}."
    if verb == C.EXAM_R_V and self.at == r:
      return self.describe(r)
    if s is None:
      return "Nothing happens."
    light = bool(C.LIGHT[self.kind[s]])
    here = self.loc[s] == self.at and self.held != s and self.accessible(self.at)
    if verb == C.EXAM_O_V and (carrying or here):
      hot, cold, clean = s in self.hot, s in self.cold, s in self.clean
      if clean and hot:
        return f"This is a hot and clean {sname}."
      if clean and cold:
        return f"This is a cool and clean {sname}."
      if hot:
        return f"This is a hot {sname}."
      if clean:
        return f"This is a clean {sname}."
      if cold:
        return f"This is a cold {sname}."
      if light:
        return f"This {sname} is {'on' if s in self.on else 'off'}."
      return f"There's nothing special about {sname}."
    if verb == C.USE_V and light and here:
      self.on ^= {s}
      return f"You turn {'on' if s in self.on else 'off'} the {sname}."
    if (verb == C.TAKE_V and self.at == r and self.loc[s] == r and self.held != s
        and self.accessible(r) and self.held is None and not light):
      self.held = s
      return f"You pick up the {sname} from the {name}."
    if verb == C.MOVE_V and carrying and self.at == r and self.accessible(r):
      self.held, self.loc[s] = None, r
      return f"You move the {sname} to the {name}."
    appliance = {C.HEAT_V: (C.HEATER, 0, "heat"), C.COOL_V: (C.COOLER, 1, "cool"),
                 C.CLEAN_V: (C.CLEANER, 2, "clean")}
    if verb in appliance and carrying and self.at == r:
      kind, prop, word = appliance[verb]
      if C.REC_KIND[r] == kind and C.PROPS[self.kind[s], prop]:
        if verb == C.HEAT_V:
          self.hot.add(s), self.cold.discard(s)
        elif verb == C.COOL_V:
          self.cold.add(s), self.hot.discard(s)
        else:
          self.clean.add(s)
        return f"You {word} the {sname} using the {name}."
    return "Nothing happens."

  def status(self, k):
    """(subgoal names reached now, success) of stage k."""
    f, ok_, tk = self.fam[k], self.gobj[k], self.grec[k]
    mine = [s for s in self.slots if self.kind[s] == ok_]
    prop = {C.CLEAN_F: self.clean, C.HEAT_F: self.hot, C.COOL_F: self.cold}.get(f)
    qual = [s for s in mine if prop is None or s in prop]
    placed = sum(1 for s in qual if self.held != s and C.REC_KIND[self.loc[s]] == tk)
    visible = any(self.held == s or (self.loc[s] == self.at and self.accessible(self.at)) for s in mine)
    picked = any(self.held == s for s in mine)
    lamp = any(C.LIGHT[self.kind[s]] and s in self.on and self.loc[s] == self.at
               and self.held != s for s in self.slots)
    subs = {"located": visible, "picked": picked, "transformed": bool(qual) and prop is not None,
            "placed": placed >= 1, "placed_second": placed >= 2, "lamp_on": lamp}
    allowed = {C.SUBGOALS[i] for i in np.flatnonzero(C.FAMILY_SUBGOALS[f])}
    success = placed >= 2 if f == C.TWO else (picked and lamp) if f == C.LOOK else placed >= 1
    return {n for n, v in subs.items() if v and n in allowed}, success

  def step(self, turn: bytes | None):
    """turn: the action's bytes (None = out-of-vocabulary tokens: invalid)."""
    if self.done:
      return "Nothing happens." + self.suffix(), [0.0, 0.0, 0.0], True, {"success": self.stage >= self.stages,
                                                          "milestone": False, "valid": parse(turn or b"", self.max_answer_bytes) is not None}
    act = None if turn is None else parse(turn, self.max_answer_bytes)
    obs = self.apply(*act) if act is not None else "Nothing happens."
    new = 0
    for _ in range(self.stages):
      if self.stage >= self.stages:
        break
      k = self.stage
      subs, success = self.status(k)
      new += len(subs - self.reached[k])
      self.reached[k] |= subs
      if not success:
        break
      self.stage += 1
    solved = self.stage >= self.stages
    self.steps += 1
    self.done = solved or self.steps >= self.max_steps
    terms = [float(solved), float(new), float(act is None)]
    return obs + self.suffix(), terms, self.done, {"success": solved, "milestone": new > 0, "valid": act is not None}

  def admissible(self) -> list[str]:
    """Every action whose preconditions hold, in the env's listing order (go to, examine /
    open / close here, per object: examine, use or take, then move, transform, look, inventory)."""
    out = [f"go to {C.REC_NAMES[r]}" for r in range(C.R) if self.present[r] and r != self.at]
    at = self.at
    if at is not None:
      out.append(f"examine {C.REC_NAMES[at]}")
      if C.REC_OPENABLE[at]:
        out.append(f"{'close' if at in self.opened else 'open'} {C.REC_NAMES[at]}")
    for s in self.slots:
      here = at is not None and self.loc[s] == at and self.held != s and self.accessible(at)
      if here or self.held == s:
        out.append(f"examine {self.oname(s)}")
      if here and C.LIGHT[self.kind[s]]:
        out.append(f"use {self.oname(s)}")
      elif here and self.held is None:
        out.append(f"take {self.oname(s)} from {C.REC_NAMES[at]}")
    if self.held is not None and at is not None:
      h = self.oname(self.held)
      if self.accessible(at):
        out.append(f"move {h} to {C.REC_NAMES[at]}")
      for verb, (kind, prop) in (("heat", (C.HEATER, 0)), ("cool", (C.COOLER, 1)), ("clean", (C.CLEANER, 2))):
        if C.REC_KIND[at] == kind and C.PROPS[self.kind[self.held], prop]:
          out.append(f"{verb} {h} with {C.REC_NAMES[at]}")
    return out + ["look", "inventory"]

  def suffix(self) -> str:
    room = f"\n\nIn the room, you see {self.overview()}" if self.repeat_room else ""
    return room + (self.goal_text() if self.repeat_goal else "") + self.listing()

  def listing(self) -> str:
    return "\nAvailable actions: " + ", ".join(self.admissible()) + "." if self.list_actions else ""
