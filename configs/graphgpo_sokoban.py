"""GraphGPO vs GiGPO vs GRPO on Sokoban, from a short SFT policy run (Cheng, He, Feng et al.
2026, "Beyond Trajectory-Level Attribution: Graph-Based Credit Assignment for Agentic
Reinforcement Learning", arXiv:2605.26684, langfengQ/verl-agent `recipe/GraphGPO`;
ALGORITHMS.md §4.5).

GraphGPO merges a group's trajectories into one state-transition graph, adds a SUCCESS sink
behind every successful terminal transition, computes each state's shortest-path distance
d(s) to it, and credits a transition s -> s' with R = 10 * gamma^d(s') (gamma 0.1), normalized
within same-source-state groups (mean_std_norm), added to GiGPO's episode term:
A = A^E + A^S. Kernel: `agent_rl/credit/graphgpo.py` (Bellman-Ford on device, tested against the
plain-Python loops of tests/credit/ref_turns.py); unreachable states get the group's largest
finite distance + 1, as the "Relax" reproduction does (the official core file was not
available).

  # the policy run every graph-credit row starts from (once; reproduce.py builds it first
  # where it is missing: the row's priors), then the row
  python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=runs/sokoban_sft40 \\
      --config.train.iterations=0 --config.sft.steps=40
  python launch/reproduce.py --paper=graphgpo_sokoban --scale=tiny --seeds=3
  python -m agent_rl.train --config=configs/graphgpo_sokoban.py:tiny --workdir=/tmp/ggpo \\
      --config.model.init_from=runs/sokoban_sft40 \\
      --config.tokenizer.path=runs/sokoban_sft40/tokenizer.model
  variants: gigpo | grpo (the baselines); full (Qwen2.5-1.5B-shaped, --config.model.init_from=DIR).

Regime: prm_sokoban's (see configs/rewardflow_sokoban.py): the 40-step SFT policy, 30 RL
iterations of 16 tasks x 8, clip-higher PPO loss; the arms differ only in `config.credit`.

Paper numbers (arXiv abstract and summary, verified as to direction only): GraphGPO reaches
"state-of-the-art performance" over GRPO and GiGPO on ALFWorld, WebShop and Sokoban with
"significant success rate gains"; its motivation measures that 22.0% of the steps of failed
ALFWorld trajectories make progress and 65.3% of the steps of successful ones do not. No
per-arm numbers are held here: the row states the direction (GraphGPO > GiGPO > GRPO).
Measured (tiny, 3 seeds, 2026-12-03, `launch/reproduce.py --paper=graphgpo_sokoban
--seeds=3`, benchmarks/results/reproduce/graphgpo_sokoban.md; the GiGPO and GRPO arms are
rewardflow_sokoban's and prm_sokoban's runs, reused): no difference at this scale. Held-out
greedy success GraphGPO 0.490 (0.500, 0.484, 0.484) vs 0.484 for both baselines, +0.005
[-0.017, +0.028]; avg@4 0.475 vs 0.480 / 0.482, -0.005 / -0.007 (n.s.): every arm ends at the
40-step policy run's level plus RL's ~+0.04 (prm_sokoban's docstring).
"""
from agent_rl.train.world_defaults import GRAPH_ARMS, graph_credit_comparison, graph_credit_config

VARIANTS = GRAPH_ARMS  # gigpo | grpo: the baselines
COMPARISON = graph_credit_comparison(
    "GraphGPO", "GraphGPO (arXiv:2605.26684, abstract): state of the art over GRPO/GiGPO on "
    "ALFWorld, WebShop, Sokoban (direction only)",
    paper_verified=True)


def get_config(arg: str | None = None):
  return graph_credit_config(arg, "graphgpo")
