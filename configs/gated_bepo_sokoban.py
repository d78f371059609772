"""Gated-BEPO vs GiGPO vs GRPO on Sokoban, from a short SFT policy run (arXiv:2608.06861;
ALGORITHMS.md §4.6, tagged [abstract]: no code was found, so the kernel is a design proposal).

Gated-BEPO backs values up over a group's state graph by the mean over observed successors,
V(s) = sum_{s->s'} n(s,s')/n(s) (r(s,s') + gamma V(s')), takes TD residuals along each sampled
episode into GAE-style advantages A^B (gamma 0.95, lambda 0.95), and applies them only at
branching states (>= 2 distinct observed successors), fused with GiGPO's episode advantage
A^E; elsewhere A = A^E. The fusion f is unknown from the abstract: `fusion=sum` here
(`mean`, `replace` are the kernel's alternatives). Kernel: `agent_rl/credit/bepo.py` (tested
against the plain-Python loops of tests/credit/ref_turns.py).

  # the policy run every graph-credit row starts from (once; reproduce.py builds it first
  # where it is missing: the row's priors), then the row
  python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=runs/sokoban_sft40 \\
      --config.train.iterations=0 --config.sft.steps=40
  python launch/reproduce.py --paper=gated_bepo_sokoban --scale=tiny --seeds=3
  python -m agent_rl.train --config=configs/gated_bepo_sokoban.py:tiny --workdir=/tmp/bepo \\
      --config.model.init_from=runs/sokoban_sft40 \\
      --config.tokenizer.path=runs/sokoban_sft40/tokenizer.model
  variants: gigpo | grpo (the baselines); full (Qwen2.5-1.5B-shaped, --config.model.init_from=DIR).

Regime: prm_sokoban's (see configs/rewardflow_sokoban.py); the arms differ only in
`config.credit`.

Paper numbers: none held (the abstract was read for the method in an earlier session and
is not reachable now; its benchmarks are not recorded here), so the row states the design's
expected direction (Gated-BEPO > GiGPO > GRPO) as a claim to test, not a paper's result.
Measured (tiny, 3 seeds, 2026-12-03, `launch/reproduce.py --paper=gated_bepo_sokoban
--seeds=3`, benchmarks/results/reproduce/gated_bepo_sokoban.md; GiGPO and GRPO arms reused):
the expected sign, not significant. Held-out greedy success Gated-BEPO 0.516 (0.547, 0.484,
0.516) vs 0.484 for both baselines, +0.031 [-0.046, +0.109]; avg@4 0.491 vs 0.480 / 0.482,
+0.010 [-0.007, +0.027] / +0.009 [-0.009, +0.028]. The only graph-credit arm above the
baselines' 0.484 in any seed, at a spread 3 seeds cannot separate from noise.
"""
from agent_rl.train.world_defaults import GRAPH_ARMS, graph_credit_comparison, graph_credit_config

VARIANTS = GRAPH_ARMS  # gigpo | grpo: the baselines
COMPARISON = graph_credit_comparison(
    "Gated-BEPO", "Gated-BEPO (arXiv:2608.06861, abstract only; design proposal): no numbers held",
    paper_verified=False)


def get_config(arg: str | None = None):
  return graph_credit_config(arg, "gated_bepo")
