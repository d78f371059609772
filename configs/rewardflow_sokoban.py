"""RewardFlow vs GiGPO vs GRPO on Sokoban, from a short SFT policy run (Feng, Han, Zhou et al.
2026, "RewardFlow: Topology-Aware Reward Propagation on State Graphs for Agentic RL with Large
Language Models", arXiv:2603.18859, tmlr-group/RewardFlow; ALGORITHMS.md §4.4).

RewardFlow merges a group's trajectories into a state graph (nodes: identical states,
`info["state_hash"]`; edges: observed transitions), propagates the rewards received on
arriving at a state backwards, V(s) = max(r(s), gamma * max_succ V(s')) (gamma 0.9, its ALFWorld
script), and rewards each step by the potential difference V(s') - V(s), normalized GiGPO-style
within anchor-state groups: A = A^E + w * A^S (w = 1, mean_norm). Kernel:
`agent_rl/credit/rewardflow.py` (tested against the plain-Python loops of
tests/credit/ref_turns.py).

  # the policy run every graph-credit row starts from (once; reproduce.py builds it first
  # where it is missing: the row's priors), then the row
  python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=runs/sokoban_sft40 \\
      --config.train.iterations=0 --config.sft.steps=40
  python launch/reproduce.py --paper=rewardflow_sokoban --scale=tiny --seeds=3
  # one arm by hand
  python -m agent_rl.train --config=configs/rewardflow_sokoban.py:tiny --workdir=/tmp/rf \\
      --config.model.init_from=runs/sokoban_sft40 \\
      --config.tokenizer.path=runs/sokoban_sft40/tokenizer.model
  variants: gigpo | grpo (the baselines); full (Qwen2.5-1.5B-shaped, --config.model.init_from=DIR).

Regime (issue 22 §2: RL, not the warm start, must carry the learning): prm_sokoban's: the
policy after 40 SFT steps (held-out greedy success ~0.44 against a ~0.9 ceiling), then 30
RL iterations of 16 tasks x 8 with the clip-higher PPO loss; no SFT phase in this config.
The three arms differ only in `config.credit`. Sokoban revisits states within a group often
(a 6x6 room with one box), so the state graph has the merged nodes the method needs.

Paper numbers (arXiv abstract, verified): "+6.2% average success rate on text-based tasks"
(ALFWorld, WebShop) and +29.7% on visual Sokoban over the strongest baseline (GiGPO among
them), across three model scales; no per-arm Sokoban-text numbers are held here, so the row
states the direction only (RewardFlow > GiGPO > GRPO).
Measured (tiny, 3 seeds, 2026-12-03, `launch/reproduce.py --paper=rewardflow_sokoban
--seeds=3`, benchmarks/results/reproduce/rewardflow_sokoban.md; ~4 min a run on a quiet VM, two
at once; the GRPO arm is prm_sokoban's outcome runs, reused): the direction does NOT show.
Held-out greedy success RewardFlow 0.479 (0.469, 0.484, 0.484) vs GiGPO 0.484 and GRPO 0.484
(every seed), -0.005 [-0.028, +0.017] against each; avg@4 0.477 vs 0.480 / 0.482. All three
arms end where 30 RL iterations take any credit from the 0.4375 policy run (prm_sokoban's
docstring: RL adds ~+0.04 here), so there is little for credit to separate.
"""
from agent_rl.train.world_defaults import GRAPH_ARMS, graph_credit_comparison, graph_credit_config

VARIANTS = GRAPH_ARMS  # gigpo | grpo: the baselines
COMPARISON = graph_credit_comparison(
    "RewardFlow", "RewardFlow (arXiv:2603.18859, abstract): +6.2% average success on text "
    "tasks, +29.7% on visual Sokoban over the strongest baseline",
    paper_verified=True)


def get_config(arg: str | None = None):
  return graph_credit_config(arg, "rewardflow")
