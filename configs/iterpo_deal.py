"""IterPO (Iterative PPO / GRPO) vs multi-turn GRPO: two bargainers in DealLite self-play.

Paper: Jiang, Bhandari, Yang, Munos, Lu (Meta / FAIR), "Aligning LLMs Toward Multi-Turn
Conversational Outcomes Using Iterative PPO" (arXiv 2511.21638, Nov 2025); its LLA 2026
version ("... Using Iterative RLHF", openreview 4LnkDDwLg8) runs Iterative GRPO. A learned
multi-turn Q-function is the reward model of a single-turn RLHF problem, whose solution by
token-level PPO / GRPO is a policy-improvement step of the multi-turn problem; the method
alternates fitting Q on logged trajectories of the current policy with that improvement.

  python -m agent_rl.train --config=configs/iterpo_deal.py:tiny --workdir=/tmp/iterpo
  python -m agent_rl.train --config=configs/iterpo_deal.py:tiny,grpo --workdir=/tmp/mt_grpo
  python launch/reproduce.py --paper=iterpo_deal --scale=tiny --seeds=3
  python launch/reproduce.py --paper=iterpo_deal --arms="IterPO fit first" --seeds=3
  variants: fit_first (the paper's order: each iteration fits Q on its own batch first, 4
  critic-only passes, then the credit reads the fitted Q; `train.critic_prefit`; this also
  gives actor and critic optimizers of their own, each clipping its own gradients) | split
  (the default's lagged Q with those two optimizers: fit_first's control) | grpo (the
  baseline: multi-turn GRPO, every turn gets its episode's group-normalised env return, no
  critic) | shared (Q as a value head on the policy trunk instead of its own decoder) |
  q_policy (Q's decoder starts as a copy of the SFT policy, `model.critic_init=policy`; tiny's
  other arms start it at random weights, as they were measured) | full.

Method arm (credit `iterpo`, agent_rl/credit/iterpo.py, which states the reading precisely):
the critic is the Q-function (`model.critic=separate`: its own decoder, as the paper's Q model
is separate from the policy), regressed every iteration on the logged episodes' Monte-Carlo
return-to-go (the value loss term); Q(s_t, a_t) is its value at the last token of turn t's
action; each turn's advantage is single-turn GRPO of Q among the actions sampled at the same
state (same task group, same `state_hash` before the action: at turn 0 all G episodes of a
task; later, the episodes that reached the same offer); a state sampled once gets 0. By
default Q is read at rollout time, i.e. as fitted on the batches logged before this one (a
one-batch lag); `fit_first` fits it on the batch first, the paper's order (no fresh actions
are sampled at logged states in either: the group's own episodes are the samples). Windowed history, one turn per row: each turn is a single-turn
sample. Both roles share one policy network (`agents.mode=shared`; per-agent weights with
IterPO are not measured). Both arms optimise the same env reward (self-play: the
joint welfare, alice's + bob's value of the deal / 10 each).

Paper numbers: none reachable here. v1 is a technical note (the summaries found report no
result table); the LLA version reports Iterative GRPO on sales-inspired conversational
environments, but its numbers were not reachable (abstract only). So COMPARISON has no
`paper` numbers and `paper_verified=False`. Expected direction (the papers' claim):
IterPO >= multi-turn GRPO on the conversation's outcome (here eval/reward: self-play welfare;
eval/success: deal rate), with more stable improvement.

tiny (2-core CPU): SFT on the Nash-offer-then-accept plans (80 steps), then 15 RL iterations
of 8 tasks x 4; one arm takes ~5-12 min here under a shared load (load 6-10). Measured,
seeds 0-2 per arm (benchmarks/results/reproduce/iterpo_deal.md): the direction does NOT show
at this scale. Held-out greedy self-play is near saturation after SFT (eval/reward 0.97,
eval/success 0.99: mostly "alice offers 0 0 0, bob accepts") and ends at eval/reward 0.85
(1.00, 1.00, 0.55) for IterPO vs 0.96 (1.00, 1.00, 0.88) for multi-turn GRPO, difference
-0.11, Welch 95% interval [-0.69, +0.48]; eval/success 0.91 vs 1.00; alice against the fair
bargainer 0.15 vs 0.17; the sampled training return (rollout/reward, last iteration) 0.65
(0.75, 0.72, 0.47) vs 0.69 (0.60, 0.73, 0.73), -0.04 [-0.36, +0.28]. No difference beyond
noise, if anything IterPO lower (its seed 2 lost welfare late). With Q as a value head on
the policy trunk (`shared`, seed 0) the value regression damaged the policy: held-out
self-play fell to eval/reward -0.50, eval/success 0.06 (invalid turns); hence the separate Q
decoder by default. `--config.credit.kwargs.norm=mean_norm` (Q - mean, no std; seed 0):
last-5-iteration rollout/reward 0.69, as the default's 0.69.

fit_first and its control split (2026-12-06, seeds 0-2, two runs at a time on the 2-core CPU):
eval/reward 0.47 (-0.50, 1.00, 0.91) fit first vs 0.98 (1.00, 1.00, 0.94) split; fit first
minus GRPO -0.49 [-2.56, +1.58], minus split -0.51 [-2.60, +1.57], n.s. Fit first's seed 0
collapses at iterations 9-10 (training return 0.59 -> -0.35, then no deals held out) while its
Q fits the batch returns closely (value loss 0.01-0.03). The 4 pre-fit passes cost 28-31 s of
a 43 s iteration: ~12 min a run against ~6 min for split; with the critic-only forward
(`value_stats`, 1.29x a pass in benchmarks/critic_update.json) 25-27 s of 41 s. So the paper's
direction does not show in either order at this scale, and the lagged Q with its own
optimizers (split) is the best IterPO arm here.

q_policy (2026-12-06, seeds 0-2, two at a time): fit first with Q's decoder starting as the SFT
policy's copy (`model.critic_init=policy`, verl's critic init) instead of random weights. Worse,
not better: eval/reward -0.18 (-0.50, -0.60, 0.57), eval/success 0.26; fit first (random Q)
minus it +0.65 [-1.10, +2.39] (n.s.). Seed 1 breaks in one update at iteration 4 (training
return 0.29 -> -0.53, entropy 0.38 -> 0.68, then every episode ends without a deal and the
advantages are zero); seed 0's training return is 0.21 at iteration 1 and drifts to -0.30. So
the fitted-Q pathway, not Q's random start, is what loses the SFT policy here.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import deal_lite

VARIANTS = dict(grpo=False, shared=False, fit_first=False, split=False, q_policy=False)
COMPARISON = Comparison(
    arms={"IterPO fit first": "fit_first", "IterPO split": "split", "IterPO": "",
          "multi-turn GRPO": "grpo", "IterPO fit first (Q from policy)": "fit_first,q_policy"},
    method="IterPO fit first",
    baselines=("multi-turn GRPO", "IterPO split", "IterPO", "IterPO fit first (Q from policy)"),
    # the lagged readings and Q's init are ours, not baselines of the paper's
    claims={"IterPO split": 0, "IterPO": 0, "IterPO fit first (Q from policy)": 0},
    metrics=("eval/reward", "eval/success", "eval/fair/reward", "rollout/reward"),
    paper_source="Iterative PPO / GRPO (arXiv 2511.21638; LLA 2026): abstract, direction only",
    paper_verified=False, setting="DealLite self-play (shared weights), eval: self-play and vs fair bargainer")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  deal_lite(c)
  c.agents.mode = "shared"
  if args["grpo"]:
    c.credit.name = "grpo"
  else:
    c.model.critic = "shared" if args["shared"] else "separate"
    # The measured tiny rows' Q decoder started at random weights (before model.critic_init);
    # q_policy (and full): Q's decoder starts as the SFT policy's copy (verl's critic init).
    if c.scale == "tiny" and not args["q_policy"]:
      c.model.critic_init = "random"
    c.credit.name = "iterpo"
    c.credit.kwargs.gamma = 1.0
    if args["fit_first"]:  # fit Q on this batch, then improve against it (train/prefit.py)
      c.train.critic_prefit = 4  # (which gives actor and critic optimizers of their own)
    if args["split"]:  # the lagged Q with fit_first's two optimizers: its control
      c.optim.actor_critic_split = True
  c.eval.variant_kwargs = {"fair": {"opponent": "fair"}}
  return c
