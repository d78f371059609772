"""Dr. MAS agent-wise advantage normalization vs pooled GRPO: a solver and a verifier on CalcMath.

Dr. MAS (Feng, Zheng, He, Zhang & An 2026, "Dr. MAS: Stable Reinforcement Learning for
Multi-Agent LLM Systems", arXiv:2602.08847, langfengQ/DrMAS; ALGORITHMS.md §4.1): in a
multi-agent system trained with GRPO, one global normalization baseline misfits agents whose
rewards are distributed differently, which inflates gradient norms (spikes); normalizing each
agent's advantages by its own (group, agent) reward statistics calibrates them.

  python -m agent_rl.train --config=configs/drmas_calcmath.py:tiny --workdir=/tmp/drmas
  python -m agent_rl.train --config=configs/drmas_calcmath.py:tiny,grpo --workdir=/tmp/pooled
  variants: grpo (global normalization: every agent's rows pooled in one group statistic,
  `drmas(group_by_agent=False, pooled_rows=True)`) | lora (one LoRA adapter per agent on a
  shared base) | shared (one network, role prompts) | verifier_scale=<float> (default 0.2) | full.

The world (envs/calc_math/roles.py, `calc_math_verify`): the solver calls the calculator and
proposes an answer; the verifier accepts or rejects it (it may use the calculator too); a
rejection gives the solver another round. Rewards per role, deliberately on different scales
(the setting Dr. MAS studies): solver 1.0 x [accepted answer correct] (+ calc_math's format
and invalid terms), verifier 0.2 x [verdict right]. Each agent is scored by its own return
(`agent_return`); `grad/norm/agent{k}` logs each agent's gradient norm (its parameter slice),
the diagnostic of the paper's Figure 1. Default `separate`: one full copy per agent (the
paper's non-sharing setting); windowed history (one turn, hence one agent, per row).

Paper numbers (arXiv abstract, verified): on multi-agent math with Qwen2.5/Qwen3, Dr. MAS over
vanilla GRPO +5.6 points avg@16 and +4.6 pass@16; on multi-turn search +15.2 avg@16 and +13.1
pass@16; gradient spikes largely gone. Expected direction here: Dr. MAS >= pooled GRPO on
eval/avg@4 (k = 4 at tiny scale, not 16) and smaller per-agent gradient-norm peaks.

tiny (2-core CPU): 1-2 calculator steps on 1-2 digit numbers, SFT on the expert plan (calls,
answer, accept) then RL. Whether the direction shows at this size is measured over 3 seeds by
`launch/reproduce.py configs/drmas_calcmath.py`; the SFT warm start carries most of the
success, and a verifier that learned "always accept" from the demos leaves little variance.
Measured (tiny, seeds 0-2 per arm, benchmarks/results/reproduce/drmas_calcmath.md): held-out
avg@4 Dr. MAS 0.078 (0.086, 0.078, 0.070) vs pooled GRPO 0.042 (0.047, 0.039, 0.039), diff
+0.036, Welch 95% [+0.020, +0.052], p 0.005: the paper's direction; greedy success 0.104 vs
0.062, +0.042 [-0.035, +0.119] (n.s.). Both arms start RL at the SFT level (avg@4 0.031,
success 0.094); RL's own gain on avg@4 is +0.047 (Dr. MAS) vs +0.010 (GRPO). ~35 min a run on
the 2-core VM with two runs at once.
"""
import agent_rl.envs.calc_math  # noqa: F401  (registers "calc_math_verify")
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import agents_mode, drmas

VARIANTS = dict(grpo=False, lora=False, shared=False, verifier_scale=0.2)
COMPARISON = Comparison(
    arms={"Dr. MAS": "", "GRPO": "grpo"}, method="Dr. MAS", baselines=("GRPO",),
    metrics=("eval/avg@4", "eval/success"),
    paper_source="Dr. MAS (arXiv:2602.08847) abstract: +5.6 avg@16 / +4.6 pass@16 (math), "
                 "+15.2 avg@16 / +13.1 pass@16 (search) over vanilla GRPO (points)",
    paper_verified=True, setting="CalcMath solver/verifier (verifier reward x0.2)")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "calc_math_verify"
  k = c.env.kwargs
  k.verifier_scale = float(args["verifier_scale"])
  c.rollout.history = "windowed"
  agents_mode(c, args)
  drmas(c, args)
  c.loss.kwargs.clip_ratio_low = c.loss.kwargs.clip_ratio_high = 0.2
  if c.scale == "tiny":
    k.min_steps, k.max_steps, k.min_digits, k.max_digits, k.max_factor = 1, 2, 1, 2, 5
    k.max_turns, k.max_calls, k.max_rounds = 6, 3, 2
    c.rollout.max_turns, c.rollout.max_action_tokens = 6, 24
    c.rollout.window_turns, c.rollout.window_tokens = 1, 0
    c.rollout.num_tasks, c.rollout.group_size = 8, 4
    # 8 episodes x 6 turn samples a minibatch: `separate` runs both agents' forwards on every
    # row, so 32 episodes a minibatch peaked at 17 GiB here.
    c.train.iterations, c.train.minibatch_episodes = 15, 8
    c.train.eval_every, c.train.ckpt_every = 5, 5
    c.sft.steps, c.sft.num_demos = 80, 256
    c.eval.num_tasks, c.eval.k = 32, 4
  else:
    k.min_steps, k.max_steps, k.min_digits, k.max_digits = 2, 4, 2, 5
    k.max_turns, k.max_calls = 12, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 12, 256
    c.rollout.window_turns, c.rollout.window_tokens = 4, 4096
    c.sft.steps = 0
    c.eval.k = 16
  return c
