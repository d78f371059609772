"""TSR trajectory-search rollouts on MiniShop vs plain GRPO rollouts (arXiv 2602.11767
[abstract]; ALGORITHMS.md §4.10; `rollout/search.py`, a design proposal: no code was found).

Each turn every rollout samples n candidate actions, steps clones of its env state, and keeps
the best (best_of_n) by the turn's env reward plus a heuristic of the new state; the optimizer
is unchanged (GRPO with world_defaults.minishop's clip-higher loss, 0.2 / 0.28, which
all three MiniShop rows share, so their GRPO arm is one run set). The heuristic is set from the config: `env_progress` is MiniShop's
`progress(state)`, the WebShop match score of the item page and options selected so far (what
buying now would score), so search steers towards matching items before Buy Now.

  python -m agent_rl.train --config=configs/tsr_minishop.py:tiny --workdir=/tmp/tsr
  python -m agent_rl.train --config=configs/tsr_minishop.py:tiny,plain --workdir=/tmp/plain
  python -m agent_rl.train --config=configs/tsr_minishop.py:tiny,beam --workdir=/tmp/beam
  variants: plain (no search, the baseline), beam (beam search over the G members),
  no_heuristic (env reward only), full.
  --config.rollout.strategy_kwargs.heuristic=env_progress|"" and .num_candidates=N override.

Cost: n x generation per turn. Expected direction: TSR rollouts have higher rollout success
than plain ones at the same policy, and training on them improves held-out (plain, greedy)
success over GRPO. tiny: from the same SFT policy run as configs/gigpo_minishop.py (its
docstring: held-out success 0.00, eval reward +0.02). Measured 2026-12-05, 3 seeds (~40 min a
run beside another; a TSR iteration ~100-110 s, its rollout 33-37 s vs plain's 29 s, since the
window is prefilled once per episode and only decoding runs on the 4 candidates): the first
claim holds, TSR's training rollouts score far above plain ones at the same policy (rollout
reward +0.06 -> +0.11 over the first / last 5 iterations, success 0.02-0.03, vs GRPO's -0.23
-> -0.17 and ~0.00), but training on them does not carry over to the plain greedy policy:
held-out success 0.000 vs GRPO's 0.010, -0.010 [-0.055, +0.034]; reward 0.104 vs 0.135, -0.031
[-0.191, +0.130] (n.s.). Not the paper's direction at this size: the searched actions are
picked by the env's progress heuristic, not learned, and 20 iterations do not distil them.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import (MINISHOP_SETTING, MINISHOP_SFT_OVERRIDES,
                                          MINISHOP_SFT_RUN, full_policy, minishop)

VARIANTS = dict(plain=False, beam=False, no_heuristic=False)
COMPARISON = Comparison(  # TSR's claim: training on searched rollouts beats plain rollouts
    arms={"TSR": "", "GRPO": "plain"}, method="TSR", baselines=("GRPO",),
    metrics=("eval/success", "eval/avg@4", "eval/reward"),
    paper_source="TSR (arXiv:2602.11767, abstract only): no numbers recalled",
    paper_verified=False, overrides=MINISHOP_SFT_OVERRIDES,
    priors=(MINISHOP_SFT_RUN,), setting=MINISHOP_SETTING)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  minishop(c)
  c.credit.name = "grpo"
  if "plain" not in args:
    c.rollout.strategy = "tsr"
    c.rollout.strategy_kwargs.mode = "beam" if "beam" in args else "best_of_n"
    c.rollout.strategy_kwargs.num_candidates = 4
    c.rollout.strategy_kwargs.heuristic = "" if "no_heuristic" in args else "env_progress"
  if c.scale == "full":
    full_policy(c)
  return c
