"""SkillC on TextHouse: paired skill-injected / skill-free rollouts of the same task, GRPO over
both streams plus a one-sided bonus for skill-free successes (arXiv 2605.27899 [abstract];
ALGORITHMS.md §4.13; `credit/skills.py skillc`, a design proposal: no code was found).

The `skill_pairs` rollout strategy plays the first half of each batch's tasks twice: G
rollouts with the family's skill text in the first observation (task.skill) and G without,
grouped together (2G per task). The `skillc` kernel then gives
  A_i = GRPO(R_i over both streams) + lam * [free_i and success_i] * max(0, SR_skill - SR_free),
so credit flows to skill-free successes on tasks where the skill helped: the policy is pushed
to internalize the skill (the paper's point: skill-free inference after training).

  python -m agent_rl.train --config=configs/skillc_texthouse.py:tiny --workdir=/tmp/skillc
  python -m agent_rl.train --config=configs/skillc_texthouse.py:tiny,grpo --workdir=/tmp/grpo
  variants: grpo (plain rollouts without skills, the baseline), full.
Evaluation is skill-free (the eval tasks have no skill flag), which is what the paper reports.

Paper numbers: none recalled for this repo. Expected direction: SkillC's skill-free success
> GRPO's.

tiny (measured 2026-12-04, 3 seeds; the TextHouse rows' regime, configs/gigpo_texthouse.py:
five one-stage families, 8 tasks x 8 (SkillC: 4 tasks x (8 with skill + 8 without)), 20
iterations from the shared 300-step SFT policy run, held-out success 0.047): SkillC 0.031 +-
0.027 vs GRPO 0.021 +- 0.009 skill-free success, +0.010 [-0.050, +0.070] (n.s.); avg@4 +0.004
[-0.017, +0.025]. No difference at this scale: the skill text does not help the tiny policy
(final skill-injected vs skill-free training success 0.031 / 0.031, 0.00 / 0.00, 0.00 / 0.031
per seed), so SkillC's bonus max(0, SR_skill - SR_free) is ~0 and it is GRPO over twice the
rollouts of half the tasks.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import (TEXTHOUSE_SFT_OVERRIDES, TEXTHOUSE_SFT_RUN, full_policy,
                                          texthouse)

VARIANTS = dict(grpo=False)
COMPARISON = Comparison(  # the claim only: no numbers recalled (docstring)
    arms={"SkillC": "", "GRPO": "grpo"}, method="SkillC", baselines=("GRPO",),
    metrics=("eval/success", "eval/avg@4"),
    paper_source="SkillC (arXiv 2605.27899, abstract): skill-free success > GRPO's; no numbers",
    paper_verified=False, overrides=TEXTHOUSE_SFT_OVERRIDES, priors=(TEXTHOUSE_SFT_RUN,),
    setting="TextHouse (ALFWorld-like), skill-free eval, from a 300-step SFT policy run")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  texthouse(c)
  c.loss.name = "vanilla"  # verl-agent's clip-higher, as every TextHouse row: the GRPO arm is
  c.loss.kwargs.clip_ratio_low, c.loss.kwargs.clip_ratio_high = 0.2, 0.28  # one run for all
  if "grpo" in args:
    c.credit.name = "grpo"
  else:
    c.rollout.strategy = "skill_pairs"
    c.rollout.strategy_kwargs.field = "skill"
    c.credit.name = "skillc"
    c.credit.kwargs.lam = 1.0
  if c.scale == "full":
    full_policy(c)
  return c
