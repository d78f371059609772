"""The text-game contract of host environments (one game instance, plain Python strings).

Host packages (TextWorld, ALFWorld, ScienceWorld, TextWorld-Express) speak text, one game at a
time. Each adapter in this package wraps one package as a `TextGame`; the pool (pool.py) runs
several of them in worker processes, and `TextHostEnv` (text_env.py) turns a batch of them into
the token-level `HostEnv` of `agent_rl.rollout.bridge` (tokenize observations with the run's
tokenizer, parse the model's action text, list admissible actions in the prompt by config).

    game = ADAPTERS.get("textworld")(**kwargs)      # built inside the worker process
    ids = game.task_ids(split)                      # the deterministic task panel of a split
    obs = game.reset(task_id, seed)                 # GameObs
    step = game.step("open the fridge")             # GameStep
    game.close()

Everything an adapter returns is plain Python data (picklable across the pool's pipes), and a
reset is a pure function of (task_id, seed), so a run that resumes replays the same panels.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Protocol, Sequence

from agent_rl.registry import Registry

ADAPTERS = Registry("host text game")


@dataclasses.dataclass(frozen=True)
class GameObs:
  """What the agent sees after a reset or a step.

  text: the game's observation (feedback) text; admissible: the admissible commands where the
  game exposes them (None otherwise); state_key: bytes identifying the game state where the
  package exposes one (e.g. TextWorld's state facts), None to fall back on a hash of `text`.
  """
  text: str
  admissible: Optional[tuple[str, ...]] = None
  state_key: Optional[bytes] = None


@dataclasses.dataclass(frozen=True)
class GameStep:
  """One step's outcome. score_delta: the change of the game's running score (the reward);
  won / lost: the game's own flags; extras: one float per key, the same keys every step."""
  obs: GameObs
  score_delta: float
  done: bool
  won: bool
  lost: bool = False
  extras: dict = dataclasses.field(default_factory=dict)


class TextGame(Protocol):
  """One game instance; built and used inside one worker process (it may own a JVM)."""

  def task_ids(self, split: str) -> Sequence[str]: ...

  def instruction(self) -> str: ...

  def reset(self, task_id: str, seed: int) -> GameObs: ...

  def step(self, command: str) -> GameStep: ...

  def close(self) -> None: ...
