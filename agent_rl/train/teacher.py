"""A run's teacher: another agent_rl run whose policy scores the student's tokens (on-policy
distillation, `distill.coef`) and may take over turns in the rollout (FutureBridge-OPD's
interventions, `distill.intervene`, rollout/intervene.py).

    config.distill.teacher = "runs/big"  # its best checkpoint; the student speaks its tokens
    config.distill.coef = 1.0            # the distillation loss / advantage (losses/distill.py)
    config.distill.intervene = 0.5       # > 0: the teacher acts a turn whose student action
                                         # it scores > 0.5 nats/token below the student
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, NamedTuple

from agent_rl.train import pretrained


def uses_teacher(c) -> bool:
  return c.distill.coef > 0 or c.distill.get("intervene", 0.0) > 0


def validate(c, need) -> None:
  """The distillation fields, before anything is built (errors name the field)."""
  need(c.distill.mode in ("loss", "advantage"), "distill.mode",
       f"must be loss|advantage, got {c.distill.mode!r}")
  need(c.distill.coef >= 0, "distill.coef", f"must be >= 0, got {c.distill.coef}")
  gap = c.distill.get("intervene", 0.0)
  need(gap >= 0, "distill.intervene", f"must be >= 0 (nats per token; 0 = off), got {gap}")
  if not uses_teacher(c):
    return
  need(bool(c.distill.teacher), "distill.teacher",
       "distill.coef > 0 or distill.intervene > 0 needs a teacher run directory")
  need(os.path.isfile(os.path.join(c.distill.teacher, "config.json")), "distill.teacher",
       f"{c.distill.teacher!r} is not an agent_rl run directory (no config.json)")
  if gap > 0:
    from agent_rl.envs.host.build import is_host
    need(c.rollout.history == "windowed", "distill.intervene",
         "teacher interventions need rollout.history='windowed' (each turn its own sample)")
    need(c.agents.mode == "shared" and int(c.agents.num) <= 1, "distill.intervene",
         f"teacher interventions need one network (agents.mode shared, one agent), got "
         f"{c.agents.mode}:{c.agents.num}")
    need(not is_host(c.env.name), "distill.intervene",
         f"teacher interventions run in the compiled rollout; {c.env.name!r} is a host env")
    need(c.rollout.strategy != "tsr", "distill.intervene", "cannot be combined with TSR search")


class Teacher(NamedTuple):
  lm_graphdef: Any
  params: Any
  mode: str  # how its rows are routed (agents.config.teacher_mode)
  model_cfg: Any


def load(c, setup, place) -> Teacher | None:
  """The teacher run's policy on the run's mesh (None without one)."""
  if not uses_teacher(c):
    return None
  from agent_rl.agents.config import teacher_mode
  mode = teacher_mode(pretrained.run_agents(c.distill.teacher), setup.agents,
                      "config.distill.teacher")
  t = pretrained.load_run_policy(c.distill.teacher, setup.model_cfg.vocab_size, place,
                                compute=setup.model_cfg)
  return Teacher(t.lm_graphdef, t.params, mode, t.model_cfg)


def rollout_with_interventions(c, policy, env, roll_cfg, pieces, teacher: Teacher):
  """The compiled rollout in which the teacher may take over turns; called like any
  `rollout(params, tasks, key)` (the teacher's weights are an argument, not a constant)."""
  from agent_rl.rollout.compiled import make_rollout
  from agent_rl.rollout.intervene import InterveneConfig
  from agent_rl.rollout.policy import Policy
  cfg = dataclasses.replace(roll_cfg, intervene=InterveneConfig(float(c.distill.intervene)))
  fn = make_rollout(policy, env, cfg, pieces,
                    teacher=Policy.from_model(teacher.model_cfg, teacher.lm_graphdef))
  return functools.partial(fn, teacher_params=teacher.params)
