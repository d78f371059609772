"""Test games for the pool (importable by name in spawned workers: pickled by reference)."""
import os
import signal
import time

from agent_rl.envs.host.game import GameObs
from agent_rl.envs.host.toy import KeyRoomGame


class FaultyGame(KeyRoomGame):
  """KeyRoom whose step on "nap" takes 1 s, on "sleep" never returns, on "boom" raises, on "die" kills its own
  process (a JVM crash), whose task 13 fails to reset, and which kills itself at step `die_at` of an episode (0 = never)."""

  def __init__(self, die_at: int = 0, **kw):
    super().__init__(**kw)
    self.die_at = die_at

  def reset(self, task_id, seed):
    if task_id == "keyroom-13":
      raise RuntimeError("this game does not start")
    return super().reset(task_id, seed)

  def step(self, command):
    if command == "sleep":
      time.sleep(3600)
    if command == "nap":
      time.sleep(1.0)
      command = "look"
    if command == "boom":
      raise RuntimeError("the game broke")
    if command == "die" or (self.die_at and self._state["steps"] + 1 >= self.die_at):
      os.kill(os.getpid(), signal.SIGKILL)
    return super().step(command)


class NoStateGame(KeyRoomGame):
  """KeyRoom without a state key: the env hashes the observation text instead."""

  def _obs(self, text):
    o = super()._obs(text)
    return GameObs(text=o.text, admissible=o.admissible, state_key=None)


class CountingGame(KeyRoomGame):
  """KeyRoom that appends "task_id seed" to the file `log` at each reset (which process
  reset what, when: the pool's resets ahead are observable without timing them)."""

  def __init__(self, log: str = "", **kw):
    super().__init__(**kw)
    self.log = log

  def reset(self, task_id, seed):
    with open(self.log, "a") as f:
      f.write(f"{task_id} {seed}\n")
    return super().reset(task_id, seed)


class DriftGame(KeyRoomGame):
  """KeyRoom whose every text names how often this game was reset: not a function of (task,
  seed, commands), so a replay into another game does not reproduce it."""

  def __init__(self, **kw):
    super().__init__(**kw)
    self.resets = 0

  def reset(self, task_id, seed):
    self.resets += 1
    return super().reset(task_id, seed)

  def _obs(self, text):
    return super()._obs(f"{text} (visit {self.resets})")


class PlanGapGame(KeyRoomGame):
  """KeyRoom without an expert plan from starts whose seed is a multiple of 3 (its adapter
  raises there, as a planner that gives up does)."""

  def expert(self, task_id, seed):
    if seed % 3 == 0:
      raise RuntimeError("no plan from this start")
    return super().expert(task_id, seed)
