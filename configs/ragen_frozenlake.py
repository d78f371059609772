"""RAGEN StarPO on FrozenLake (Wang et al., 2025, arXiv:2504.20073), slippery 4x4 maps.

  python -m agent_rl.train --config=configs/ragen_frozenlake.py:tiny --workdir=/tmp/fl
  variants: `ppo` (critic + GAE), `tsr` (TSR best-of-4 trajectory search rollouts,
  arXiv:2602.11767, ALGORITHMS.md §4.10; design proposal), `full`.

Expected: tiny — greedy held-out success rises above the SFT warm start within 30
iterations (slippery maps cap success well below 1). full — RAGEN reports ~0.2 success for
0.5B StarPO on slippery FrozenLake; not reproduced here.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config

VARIANTS = dict(ppo=False, tsr=False)
COMPARISON = Comparison(  # RAGEN on FrozenLake (docstring: ~0.2 for 0.5B StarPO, unverified)
    arms={"StarPO": "", "PPO": "ppo"}, method="StarPO", baselines=("PPO",),
    metrics=("eval/success", "eval/avg@4"), claims={"PPO": 0},
    paper={"StarPO": {"eval/success": 0.2}},
    paper_source="RAGEN (arXiv:2504.20073): ~0.2 success for 0.5B StarPO, slippery FrozenLake; "
                 "no direction recalled for StarPO (GRPO) vs PPO",
    paper_verified=False, setting="FrozenLake 4x4 slippery")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "frozenlake"
  c.env.kwargs.size = 4
  c.env.kwargs.is_slippery = True
  c.env.kwargs.max_steps = 8
  c.credit.name = "grpo"
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = 0.2
  c.loss.kwargs.clip_ratio_high = 0.28
  if "ppo" in args:
    c.model.critic = "shared"
    c.credit.name = "gae"
  if "tsr" in args:
    c.rollout.strategy = "tsr"
    c.rollout.strategy_kwargs.mode = "best_of_n"
    c.rollout.strategy_kwargs.num_candidates = 4
  return c
