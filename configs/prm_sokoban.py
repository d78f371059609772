"""Outcome-only GRPO vs PRM-shaped credit on Sokoban (the comparison of the reward-models
issue): the same policy, env and GRPO + PPO-clip learner, with or without per-turn process
rewards from a process reward model trained on Sokoban's box-on-target milestones
(Lightman et al. 2023, arXiv:2305.20050; process rewards in RL as Math-Shepherd, Wang et al.
2024, arXiv:2312.08935, and PRIME, Cui et al. 2025).

  # 1. the policy (a short SFT warm start), 2. the PRM from its rollouts, 3. both arms x 3 seeds
  # (1 and 2 are the row's priors: step 3 alone builds them first where they are missing)
  python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=runs/sokoban_sft40 \
      --config.train.iterations=0 --config.sft.steps=40
  python -m agent_rl.reward.train --config=configs/reward_model.py:tiny,process \
      --workdir=runs/prm_sft40 --config.rm.policy_run=runs/sokoban_sft40 \
      --config.model.init_from=runs/sokoban_sft40
  python launch/reproduce.py --paper=prm_sokoban --scale=tiny --seeds=3

Why 40 SFT steps: the main job's 100 steps reach 0.73 held-out success against a 0.90
ceiling, leaving RL +0.05 (issue 22: at that regime credit methods cannot differ). 40 steps
(SFT loss 0.20) start RL at 0.44 greedy success (avg@4 0.44), so RL carries the learning, and
the policy still fails often enough that box-on-target milestones are informative labels
for the PRM.

Variants: `tiny` (default; the RAGEN tiny setup, sft.steps=0 since the policy comes from
`model.init_from`), `prm=DIR` (the PRM run DIR; r_t = r_env,t + 1.0 x PRM score of turn t, `reward.model_use=
process`). Both arms log `rollout/env_reward` (the prm arm also `rollout/rm_turn_reward`,
`rm/hacking`). The credit is GRPO on the summed return, so the PRM changes which episodes of a
group look better, not a per-turn advantage; a per-turn kernel (`credit.name=gigpo`) is the
next comparison.
Measured (tiny, 3 seeds, `launch/reproduce.py --paper=prm_sokoban --seeds=3`,
benchmarks/results/reproduce/prm_sokoban.md): the PRM (held-out per-step AUC 0.95, accuracy
0.90 at a positive rate of 0.17) does NOT help at this scale. Final held-out greedy success
PRM 0.474 (0.484, 0.469, 0.469) vs outcome 0.484 (0.484, 0.484, 0.484), diff -0.010, Welch
95% [-0.033, +0.012]; avg@4 0.471 vs 0.482, -0.010 [-0.027, +0.006]; both arms from 0.4375
(the policy run's own eval after its 40 SFT steps; this config has no SFT phase, hence no
"after SFT" column). RL itself adds only ~+0.04 greedy in 30 iterations for either arm
(sampled training success rises from ~0.5 to 0.6-0.69), so there is little for credit to
separate. The process reward is the PRM's raw score (a logit, mostly negative at a 17%
positive rate) added to every turn, so it also acts as a per-turn cost; a probability
(sigmoid) step reward or a per-turn kernel (`credit.name=gigpo`) are the next comparisons.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import (PRM_SFT40_RUN, SOKOBAN_SFT40_OVERRIDES,
                                          SOKOBAN_SFT40_RUN, sokoban_from_policy_run)

VARIANTS = dict(prm="")  # prm=DIR: the PRM run whose per-turn scores shape the rewards
COMPARISON = Comparison(  # from the policy and PRM runs of the docstring's steps 1-2 (priors)
    arms={"PRM": "prm=runs/prm_sft40", "outcome": ""}, method="PRM", baselines=("outcome",),
    metrics=("eval/success", "eval/avg@4"),
    overrides=SOKOBAN_SFT40_OVERRIDES,
    priors=(SOKOBAN_SFT40_RUN, PRM_SFT40_RUN),
    paper_source="process rewards in RL (Math-Shepherd arXiv:2312.08935, PRIME): PRM shaping > "
                 "outcome-only; not measured on Sokoban by those papers",
    paper_verified=False, setting="Sokoban 6x6, 1 box, from a 40-step SFT policy run")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  sokoban_from_policy_run(c)  # the policy is model.init_from (an SFT run)
  c.credit.name = "grpo"
  if args["prm"]:
    c.reward.model = args["prm"]
    c.reward.shapers = "reward_model,kl_in_reward,overlong"
    c.reward.model_use, c.reward.model_coef, c.reward.env_coef = "process", 1.0, 1.0
  return c
