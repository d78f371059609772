"""PiCA's process credit vs GRPO on KB-SearchQA (Liu et al. 2026, "PiCA: Pivot-Based Credit
Assignment for Search Agentic RL", arXiv:2605.09287; code novdream/PiCA; ALGORITHMS.md §4.7).

  python -m agent_rl.train --config=configs/pica_kbqa.py:tiny --workdir=/tmp/pica
  python -m agent_rl.train --config=configs/pica_kbqa.py:tiny,grpo --workdir=/tmp/pica_grpo
  variants: grpo (the Search-R1 GRPO baseline, configs/search_r1_kbqa.py); full.

`credit.name="pica"` is the reference's GRPO variant: per-group normalized step rewards
(1 + scale)(1 - p_i - b - pen_i) on the search turns plus the normalized outcome (x1.5), summed
backwards (credit/process.py). The paper's p_i comes from a learned PRM (PiCA-RM, an extra
model served over HTTP); here the env supplies it as the `prm_score` extra (is the next hop's
gold fact in the retrieved set now? the pivot signal without a model) and `step_mask` (the
search turns). Script settings b = 0.55, scale = 0.3 (ALGORITHMS.md §4.7). The sign: the
reference scores a step 1 - p - b, so its p is a *cost*; the env follows that convention
(`prm_score` = 1 - gold_hit on search turns, envs/kb_search_qa/env.py), so a search that finds
the next hop's fact earns +0.45 x 1.3 before normalization and one that misses -0.55 x 1.3.

Paper numbers. Verified (abstract): over strong baselines on seven knowledge-intensive QA
sets, +15.2% (3B) and +2.2% (7B). Expected direction: PiCA >= GRPO on held-out EM, with the
gap largest on multi-hop questions and small models.

tiny (2-core CPU; search_r1_kbqa's SFT warm start, then 30 RL iterations; measured 2026-12-04,
3 seeds, `python launch/reproduce.py --paper=pica_kbqa --scale=tiny --seeds=3`): held-out EM
0.750 (0.734, 0.812, 0.703) vs GRPO 0.734 (0.734, 0.781, 0.688), both from 0.667 after SFT;
PiCA - GRPO = +0.016, 95% interval [-0.103, +0.135]: the paper's sign, not significant at 3
seeds. The GRPO arm is search_r1_kbqa's GRPO runs (the same config and seeds, reused).
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import kb_search_qa, search_r1

VARIANTS = dict(grpo=False)
COMPARISON = Comparison(  # relative gains only in the abstract: a direction, no numbers
    arms={"PiCA": "", "GRPO": "grpo"}, method="PiCA", baselines=("GRPO",),
    metrics=("eval/success",),
    paper_source="PiCA (arXiv:2605.09287) abstract: +15.2% (3B) / +2.2% (7B) over strong "
                 "baselines on seven QA sets",
    paper_verified=True, setting="KB-SearchQA (random KG, 1-4 hops), EM")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  kb_search_qa(c)
  search_r1(c)
  if "grpo" not in args:
    c.credit.name = "pica"
    c.credit.kwargs.gamma = 1.0
    c.credit.kwargs.baseline, c.credit.kwargs.scale = 0.55, 0.3
  if c.scale == "full":
    c.model.preset = "qwen2.5-7b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
  return c
