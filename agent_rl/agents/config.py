"""`config.agents`: how many agents an episode has and how their parameters are held.

    agents.mode  shared | lora | separate   (agents.params: one network with role prompts,
                                             per-agent LoRA adapters on one base, or K copies)
    agents.num   K; 0 = the env's role count (`env.roles`), 1 for a single-agent env

Start-up checks name the field: an unknown mode, a count that does not match the env's
roles, per-agent weights without windowed history or LoRA, and the features whose scoring
paths do not route rows to agents yet (distillation, hindsight, reward model) are refused
before anything compiles (the KL reference and the critic route rows like the learner:
`agents.routing.route`); a checkpoint written with other agents is
refused on resume (`check_checkpoint`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from agent_rl.agents.params import MODES


@dataclasses.dataclass(frozen=True)
class Agents:
  """A run's resolved agents: `mode` (agents.params.MODES) and `num` K >= 1."""
  mode: str = "shared"
  num: int = 1
  init: tuple = ()    # agent k's initial policy run ("" = the run's own), agents/frozen.py
  frozen: tuple = ()  # agents that act but never train

  @property
  def stacked(self) -> bool:
    return self.mode != "shared"

  @property
  def tag(self) -> str:
    """What a checkpoint's meta records (`shared:1` for every single-network run)."""
    return f"{self.mode}:{self.num}" if self.stacked else f"shared:{self.num}"


def validate_agents(c: Any, need) -> None:
  """Config-only checks of `config.agents` (the env's role count is checked by `resolve`)."""
  a = c.agents
  need(a.mode in MODES, "agents.mode", f"must be {'|'.join(MODES)}, got {a.mode!r}")
  from agent_rl.agents import frozen
  frozen.validate(c, need)
  need(isinstance(a.num, int) and not isinstance(a.num, bool) and a.num >= 0, "agents.num",
       f"must be an int >= 0 (0 = the env's role count), got {a.num!r}")
  if a.mode == "shared":
    return
  need(a.num != 1, "agents.num", f"agents.mode={a.mode!r} holds weights per agent: needs >= 2 "
       "agents (or 0 for the env's roles), got 1")
  need(c.rollout.history == "windowed", "rollout.history",
       f"agents.mode={a.mode!r} needs 'windowed' (one turn, hence one agent, per row), got "
       f"{c.rollout.history!r}")
  if a.mode == "lora":
    need(c.model.lora.rank > 0, "model.lora.rank",
         "agents.mode='lora' trains one adapter per agent: set model.lora.rank > 0")
  # Every scoring forward routes rows to agents (agents.routing.route): the critic, the KL
  # reference, the hindsight rescoring (each agent with the privileged prefix) and a
  # distillation teacher (one network for every agent, or a run with the same agents); a
  # reward model scores episodes, whoever acted.


def resolve(c: Any, env: Any) -> Agents:
  """The run's Agents from the config and the env's roles (errors name the field)."""
  roles = tuple(getattr(env, "roles", ()) or ())
  num = int(c.agents.num) or max(len(roles), 1)
  if roles and num != len(roles):
    raise ValueError(f"config.agents.num: {num} agents, but env {c.env.name!r} has "
                     f"{len(roles)} roles {roles}")
  if not roles and num > 1:
    raise ValueError(f"config.agents.num: {num} agents, but env {c.env.name!r} has no roles "
                     "(a multi-agent env names them in `roles` and says `next_agent`)")
  if c.agents.mode != "shared" and num < 2:
    raise ValueError(f"config.agents.mode: {c.agents.mode!r} needs an env with >= 2 roles; "
                     f"{c.env.name!r} has {len(roles) or 1}")
  from agent_rl.agents import frozen
  init, still = frozen.check(c, num)
  return Agents(mode=c.agents.mode, num=num, init=init, frozen=still)


def teacher_mode(teacher: "Agents", agents: "Agents", where: str) -> str:
  """How a distillation teacher's rows are routed: one network (shared) teaches every agent;
  a teacher with per-agent weights teaches agent k with its agent k (same mode and count)."""
  if not teacher.stacked:
    return "shared"
  if teacher.tag != agents.tag:
    raise ValueError(f"{where}: the teacher run holds agents {teacher.tag!r} (mode:count), the "
                     f"run {agents.tag!r}; a teacher with per-agent weights teaches a run with "
                     "the same agents.mode and agents.num (or use a single-network teacher)")
  return teacher.mode


def check_checkpoint(meta_agents: str, agents: Agents, where: str) -> None:
  """Refuses a checkpoint whose agents differ from the run's (its meta's `agents` tag; an
  older checkpoint without one held a single network)."""
  have = meta_agents or "shared:1"
  if have != agents.tag and (have.split(":")[0] != "shared" or agents.stacked):
    raise ValueError(f"{where}: the checkpoint holds agents {have!r} (mode:count) but the run "
                     f"has config.agents {agents.tag!r}; a checkpoint restores into the same "
                     "agents.mode and agents.num only")
