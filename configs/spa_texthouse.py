"""SPA on TextHouse: world-model SFT, then PPO (Chen et al., 2025, "Internalizing World Models
via Self-Play Finetuning for Agentic RL", shiqichen17/SPA; ALGORITHMS.md §4.11), on the
ALFWorld-like pure-JAX world instead of Sokoban.

Same recipe as configs/spa_sokoban.py: SFT on turns that state the true current state and
predict the true next one before acting,
`<think><observation>s_t</observation><prediction>s_{t+1}</prediction></think><answer>a_t</answer>`,
the loss on every assistant token; then PPO (critic on the policy trunk, GAE gamma = lam = 1,
clip 0.2/0.28, entropy 0.001, SPA's config/base.yaml). The state text
(`agent_rl.data.world_model.texthouse_state`) is ALFWorld-structured: where the agent stands,
what it holds, the open receptacles, and the place and properties of every goal-kind object
("at fridge 1; holding apple 1; open fridge 1; apple 1 held cool"). SPA itself reports
Sokoban, FrozenLake and Sudoku; TextHouse is our extension of its recipe to the household
world (the paper's claim: a world model learned in SFT helps the RL that follows).

  python -m agent_rl.train --config=configs/spa_texthouse.py:tiny --workdir=/tmp/spa_th
  python -m agent_rl.train --config=configs/spa_texthouse.py:tiny,no_wm --workdir=/tmp/spa_th0

Variants: `tiny` (default), `full` (Qwen2.5-1.5B-sized policy), `no_wm` (the baseline: the
same SFT -> PPO with answer-only turns), `long` (TextLab, 4 chained stages).

Turn length: a state is 10-40 tokens with the tokenizer trained on env + SPA text, so a
world-model turn (two states and the action) gets max_action_tokens = 128 at tiny.

Expected direction: SPA > no-WM (SPA's Sokoban/FrozenLake claim). On Sokoban at tiny scale
world-model SFT did not beat answer-only SFT (configs/spa_sokoban.py), so do not expect it here
without measuring. Measured (benchmarks/results/reproduce/spa_texthouse.md, 3 seeds,
2026-12-05): held-out success 0.000 in both arms after PPO, avg@4 SPA - no-WM -0.004 [-0.014,
+0.006] (n.s.): a tie at the floor, not SPA's direction. After SFT: SPA 0.000 success in every
seed (reward -0.29 / -0.30 / -0.20), no-WM 0.031 / 0.047 / 0.000 (reward 0.22 / 0.43 / -0.08);
after PPO, reward SPA -0.62 / -0.77 / -0.66, no-WM -0.17 / -0.07 / -0.08: PPO lowers the SFT
policy's reward in 5 of 6 runs (the shared-trunk critic starts from scratch; critic warm-up,
`--config.train.critic_warmup=N`, is not on in this row; the sixth run is unchanged). One
diagnostic run, not a row (2026-12-05, `:tiny,no_wm --config.seed=1
--config.train.critic_warmup=5`, the same SFT bit for bit): held-out success 0.047 after SFT ->
0.062 at iteration 10 -> 0.016 at 20 (reward 0.43 -> 0.59 -> 0.11), against 0.047 -> 0.031 ->
0.000 (0.43 -> 0.27 -> -0.07) without warm-up: the drop is smaller and later, not gone (one
seed). A likely
reason SPA's SFT is the weaker start, not measured: its turns (two states and the action,
~25-90 tokens) spend the 2-layer tiny policy's 300 SFT steps mostly on state text.
Memory: a run's resident size peaks at 12-15 GB in its evaluations (64 tasks x 4 samples of
windowed world-model turns; 3-8 GB otherwise), so two runs evaluating at once exceed 24 GB: on
such a machine run this row with --jobs=1 and nothing else beside it. A run is 28-40 min alone
(SPA's PPO iteration ~90-100 s, no-WM's ~55-60 s; 300 SFT steps 8-13 min), ~55-60 min beside
another.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import full_policy, spa_ppo, texthouse

VARIANTS = dict(no_wm=False, long=False)
COMPARISON = Comparison(  # SPA's claim carried to the household world (no paper numbers)
    arms={"SPA": "", "no-WM": "no_wm"}, method="SPA", baselines=("no-WM",),
    metrics=("eval/success", "eval/avg@4"),
    paper_source="SPA (Chen et al. 2025): world-model SFT -> PPO beats SFT -> PPO on Sokoban / "
                 "FrozenLake; TextHouse is not in the paper",
    paper_verified=False, setting="TextHouse (ALFWorld-like)")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  texthouse(c, long="long" in args, tiny_window=0)
  spa_ppo(c, args)
  if c.sft.world_model:
    c.rollout.max_action_tokens = 128 if c.scale == "tiny" else 384
  if c.scale == "full":
    full_policy(c)
  return c
