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

A game may also have `expert(task_id, seed) -> [command, ...]`, a winning plan from that
start (the package's walkthrough, gold path or planner): the SFT demonstrations of a host run
(data/host_demos.py).

A game with roles (several agents take its turns, issue 21) also has `roles()` (its role
names), says who acts next in `GameObs.next_agent` (the observation is rendered for that agent)
and may pay each role its own reward (`GameStep.role_rewards`, one float per role). A game
without roles can still be played by several agents on a schedule (text_env.py: `roles=`).

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
  next_agent: a game with roles: the agent (index into `roles()`) that acts next and reads
  this observation; None for games without roles.
  """
  text: str
  admissible: Optional[tuple[str, ...]] = None
  state_key: Optional[bytes] = None
  next_agent: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class GameStep:
  """One step's outcome. score_delta: the change of the game's running score (the reward);
  won / lost: the game's own flags; extras: one float per key, the same keys every step;
  role_rewards: a game with roles that pays each role its own reward: one float per role
  (() = the team reward `score_delta` only)."""
  obs: GameObs
  score_delta: float
  done: bool
  won: bool
  lost: bool = False
  extras: dict = dataclasses.field(default_factory=dict)
  role_rewards: tuple = ()


class TextGame(Protocol):
  """One game instance; built and used inside one worker process (it may own a JVM)."""

  def task_ids(self, split: str) -> Sequence[str]: ...

  def instruction(self) -> str: ...

  def reset(self, task_id: str, seed: int) -> GameObs: ...

  def step(self, command: str) -> GameStep: ...

  def close(self) -> None: ...


def game_roles(game) -> tuple[str, ...]:
  """The role names of a game with roles (its optional `roles()`), else ()."""
  fn = getattr(game, "roles", None)
  return tuple(str(r) for r in fn()) if callable(fn) else ()
