"""Held-out counterparts: one agent of a run against other agents' frozen weights.

    config.eval.counterparts = {"team_s0": "runs/team/seed0",   # another run (best checkpoint)
                                "early": "runs/ibrl/seed0@20"}  # a run's checkpoint at step 20
    config.eval.counterpart_agent = 0  # the agent under test keeps its own weights

Self-play success does not show that an agent generalizes: a pair trained together can
co-adapt (agree on conventions, or collude on a shared reward). IB-RL (arXiv 2608.06735)
claims that isolated per-agent advantages give agents that do well against counterparts they
never met. Two kinds of held-out counterpart are evaluated: scripted ones (env kwargs,
`eval.variant_kwargs`, e.g. DealLite's bargainers) and learned ones, here: the frozen weights
of another run (another seed or method, the cross-play test of Hu et al. 2020, "Other-Play",
arXiv:2003.02979) or an earlier checkpoint of a run (`DIR@STEP`; the run must have kept it:
`train.keep_checkpoints`, or the best-by-eval step).

A counterpart panel is the run's env (self-play) with agent `counterpart_agent`'s slice of the
stacked weights from the run under test and every other agent's slice from the counterpart run
(`splice`), evaluated like any panel: `eval/<name>/success`, `/reward`, and per agent
`eval/<name>/agent{k}/return`. Per-agent weights only (agents.mode lora | separate): with
`shared` one network plays every role, so there is nothing to swap. The counterpart run must
hold the same agents (mode, count) and model; it is restored once at start-up (its policy LM
only, onto the run's mesh) and checked there: errors name `eval.counterparts.<name>`.
"""
from __future__ import annotations

import os
from typing import Any, NamedTuple, Optional

import jax

from agent_rl.agents.params import is_stacked


class Counterpart(NamedTuple):
  name: str
  workdir: str
  step: int  # the checkpoint step its weights come from
  lm_params: Any  # its policy LM's params (stacked like the run's), on the run's mesh


def parse(spec: str, field: str) -> tuple[str, Optional[int]]:
  """"DIR" -> (DIR, None: its best checkpoint); "DIR@STEP" -> (DIR, STEP)."""
  if not isinstance(spec, str) or not spec.strip():
    raise ValueError(f"config.{field}: must be a run directory 'DIR' or 'DIR@STEP', got {spec!r}")
  path, at, step = spec.rpartition("@") if "@" in spec else (spec, "", "")
  if at and not (step.isdigit() and path):
    raise ValueError(f"config.{field}: {spec!r}: the part after '@' must be a checkpoint step "
                     "(a non-negative integer)")
  return path, (int(step) if at else None)


def validate(c: Any, need) -> None:
  """Config-only checks (before anything is restored or compiled)."""
  cps = dict(c.eval.counterparts)
  if not cps:
    return
  need(c.agents.mode != "shared", "eval.counterparts",
       "needs per-agent weights (agents.mode=lora|separate); with agents.mode='shared' one "
       "network plays every role, so no agent's weights can be swapped")
  k = c.eval.counterpart_agent
  need(isinstance(k, int) and not isinstance(k, bool) and k >= 0, "eval.counterpart_agent",
       f"must be an agent index >= 0, got {k!r}")
  clash = sorted(set(cps) & set(dict(c.eval.variant_kwargs)))
  need(not clash, "eval.counterparts", f"panel names {clash} are also eval.variant_kwargs panels")
  for name, spec in cps.items():
    need(bool(name) and "/" not in name, f"eval.counterparts.{name}",
         "a panel name must be non-empty and have no '/'")
    path, _ = parse(spec, f"eval.counterparts.{name}")
    for f in ("config.json", "checkpoints"):
      need(os.path.exists(os.path.join(path, f)), f"eval.counterparts.{name}",
           f"{path!r} is not an agent_rl run directory (no {f})")


def load(c: Any, setup: Any, place: Any) -> tuple[Counterpart, ...]:
  """Each `config.eval.counterparts` run's policy on `place`, checked against the run."""
  from agent_rl.train.pretrained import load_run_config, load_run_policy, run_agents
  from agent_rl.train.setup import model_config
  out = []
  ag = setup.agents
  if int(c.eval.counterpart_agent) >= ag.num and c.eval.counterparts:
    raise ValueError(f"config.eval.counterpart_agent: {c.eval.counterpart_agent} is not an "
                     f"agent of this run ({ag.num} agents)")
  for name, spec in sorted(dict(c.eval.counterparts).items()):
    field = f"config.eval.counterparts.{name}"
    path, step = parse(spec, field[len("config."):])
    theirs = run_agents(path)
    if (theirs.mode, theirs.num) != (ag.mode, ag.num):
      raise ValueError(f"{field}: {path} holds agents {theirs.mode}:{theirs.num}, this run "
                       f"{ag.mode}:{ag.num}; a counterpart must have the same agents")
    their_cfg = model_config(load_run_config(path), setup.model_cfg.vocab_size)
    if their_cfg.computing_as(setup.model_cfg) != setup.model_cfg:
      raise ValueError(f"{field}: {path}'s model differs from this run's (model config or "
                       "vocabulary); a counterpart must be the same model")
    try:
      rp = load_run_policy(path, setup.model_cfg.vocab_size, place, step=step,
                           compute=setup.model_cfg)
    except (FileNotFoundError, ValueError, KeyError) as e:
      raise ValueError(f"{field}: cannot restore {spec!r} ({type(e).__name__}: "
                       f"{str(e)[:160]})") from None
    out.append(Counterpart(name, path, rp.step, rp.params))
  return tuple(out)


def splice(mode: str, own_lm: Any, other_lm: Any, keep: int) -> Any:
  """Policy-LM params where agent `keep`'s slice of every stacked leaf is `own_lm`'s and every
  other agent's is `other_lm`'s; unstacked leaves (the lora mode's frozen base) are `own_lm`'s.
  Both trees are the `lm` subtree of a stacked state ([K, *leaf] on stacked leaves)."""
  pick = is_stacked(mode)
  lm = (jax.tree_util.DictKey("lm"),)

  def one(path, mine, theirs):
    if not pick(lm + path):
      return mine
    return theirs.at[keep].set(mine[keep])

  return jax.tree_util.tree_map_with_path(one, own_lm, other_lm)
