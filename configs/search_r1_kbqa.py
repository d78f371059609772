"""Search-R1 (GRPO and PPO) on KB-SearchQA: the search-agent baseline of issue 19 §5 (Jin et al.
2025, "Search-R1: Training LLMs to Reason and Leverage Search Engines with RL", arXiv:2503.09516).

  python -m agent_rl.train --config=configs/search_r1_kbqa.py:tiny --workdir=/tmp/sr1_grpo
  python -m agent_rl.train --config=configs/search_r1_kbqa.py:tiny,ppo --workdir=/tmp/sr1_ppo
  variants: ppo (a shared-trunk critic, GAE gamma 1 lam 1; default GRPO); full (Qwen2.5-7B shape;
  Search-R1's 3B runs need --config.model.init_from=<Qwen2.5-3B dir>: no preset of that size).

A turn is `<think>..</think><search>q</search>` (the env answers `<information>top-k
passages</information>`) or `<answer>a</answer>`; the outcome reward is normalized exact match
on the answer turn. Retrieval masking (Search-R1 §3.1, "retrieved token masking"): the passages
come back as observation tokens, written by `rollout.layout.TokenBuffer.prompt` with loss_mask 0
and turn_index -1 (`rollout/episode.py`, the observation write after each step), so no loss,
KL or advantage ever lands on them; GRPO broadcasts turn advantages through turn_index, and GAE
skips masked tokens (`credit/gae.py`).

Paper numbers. Verified (abstract): Search-R1 improves over RAG baselines by 24% (Qwen2.5-7B)
and 20% (Qwen2.5-3B) relative (v5; v1 said 26% / 21% / 10% for LLaMA3.2-3B) on seven QA sets
(NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, Musique, Bamboogle). Recalled, unverified: average EM
~0.43 (7B base, PPO); PPO trains more stably while GRPO converges faster to similar reward;
retrieved-token masking is worth several EM points over no masking. Expected direction here:
both runs raise held-out EM (`eval/success`) over the SFT start; PPO ~ GRPO.

tiny (2-core CPU): the SFT warm start on solver plans (100 steps) carries most of the success
at this size: held-out EM 0.667 after SFT (a ceiling of 1). Measured (3 seeds, 2026-12-03,
`python launch/reproduce.py --paper=search_r1_kbqa --seeds=3`,
benchmarks/results/reproduce/search_r1_kbqa.md; 10-14 min a run, two at once): GRPO 0.734
(0.734, 0.781, 0.688; RL +0.068 over SFT), PPO 0.646 (0.656, 0.625, 0.656; -0.021): PPO - GRPO
-0.089 [-0.190, +0.013] (p 0.07): in 30 iterations GRPO gains and the critic arm does not,
consistent with "GRPO converges faster" [recalled]; the paper states no winner on EM.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import kb_search_qa, search_r1

VARIANTS = dict(ppo=False)
COMPARISON = Comparison(  # Search-R1 compares its two optimizers; it claims no winner on EM
    arms={"PPO": "ppo", "GRPO": ""}, method="PPO", baselines=("GRPO",),
    metrics=("eval/success",), claims={"GRPO": 0},
    paper_source="Search-R1 (arXiv:2503.09516): PPO more stable, GRPO faster, similar final "
                 "reward [recalled, unverified]",
    paper_verified=False, setting="KB-SearchQA (random KG, 1-4 hops), EM")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  kb_search_qa(c)
  search_r1(c, ppo="ppo" in args)
  if c.scale == "full":
    c.model.preset = "qwen2.5-7b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
  return c
