"""KeyRoom: a tiny deterministic text game in plain Python, registered as host adapter "toy".

It stands in for a real package (TextWorld, ...) wherever the host path must be exercised in
seconds: the pool, `TextHostEnv`, overlap, exact resume of a host run, the host benchmark.
It speaks the `TextGame` contract of game.py exactly as the adapters do (a running score
reported as deltas, `won`/`lost` flags, admissible commands, a state key).

A house of `num_rooms` rooms; a key lies in one room, a locked door is in another. Commands:
`go to <room>`, `take key`, `unlock door`, `look`. +1 for taking the key, +1 for unlocking the
door (won). The episode is lost after `max_steps` steps. A reset is a pure function of
(task_id, seed): the layout comes from `random.Random(f"{task_id}:{seed}")` (Python's
str seeding hashes with SHA-512, so it is the same in every process).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Sequence

from agent_rl.envs.host.game import ADAPTERS, GameObs, GameStep

ROOMS = ("hall", "kitchen", "study", "cellar", "attic", "garden")
SPLITS = {"train": (0, 64), "eval": (1000, 1016)}


@ADAPTERS.register("toy")
class KeyRoomGame:
  """num_rooms: rooms of the house (2-6); max_steps: steps before the game is lost."""

  def __init__(self, num_rooms: int = 3, max_steps: int = 8):
    if not 2 <= num_rooms <= len(ROOMS):
      raise ValueError(f"KeyRoomGame: num_rooms must be in [2, {len(ROOMS)}], got {num_rooms}")
    if max_steps < 1:
      raise ValueError(f"KeyRoomGame: max_steps must be >= 1, got {max_steps}")
    self.num_rooms, self.max_steps = int(num_rooms), int(max_steps)
    self._state = None

  def task_ids(self, split: str) -> Sequence[str]:
    if split not in SPLITS:
      raise ValueError(f"KeyRoomGame: unknown split {split!r}; known: {', '.join(SPLITS)}")
    lo, hi = SPLITS[split]
    return [f"keyroom-{i}" for i in range(lo, hi)]

  def instruction(self) -> str:
    return ("You are in a house. Find the key and unlock the door. Reply with one command "
            "as <answer>command</answer>, e.g. <answer>go to kitchen</answer>.")

  def reset(self, task_id: str, seed: int) -> GameObs:
    rng = random.Random(f"{task_id}:{seed}")
    rooms = list(ROOMS[:self.num_rooms])
    rng.shuffle(rooms)
    key_room, door_room = rng.sample(rooms, 2)
    self._state = dict(rooms=tuple(rooms), here=rooms[0], key=key_room, door=door_room,
                       has_key=False, unlocked=False, steps=0)
    return self._obs(f"Goal: unlock the door. {self._describe()}")

  def _describe(self) -> str:
    s = self._state
    things = []
    if s["key"] == s["here"] and not s["has_key"]:
      things.append("a key")
    if s["door"] == s["here"]:
      things.append("an unlocked door" if s["unlocked"] else "a locked door")
    seen = f" You see {' and '.join(things)}." if things else " The room is empty."
    return f"You are in the {s['here']}.{seen}"

  def _admissible(self) -> tuple[str, ...]:
    s = self._state
    cmds = [f"go to {r}" for r in s["rooms"] if r != s["here"]] + ["look"]
    if s["key"] == s["here"] and not s["has_key"]:
      cmds.append("take key")
    if s["door"] == s["here"] and s["has_key"] and not s["unlocked"]:
      cmds.append("unlock door")
    return tuple(cmds)

  def _obs(self, text: str) -> GameObs:
    s = self._state
    key = f"{s['here']}|{int(s['has_key'])}|{int(s['unlocked'])}".encode()
    return GameObs(text=text, admissible=self._admissible(), state_key=key)

  def step(self, command: str) -> GameStep:
    if self._state is None:
      raise RuntimeError("KeyRoomGame.step before reset")
    s = self._state
    s["steps"] += 1
    cmd = " ".join(command.lower().split())
    delta = 0.0
    if cmd.startswith("go to ") and cmd[6:] in s["rooms"] and cmd[6:] != s["here"]:
      s["here"] = cmd[6:]
      text = self._describe()
    elif cmd == "look":
      text = self._describe()
    elif cmd == "take key" and s["key"] == s["here"] and not s["has_key"]:
      s["has_key"], delta, text = True, 1.0, "You take the key."
    elif cmd == "unlock door" and s["door"] == s["here"] and s["has_key"] and not s["unlocked"]:
      s["unlocked"], delta, text = True, 1.0, "You unlock the door. You won!"
    else:
      text = "Nothing happens."
    won = s["unlocked"]
    lost = not won and s["steps"] >= self.max_steps
    return GameStep(obs=self._obs(text), score_delta=delta, done=won or lost, won=won, lost=lost,
                    extras={"steps": float(s["steps"])})

  def expert(self, task_id: str, seed: int) -> list[str]:
    """The shortest winning plan from the start of (task_id, seed) (leaves the game reset)."""
    self.reset(task_id, seed)
    s = self._state
    plan = [] if s["key"] == s["here"] else [f"go to {s['key']}"]
    plan.append("take key")
    if s["door"] != s["key"]:
      plan.append(f"go to {s['door']}")
    return plan + ["unlock door"]

  def close(self) -> None:
    self._state = None


@ADAPTERS.register("toy_duo")
class KeyRoomDuo(KeyRoomGame):
  """KeyRoom for two agents, a game with roles (issue 21): the scout moves (`go to <room>`,
  `look`), the keyholder handles the key and the door (`take key`, `unlock door`, `look`).
  The game passes the turn to the keyholder when the room holds something for it (the key not
  yet taken; the locked door once the key is held), else to the scout. A command of the other
  role does nothing. Each role is paid its own scale of the score (`role_rewards`): scout 0.2,
  keyholder 1.0, the different per-agent reward scales Dr. MAS (arXiv:2602.08847) studies."""

  ROLES = ("scout", "keyholder")
  SCALES = (0.2, 1.0)

  def roles(self) -> tuple[str, ...]:
    return self.ROLES

  def instruction(self) -> str:
    return ("Two agents search a house: the scout walks between rooms, the keyholder takes the "
            "key and unlocks the door. Reply with one command as <answer>command</answer>.")

  def _next_agent(self) -> int:
    s = self._state
    here = s["here"]
    for_keyholder = ((s["key"] == here and not s["has_key"])
                     or (s["door"] == here and s["has_key"] and not s["unlocked"]))
    return int(for_keyholder)

  def _obs(self, text: str) -> GameObs:
    o = super()._obs(text)
    who = self._next_agent()
    mine = tuple(a for a in o.admissible if a == "look" or a.startswith("go to ") == (who == 0))
    return GameObs(text=o.text, admissible=mine, state_key=o.state_key, next_agent=who)

  def step(self, command: str) -> GameStep:
    if self._state is None:
      raise RuntimeError("KeyRoomDuo.step before reset")
    cmd = " ".join(command.lower().split())
    scout = self._next_agent() == 0
    if cmd != "look" and cmd.startswith("go to ") != scout:
      cmd = "(not this role's command)"  # does nothing, as an unknown command
    st = super().step(cmd)
    return dataclasses.replace(st, role_rewards=tuple(s * st.score_delta for s in self.SCALES))
