"""RAGEN StarPO on FrozenLake (Wang et al., 2025, arXiv:2504.20073), slippery 4x4 maps.

  python -m agent_rl.train --config=configs/ragen_frozenlake.py:tiny --workdir=/tmp/fl
  variants: `ppo` (critic + GAE), `tsr` (TSR best-of-4 trajectory search rollouts,
  arXiv:2602.11767, ALGORITHMS.md §4.10; design proposal), `full`.

Expected: tiny — greedy held-out success rises above the SFT warm start within 30
iterations (slippery maps cap success well below 1: 0.313 for the optimal policy at the tiny
16-move limit). Measured (`python launch/reproduce.py --paper=ragen_frozenlake --scale=tiny
--seeds=3`, 2026-12-03, benchmarks/results/reproduce/ragen_frozenlake.md): after the 100 SFT
steps every seed of both arms is at 0.000 (the slippery solver's short demos, below), so RL
carries all of it; StarPO ends at 0.052 (0.078, 0.078, 0.000), PPO at 0.000 on every seed:
StarPO - PPO +0.052 [-0.060, +0.164] on success, +0.036 [-0.008, +0.081] on avg@4 (p 0.07),
far under the 0.313 ceiling; the paper states no StarPO-vs-PPO direction. ~10-16 min a run
on the shared 2-core box. (The first row ran with 5 one-action turns, where no episode can
succeed; see get_config.) full — RAGEN reports ~0.2 success for 0.5B StarPO on slippery
FrozenLake; not reproduced here.
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
  # A 4x4 map needs >= 6 moves (6.0 on average over sampled maps): the defaults' 5 turns of
  # one action (both scales) made success impossible (measured 2026-12-03: 0.000 on every arm,
  # seed and eval, after SFT too, whose plan replays never reached G). 8 turns of up to 2
  # actions within 16 moves [U]: the optimal policy's success at 16 moves with gymnasium's
  # slip (1/3 intended) is 0.313 over 64 sampled maps (0.050 at 8 moves). Also a limit of the
  # SFT warm start here: the slippery solver's plans (the optimal policy's most likely path, cut
  # at its first repeated state) stop after 1-5 moves on 32 of 32 sampled maps, short of G, so
  # the demos teach the format more than the way (tests/train/test_horizon.py).
  c.env.kwargs.max_steps, c.env.kwargs.max_actions = 16, 2
  c.rollout.max_turns = 8
  if c.scale == "tiny":
    c.rollout.max_action_tokens = 12
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
