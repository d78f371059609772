"""Start-up checks of the reward-model fields (`config.rm`, `config.reward.model*`).

Called by `train.config.validate` (every run) before anything compiles; each failure names
the field, the run or the env. The checks that need the reward model's own run directory
(its vocabulary, its kind) run when the RL run loads it (`reward.use.load_for_rl`).
"""
from __future__ import annotations

import os

from agent_rl.registry import Registry
from agent_rl.train.optim import check_phase_schedule

KINDS = ("outcome", "process", "dpo", "kto")  # dpo / kto: reward.offline trains the policy
SOURCES = ("rollouts", "pairs")
USES = ("add", "replace", "process")

# env name -> fn(batch: EpisodeBatch) -> [N, T] bool labels of the turns that made verified
# progress (the PRM's step labels). An env missing here emits no step labels.
STEP_LABELS = Registry("step-label source")


@STEP_LABELS.register("sokoban")
def sokoban_labels(batch):
  """Sokoban's milestone: the turn put a box on a target (`info["milestone"]`, the reward
  term `boxes` > 0), the env's own verifier of a step's progress."""
  return batch.milestone


def validate_reward(c, need) -> None:
  """`need(cond, field, msg)` raises ValueError("config.<field>: msg") (train.config)."""
  rm, rw = c.rm, c.reward
  need(rm.kind in KINDS, "rm.kind", f"must be {'|'.join(KINDS)}, got {rm.kind!r}")
  need(rm.source in SOURCES, "rm.source", f"must be {'|'.join(SOURCES)}, got {rm.source!r}")
  for f in ("rollout_batches", "held_out_batches", "steps", "batch_size", "eval_every"):
    need(rm[f] >= 1, f"rm.{f}", f"must be >= 1, got {rm[f]}")
  need(rm.lr > 0, "rm.lr", "must be > 0")
  check_phase_schedule(c, "rm", need)
  need(0 < rm.held_out_frac < 1, "rm.held_out_frac", f"must be in (0, 1), got {rm.held_out_frac}")
  if rm.kind == "process":
    need(rm.source == "rollouts", "rm.source",
         "a process RM learns from the env's step labels: source must be 'rollouts'")
    need(c.env.name in STEP_LABELS, "rm.kind",
         f"a process RM needs step labels, and env {c.env.name!r} emits none; envs with step "
         f"labels: {', '.join(STEP_LABELS.names())}")
  if rm.source == "pairs":
    need(bool(rm.pairs_path) and os.path.isfile(rm.pairs_path), "rm.pairs_path",
         f"source=pairs needs a JSONL file of prompt/chosen/rejected, got {rm.pairs_path!r}")
  if rm.policy_run:
    need(os.path.isfile(os.path.join(rm.policy_run, "config.json")), "rm.policy_run",
         f"{rm.policy_run!r} is not an agent_rl run directory (no config.json)")
  need(rw.model_use in USES, "reward.model_use",
       f"must be {'|'.join(USES)}, got {rw.model_use!r}")
  need(0 < rw.hacking_ema < 1, "reward.hacking_ema", f"must be in (0, 1), got {rw.hacking_ema}")
  if rw.model:
    need(os.path.isfile(os.path.join(rw.model, "config.json")), "reward.model",
         f"{rw.model!r} is not a reward-model run directory (no config.json)")
    names = [n.strip() for n in str(rw.shapers).split(",")]
    need("reward_model" in names, "reward.shapers",
         f"reward.model is set but the shaper 'reward_model' is not listed in {rw.shapers!r}; "
         "e.g. --config.reward.shapers=reward_model,kl_in_reward,overlong")
