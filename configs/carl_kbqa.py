"""CARL's segment critic vs GRPO on KB-SearchQA with a competence split (Kumar, Wu, Suley 2026,
"Knowing When to Ask: Segment-Level Credit Assignment for LLM Tool Use", arXiv:2605.27788).

  python -m agent_rl.train --config=configs/carl_kbqa.py:tiny --workdir=/tmp/carl
  python -m agent_rl.train --config=configs/carl_kbqa.py:tiny,grpo --workdir=/tmp/carl_grpo
  variants: grpo (Search-R1 GRPO, no critic); lam=<float> (segment GAE lambda; default 0, TD
  credit per segment; 1 = outcome minus each segment's value);
  parametric=<float> (share of questions whose facts are in the instruction, default 0.5); full.

CARL (credit/carl.py): the rollout is cut into segments at tool boundaries (here: turns; each
ends at a `<search>` call or the `<answer>`, the tool result opens the next); a critic (the
shared-trunk value head) gives one value per segment, advantages are GAE over segments and the
critic regresses every token of a segment to that segment's return. The exact estimator of
the paper was not reachable (only its abstract); credit/carl.py says what is verified.

The competence split: with `parametric` questions the facts are in the instruction, so a
search is unnecessary. The metric to watch is `rollout/tools/calls_per_parametric_episode`
(envs/tools/metrics.py `tool_metrics`, logged once train/phases.py merges it into the rollout
metrics) next to `rollout/tools/calls_per_episode` and held-out EM.

Paper numbers. Verified (abstract): +6.7 EM at 7B and +9.7 EM at 3B over the best RL baseline
(Search-R1 PPO at 7B, Search-R1 GRPO at 3B) on five benchmarks (arithmetic, multi-hop QA,
financial tables); +8.3 / +9.0 EM on Musique; 53% fewer tool calls on parametrically answerable
questions while ~10 EM more accurate on them; the critic separates parametric from
tool-dependent questions with AUC 0.93 (7B). Expected direction: CARL >= GRPO on EM, and
fewer calls per parametric episode than GRPO.

tiny (2-core CPU; search_r1_kbqa's SFT warm start and 30 RL iterations, half the questions
parametric; measured 2026-12-04, 3 seeds, `python launch/reproduce.py --paper=carl_kbqa
--scale=tiny --seeds=3`): **the paper's direction does not show.** Held-out EM CARL 0.635
(0.656, 0.703, 0.547) vs GRPO 0.729 (0.766, 0.750, 0.672), both from 0.682 after SFT: CARL -
GRPO = -0.094 [-0.258, +0.070], n.s.; RL lowered CARL's EM by 0.047 while GRPO gained 0.047
(the segment critic, trained from scratch on the shared trunk in 30 iterations, is a noisier
baseline than the group mean here). Searches per parametric episode (last iteration's
rollouts): CARL 0.024, GRPO 0.000: the SFT policy already answers parametric questions
without a search (the expert plans do), so the second claim has no room at this scale.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import kb_search_qa, search_r1

VARIANTS = dict(grpo=False, lam=0.0, parametric=0.5)
COMPARISON = Comparison(  # EM deltas only in the abstract: a direction, no absolute numbers
    arms={"CARL": "", "GRPO": "grpo"}, method="CARL", baselines=("GRPO",),
    # the second claim: fewer searches on questions whose facts the instruction states (the
    # last iteration's sampled rollouts; held-out evaluation does not log tool metrics)
    metrics=("eval/success", "rollout/tools/calls_per_parametric_episode"),
    claims={"GRPO": {"eval/success": 1, "rollout/tools/calls_per_parametric_episode": -1}},
    paper_source="CARL (arXiv:2605.27788) abstract: +9.7 EM at 3B over Search-R1 GRPO, "
                 "+6.7 EM at 7B over Search-R1 PPO; 53% fewer calls on parametric items",
    paper_verified=True, setting="KB-SearchQA with parametric items, EM")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  kb_search_qa(c, parametric_frac=args["parametric"])
  search_r1(c)
  if "grpo" not in args:
    c.model.critic = "shared"
    c.credit.name = "carl"
    c.credit.kwargs.gamma, c.credit.kwargs.lam = 1.0, args["lam"]
  if c.scale == "full":
    c.model.preset = "qwen2.5-7b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
  return c
