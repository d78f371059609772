"""The `reward_model` shaper: a frozen reward model's scores into the turn rewards.

The RL run scores each rollout with the reward model of `config.reward.model` in one jitted
pass (`agent_rl.reward.use.RewardSource.attach`) and leaves the scores in the batch's turn
extras: `rm/outcome` (the outcome score on each episode's last valid turn, 0 elsewhere) and
`rm/turns` (the per-turn scores). This shaper combines them with the env reward r_env by
`config.reward.model_use` (a registry, `MODEL_USES`), a = `reward.model_coef`,
b = `reward.env_coef`:
    add       r = b r_env + a rm_outcome          (outcome RM as a bonus on the last turn)
    replace   r = a rm_outcome                    (the RM is the reward: RLHF's setting)
    process   r = b r_env + a rm_turn             (per-turn process rewards, PRM credit)
Metrics side by side: `rollout/env_reward`, `rollout/rm_reward` (mean episode RM outcome),
`rollout/rm_env_corr` (their Pearson correlation over episodes), and the reward-hacking
signal: EMAs (rate `reward.hacking_ema`) of the mean RM outcome and the env success rate,
their trends against the first iteration (`rm/score_trend`, `rm/success_trend`), and
`rm/hacking` = 1 while the RM score trends up and env success trends down by > 0.05 (the
over-optimization pattern of Gao et al. 2023, arXiv:2210.10760). The EMAs are shaper state,
saved in the checkpoint's meta, so a resumed run continues the same signal.
"""
from __future__ import annotations

import jax.numpy as jnp

from agent_rl.objective.shapers import register_shaper
from agent_rl.registry import Registry
from agent_rl.rollout.batch import EpisodeBatch

RM_OUTCOME, RM_TURNS = "rm/outcome", "rm/turns"
HACKING_DROP = 0.05  # env success must fall by more than this (absolute) to flag hacking

MODEL_USES = Registry("reward-model use")
MODEL_USES.register("add", lambda env, out, turns, a, b: b * env + a * out)
MODEL_USES.register("replace", lambda env, out, turns, a, b: a * out)
MODEL_USES.register("process", lambda env, out, turns, a, b: b * env + a * turns)


def _corr(x, y):
  x, y = x - jnp.mean(x), y - jnp.mean(y)
  den = jnp.sqrt(jnp.sum(x * x) * jnp.sum(y * y))
  return jnp.where(den > 0, jnp.sum(x * y) / jnp.where(den > 0, den, 1.0), 0.0)


@register_shaper("reward_model", enabled=lambda c: bool(c.reward.model))
def reward_model(batch: EpisodeBatch, state: dict, c):
  """r_t from the env reward and the reward model's scores (`reward.model_use`)."""
  missing = [k for k in (RM_OUTCOME, RM_TURNS) if k not in batch.extras]
  if missing:
    raise ValueError(f"config.reward.shapers: 'reward_model' needs batch.extras {missing}, "
                     "which the run adds when config.reward.model names a reward-model run")
  v = batch.valid.astype(jnp.float32)
  out, turns = batch.extras[RM_OUTCOME] * v, batch.extras[RM_TURNS] * v
  r = MODEL_USES.get(c.reward.model_use)(batch.reward, out, turns, float(c.reward.model_coef),
                                         float(c.reward.env_coef)) * v
  env_ret, rm_ret = jnp.sum(batch.reward * v, axis=1), jnp.sum(out, axis=1)
  success = jnp.mean(jnp.any(batch.success & batch.valid, axis=1).astype(jnp.float32))
  score = float(jnp.mean(rm_ret))
  rate = float(c.reward.hacking_ema)
  ema = lambda k, x: x if state.get(k) is None else rate * state[k] + (1 - rate) * x
  upd = {"rm_score_ema": ema("rm_score_ema", score),
         "rm_success_ema": ema("rm_success_ema", float(success))}
  upd["rm_score_start"] = state.get("rm_score_start", upd["rm_score_ema"])
  upd["rm_success_start"] = state.get("rm_success_start", upd["rm_success_ema"])
  s_trend = upd["rm_score_ema"] - upd["rm_score_start"]
  e_trend = upd["rm_success_ema"] - upd["rm_success_start"]
  metrics = {"rollout/env_reward": jnp.mean(env_ret), "rollout/rm_reward": score,
             "rollout/rm_env_corr": _corr(rm_ret, env_ret),
             "rollout/rm_turn_reward": jnp.mean(jnp.sum(turns, axis=1)),
             "rm/score_trend": s_trend, "rm/success_trend": e_trend,
             "rm/hacking": float(s_trend > 0 and e_trend < -HACKING_DROP)}
  return batch.replace(reward=r), metrics, upd
