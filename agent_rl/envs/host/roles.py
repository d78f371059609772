"""Several agents on a host text game (issue 21): who acts, what each reads, what each is paid.

Two sources of roles:
- a game with roles of its own (`TextGame.roles()`; the toy "toy_duo"): it says who acts next
  in `GameObs.next_agent` and may pay each role its own reward (`GameStep.role_rewards`);
- a game without roles played by `env.host.roles` on a `schedule` (turn t is acted by
  `schedule[(t + offset) % len]`, round robin by default; `offset_by_task` starts each task's
  episodes at a different point of the cycle: the "staggered" schedules), as envs/roles.py
  does for JAX envs.

Reward columns (`reward_names` = ("score", "role/<role>", ...), `role_reward_terms` the role
columns, as envs/roles.py): role k's column is the game's `role_rewards[k]` (a game with roles
that pays none: the team score), or on a schedule with `role_scales` scale_k x score_delta;
an invalid action's penalty goes to the column of the agent that made it. A schedule without
`role_scales` has no columns (a team reward, as envs/roles.py without role_rewards).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from agent_rl.envs.roles import parse_roles, parse_schedule


def _items(spec) -> tuple:
  """A config value given as a comma string or a sequence, empty entries dropped."""
  items = spec.split(",") if isinstance(spec, str) else (spec or ())
  return tuple(x for x in items if str(x).strip())


@dataclasses.dataclass(frozen=True)
class HostRoles:
  """roles: names (() = one agent); schedule: agent per turn (() when the game decides);
  game_decides: the game has roles and says `next_agent`; role_scales: per-role scales of
  the score on a schedule (() = none)."""
  roles: tuple = ()
  schedule: tuple = ()
  game_decides: bool = False
  offset_by_task: bool = False
  role_scales: tuple = ()

  @property
  def paid(self) -> bool:
    """Whether the env emits per-role reward columns."""
    return self.game_decides or bool(self.role_scales)

  @property
  def role_reward_terms(self) -> Optional[tuple]:
    return tuple(f"role/{r}" for r in self.roles) if self.paid else None

  @property
  def reward_names(self) -> Optional[tuple]:
    return ("score",) + self.role_reward_terms if self.paid else None

  def offset(self, seed: int) -> int:
    """Where an episode reset with `seed` starts in the schedule."""
    return seed % len(self.schedule) if self.offset_by_task and self.schedule else 0

  def who(self, turn: int, offset: int, next_agent: Any) -> int:
    """The agent that acts at `turn` (the game's `next_agent` when the game decides)."""
    if not self.roles:
      return 0
    if not self.game_decides:
      return self.schedule[(turn + offset) % len(self.schedule)]
    if not isinstance(next_agent, (int, np.integer)) or not 0 <= int(next_agent) < len(self.roles):
      raise ValueError(f"host game with roles {self.roles}: GameObs.next_agent must be an int "
                       f"in 0..{len(self.roles) - 1}, got {next_agent!r} (an adapter bug)")
    return int(next_agent)

  def pay(self, terms: np.ndarray, acted: int, score: Optional[float],
          role_rewards: tuple, penalty: float) -> None:
    """Fills one row's reward columns `terms [1 + K]` in place; `score` None = an invalid
    action (the game was not stepped; `penalty` to the team and to the agent that acted)."""
    if score is None:
      terms[0] = terms[1 + acted] = penalty
      return
    terms[0] = score
    if self.game_decides and role_rewards:
      if len(role_rewards) != len(self.roles):
        raise ValueError(f"host game with roles {self.roles}: GameStep.role_rewards must hold "
                         f"one float per role, got {role_rewards!r} (an adapter bug)")
      terms[1:] = role_rewards
    elif self.role_scales:
      terms[1:] = np.asarray(self.role_scales, np.float32) * score
    else:
      terms[1:] = score


def host_roles(game_roles: tuple, roles: Any = (), schedule: Any = (),
               offset_by_task: bool = False, role_scales: Any = ()) -> HostRoles:
  """The run's HostRoles from the game's own roles and the config (env.host.roles, schedule,
  offset_by_task, role_scales); errors name the config field."""
  given, scales, sched = _items(roles), _items(role_scales), _items(schedule)
  if game_roles:
    for field, v in (("roles", given), ("schedule", sched), ("role_scales", scales),
                     ("offset_by_task", offset_by_task)):
      if v:
        raise ValueError(f"env.host.{field}: the game names its own roles {tuple(game_roles)} "
                         "and says who acts next; leave env.host.roles / schedule / "
                         "offset_by_task / role_scales unset")
    return HostRoles(roles=tuple(game_roles), game_decides=True)
  if not given:
    for field, v in (("schedule", sched), ("role_scales", scales),
                     ("offset_by_task", offset_by_task)):
      if v:
        raise ValueError(f"env.host.{field} needs env.host.roles (the agents' role names)")
    return HostRoles()
  names = parse_roles(given, "env.host.roles")
  try:
    pay = tuple(float(x) for x in scales)
  except ValueError:
    raise ValueError(f"env.host.role_scales: one float per role, got {role_scales!r}") from None
  if pay and (len(pay) != len(names) or not np.all(np.isfinite(pay))):
    raise ValueError(f"env.host.role_scales: one finite float per role {names}, got "
                     f"{role_scales!r}")
  return HostRoles(roles=names, schedule=parse_schedule(sched, names, "env.host.schedule"),
                   offset_by_task=bool(offset_by_task), role_scales=pay)
