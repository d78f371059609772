"""RAGEN StarPO on Sokoban (Wang et al., 2025, "RAGEN: Understanding Self-Evolution in LLM
Agents via Multi-Turn Reinforcement Learning", arXiv:2504.20073).

Recipe: SFT warm start on solver demonstrations, then multi-turn RL with GRPO-style
group-relative advantages (StarPO) and the PPO clipped loss with clip-higher (0.2/0.28).

  python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=/tmp/sokoban

Variants (`:arg`, comma-separated): `tiny` (the CPU demo; default), `full` (Qwen2.5-0.5B-sized
policy, RAGEN's 6x6 1-box Sokoban with 5 turns x 2 actions), `ppo` (critic + GAE instead of
GRPO), `starpo_s` (keep the top 25% groups by reward std), `kl` (KL-to-reference loss,
coef 0.001), `kl_reward` (KL penalty in the reward, beta 0.001).

Expected results:
  tiny  (2-core CPU, ~4 min): held-out greedy success on 64 tasks 0.00 (random init) ->
        0.75 after 100 SFT steps on 256 solver demos -> 0.78 after 30 RL iterations
        (avg@4 0.70 -> 0.77); measured 2026-11-30, see README. 10% of the tasks need more
        than 5 moves, so 0.90 is the ceiling at 5 turns x 1 action.
  full  (v5e-16 / 8xH100): RAGEN reports ~0.2-0.3 success for 0.5B StarPO on Sokoban;
        not reproduced here (no accelerator in CI).
"""
from agent_rl.train.config import scaled_config

VARIANTS = dict(ppo=False, starpo_s=False, kl=False, kl_reward=False)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "sokoban"
  c.env.kwargs.dim_room = (6, 6)
  c.env.kwargs.num_boxes = 1
  c.env.kwargs.max_steps = 10
  c.credit.name = "grpo"
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = 0.2
  c.loss.kwargs.clip_ratio_high = 0.28
  if c.scale == "full":
    c.env.kwargs.max_actions = 2
  if "ppo" in args:
    c.model.critic = "shared"
    c.credit.name = "gae"
    c.credit.kwargs.gamma = 1.0
    c.credit.kwargs.lam = 1.0
  if "kl" in args:  # KL-to-reference loss (verl use_kl_loss, low_var_kl, coef 0.001)
    c.loss.kl_coef = 0.001
    c.loss.kl_type = "low_var_kl"
  if "kl_reward" in args:  # KL in the reward instead (verl use_kl_in_reward, fixed beta)
    c.loss.kl_in_reward = 0.001
  if "starpo_s" in args:
    c.rollout.strategy = "starpo_s"
    c.rollout.strategy_kwargs.ratio = 0.25
  return c
