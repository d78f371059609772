"""SPA on Sokoban: world-model SFT, then PPO (Chen et al., 2025, "Internalizing World Models via
Self-Play Finetuning for Agentic RL", shiqichen17/SPA; ALGORITHMS.md §4.11).

Recipe: SFT on turns that state the true current state and predict the true next state
before acting, `<think><observation>s_t</observation><prediction>s_{t+1}</prediction></think>
<answer>a_t</answer>`, with structured states ("player (2,4) boxes (2,3) targets (1,1)",
`agent_rl.data.world_model`) and the loss on every assistant token (the full-target variant);
then RAGEN PPO from the SFT checkpoint: critic (value head on the policy trunk) + GAE with
gamma = lam = 1, clipped loss 0.2/0.28, entropy 0.001 (SPA's config/base.yaml). Here the SFT
trajectories are solver plans, not SPA's self-play rollouts; the states are the true ones.

  python -m agent_rl.train --config=configs/spa_sokoban.py:tiny --workdir=/tmp/spa
  python -m agent_rl.train --config=configs/spa_sokoban.py:tiny,no_wm --workdir=/tmp/spa_base

Variants (`:arg`, comma-separated): `tiny` (the CPU demo; default), `full` (Qwen2.5-1.5B-sized
policy, 5 turns x up to 2 actions, StarPO-S filter 0.25 as SPA), `no_wm` (the baseline: the
same SFT -> PPO with answer-only turns).

Turn length: with the tokenizer trained on the env + SPA text, a 6x6 one-box SPA turn is
46 tokens including <|im_end|> (every coordinate is 5 tokens: split digits), so
max_action_tokens = 48 (`encode_plans` raises naming the turn if it does not fit).

Expected results:
  tiny  (2-core CPU): held-out greedy success on 64 tasks 0.00 (random init) -> 0.45 after
        100 SFT steps on 256 demos (avg@4 0.46; ragen_sokoban tiny: 0.72) -> 0.47 after 10 PPO
        iterations (avg@4 0.30); measured 2026-11-30 on a heavily shared machine (SFT ~50 min,
        RL ~100 s/iteration there). Sampled turns that run past max_action_tokens (7 -> 92 of
        ~500 turns per iteration) are invalid, and RL success fell from 0.65 to 0.20-0.40:
        at this scale the world-model turns do not beat answer-only SFT -> PPO.
        3 seeds (2026-12-04, benchmarks/results/reproduce/spa_sokoban.md; 13 min a SPA run,
        5-7 min a no-WM run, two side by side): held-out success SPA 0.312 +- 0.272 vs no-WM
        0.547 +- 0.083, -0.234 [-0.847, +0.378] (avg@4 -0.280 [-0.599, +0.039]): **not the
        paper's direction** (n.s.). RL lowered both arms from their SFT level (SPA 0.505 ->
        0.312, one seed to 0.000; no-WM 0.703 -> 0.547): in this regime the warm start, not RL,
        carries the success (issue 22 asks the opposite; not re-tuned).
  full  (v5e-16 / 8xH100): SPA reports a large Sokoban gain of world-model SFT -> PPO over
        RAGEN PPO for Qwen2.5-1.5B-Instruct (see the paper's main table); not reproduced
        here (no accelerator in CI).
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import spa_ppo

VARIANTS = dict(no_wm=False)
COMPARISON = Comparison(  # SPA's claim: world-model SFT -> PPO beats SFT -> PPO
    arms={"SPA": "", "no-WM": "no_wm"}, method="SPA", baselines=("no-WM",),
    metrics=("eval/success", "eval/avg@4"),
    paper_source="SPA (Chen et al. 2025, shiqichen17/SPA): large Sokoban gain over RAGEN PPO, "
                 "Qwen2.5-1.5B-Instruct (numbers not recalled here)",
    paper_verified=False, setting="Sokoban 6x6, 1 box")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "sokoban"
  c.env.kwargs.dim_room = (6, 6)
  c.env.kwargs.num_boxes = 1
  c.env.kwargs.max_steps = 10
  spa_ppo(c, args)
  if c.sft.world_model:
    c.rollout.max_action_tokens = 48 if c.scale == "tiny" else 128
  if c.scale == "full":
    c.model.preset = "qwen2.5-1.5b"
    c.env.kwargs.max_actions = 2
    c.rollout.num_tasks, c.rollout.group_size = 32, 8
    c.rollout.strategy = "starpo_s"
    c.rollout.strategy_kwargs.ratio = 0.25
    c.sft.steps = 200
  return c
