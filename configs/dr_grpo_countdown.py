"""Dr.GRPO and DAPO variants on Countdown (RAGEN / TinyZero task).

Dr.GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training", arXiv:2503.20783): no std
normalisation of group advantages, seq-mean-token-sum-norm aggregation, no KL
(ALGORITHMS.md §1.2). DAPO (Yu et al., 2025, arXiv:2503.14476): clip-higher (0.2/0.28),
token-mean aggregation, dynamic sampling of zero-spread groups (§1.12).

  python -m agent_rl.train --config=configs/dr_grpo_countdown.py:tiny --workdir=/tmp/drgrpo
  python -m agent_rl.train --config=configs/dr_grpo_countdown.py:tiny,dapo --workdir=/tmp/dapo
  python -m agent_rl.train --config=configs/dr_grpo_countdown.py:tiny,grpo --workdir=/tmp/grpo

Expected: tiny — single-turn Countdown with 3 numbers; reward rises from the format score
(0.1) as the SFT-initialised policy finds correct expressions. full — the papers report
Qwen2.5-Math-scale results on math benchmarks; not reproduced here.
Regime (issue 22 §2): the 100 SFT steps leave held-out success at 0.078 (0.00-0.16 by seed):
the tiny model copies the expression format but rarely the arithmetic, so RL carries what
success there is.
Measured (tiny, 3 seeds, 2026-12-03, `python launch/reproduce.py --paper=dr_grpo_countdown
--seeds=3`, benchmarks/results/reproduce/dr_grpo_countdown.md; ~3-4 min a run, two at once):
held-out success Dr.GRPO 0.141 (0.016, 0.188, 0.219), GRPO 0.094, DAPO 0.120: Dr.GRPO - GRPO
+0.047 [-0.217, +0.311], - DAPO +0.021 [-0.221, +0.263] (n.s.; the seeds spread more than the
arms). Dr.GRPO's claim, GRPO's accuracy with fewer tokens, cannot show here: every arm writes
~14 of its 16 allowed tokens (1,799 vs 1,808 generated tokens an iteration, -9 [-197, +180]).
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config

VARIANTS = dict(dapo=False, grpo=False)
COMPARISON = Comparison(  # both papers report math benchmarks, not Countdown: directions only
    arms={"Dr.GRPO": "", "GRPO": "grpo", "DAPO": "dapo"}, method="Dr.GRPO",
    baselines=("GRPO", "DAPO"), metrics=("eval/success", "eval/reward", "rollout/gen_tokens"),
    # Dr.GRPO claims GRPO's accuracy with fewer generated tokens (its length bias removed),
    # not an accuracy gain; neither paper compares Dr.GRPO with DAPO.
    claims={"GRPO": {"eval/success": 0, "eval/reward": 0, "rollout/gen_tokens": -1}, "DAPO": 0},
    paper_source="Dr.GRPO (arXiv:2503.20783): unbiased, as accurate as GRPO with fewer tokens; "
                 "DAPO (arXiv:2503.14476): AIME 50 vs naive GRPO 30 (Qwen2.5-32B) [recalled]",
    paper_verified=False, setting="Countdown, 3 numbers")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "countdown"
  c.env.kwargs.min_numbers = 3
  c.env.kwargs.max_numbers = 3
  c.env.kwargs.max_target = 100
  c.rollout.max_turns = 1
  c.rollout.max_action_tokens = 16 if c.scale == "tiny" else 256
  if "grpo" in args:  # the baseline both papers start from: std-normalized, token-mean
    c.credit.name = "grpo"
    c.loss.name = "vanilla"
    c.loss.agg_mode = "token-mean"
  elif "dapo" in args:
    c.credit.name = "grpo"
    c.loss.name = "vanilla"
    c.loss.agg_mode = "token-mean"
    c.loss.kwargs.clip_ratio_low = 0.2
    c.loss.kwargs.clip_ratio_high = 0.28
    c.rollout.strategy = "dapo"
    c.rollout.strategy_kwargs.max_num_gen_batches = 3
  else:
    c.credit.name = "dr_grpo"
    c.loss.name = "vanilla"
    c.loss.agg_mode = "seq-mean-token-sum-norm"
  return c
