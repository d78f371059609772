"""Dr. MAS agent-wise advantage normalization vs pooled GRPO: searcher + answerer on KB-SearchQA.

Dr. MAS (Feng, Zheng, He, Zhang & An 2026, "Dr. MAS: Stable Reinforcement Learning for
Multi-Agent LLM Systems", arXiv:2602.08847, langfengQ/DrMAS; ALGORITHMS.md §4.1): in a
multi-agent system trained with GRPO, one global normalization baseline misfits agents whose
rewards are distributed differently, which inflates gradient norms (spikes); normalizing each
agent's advantages by its own (group, agent) reward statistics calibrates them. This is the
paper's multi-turn search setting on our KB-SearchQA (its search system has a verifier agent
that routes each turn to a search agent or an answer agent, langfengQ/DrMAS
agent_system/agent/orchestra/search; here two agents on a fixed schedule, no router);
configs/drmas_calcmath.py is its math setting.

  python -m agent_rl.train --config=configs/drmas_kbqa.py:tiny --workdir=/tmp/drmas_kbqa
  python -m agent_rl.train --config=configs/drmas_kbqa.py:tiny,grpo --workdir=/tmp/pooled_kbqa
  variants: grpo (global normalization: every agent's rows pooled in one group statistic,
  `drmas(group_by_agent=False, pooled_rows=True)`) | lora (one LoRA adapter per agent on a
  shared base) | shared (one network, role prompts) | searcher_scale=<float> (default 0.2) | full.

The world: the generic roles wrapper (envs/roles.py) over KB-SearchQA, roles ("searcher",
"answerer") on the schedule searcher x (T - 1), answerer x 1 (T = max_turns = max_hops + 1).
Why this schedule: the searcher's turns are the hops (one `<search>` per gold fact), the
answerer's one turn is the last, where it reads every retrieved passage (windowed history with
window_turns = T - 1 keeps the whole episode in its context) and answers, as Dr. MAS's answer
agent answers from the search history. A fixed schedule cannot route by content, so `tiny`
fixes the hop count (min_hops = max_hops = 2, no parametric questions): every expert plan is
search, search, answer and both agents act in every episode and every GRPO group (the
Dr. MAS-vs-pooled difference needs groups holding both agents' rows). At `full` (1-4 hops) a
searcher that has the answer before its turns run out may answer itself (the base env takes an
answer from either role), and the expert plans of short questions do.
Rewards per role (`role_rewards`), deliberately on different scales and distributions (the
setting Dr. MAS studies): searcher 0.2 x token F1 of the episode's answer (continuous, in
[0, 0.2]), answerer 1.0 x exact match (0/1), each paid on the answer turn whoever gave it. The
scalar (team) reward stays KB-SearchQA's EM. Each agent is scored by its own return
(`agent_return`); `grad/norm/agent{k}` logs each agent's gradient norm (its parameter slice),
the paper's gradient-spike diagnostic. Default `separate`: one full copy per agent (the
paper's search runs: model_sharing=False, langfengQ/DrMAS examples/drmas_trainer/run_search.sh).

Paper numbers (arXiv abstract, verified): on multi-turn search with Qwen2.5/Qwen3, Dr. MAS over
vanilla GRPO +15.2 points avg@16 and +13.1 pass@16 (on math +5.6 / +4.6); gradient spikes
largely gone. Expected direction here: Dr. MAS >= pooled GRPO on eval/avg@4 (k = 4 at tiny
scale, not 16) and smaller per-agent gradient-norm peaks (the searcher's advantages, pooled
with the answerer's 5x larger rewards, are the ones a global baseline misfits). Measured
(tiny, seeds 0-2 per arm, `launch/reproduce.py --paper=drmas_kbqa --seeds=3`,
benchmarks/results/reproduce/drmas_kbqa.md): the direction does NOT show at this scale.
Held-out avg@4 Dr. MAS 0.115 (0.141, 0.102, 0.102) vs pooled GRPO 0.135 (0.133, 0.148, 0.125),
diff -0.021, Welch 95% [-0.067, +0.026]; success 0.167 vs 0.188, -0.021 [-0.170, +0.128].
Both arms start RL at avg@4 0.099 / success 0.271 (the same SFT) and 10 RL iterations move
them little (avg@4 +0.016 vs +0.036; greedy success falls in both), so there is little RL
signal for the normalization to change; ~16 min a run, two at once.

tiny (2-core CPU): 60 entities, 2-hop questions, 3 turns, results cut to 24 tokens; SFT (60
steps of 32 on the expert plans: search, search, answer), then 10 RL iterations of 8 tasks x 4.
An arm took 17-18 min wall, 10.3 CPU-minutes, at load 6-11 on the 2-core VM (within 10
minutes only on a quiet machine, an estimate). Smoke runs, seed 0 (2026-12-03; one seed, 32
held-out tasks: one task is 0.03, so not the comparison): both arms 0.31 eval/success and 0.11
eval/avg@4 after SFT (the same SFT); after 10 RL iterations Dr. MAS 0.25 / 0.14, GRPO 0.16 /
0.13; largest per-agent gradient norm Dr. MAS 0.36 (searcher) / 0.40 (answerer), GRPO 0.50 /
0.47. The SFT warm start carries most of the success at this size.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import agents_mode, drmas, kb_search_qa

VARIANTS = dict(grpo=False, lora=False, shared=False, searcher_scale=0.2)
COMPARISON = Comparison(
    arms={"Dr. MAS": "", "GRPO": "grpo"}, method="Dr. MAS", baselines=("GRPO",),
    metrics=("eval/avg@4", "eval/success"),
    paper_source="Dr. MAS (arXiv:2602.08847) abstract: +15.2 avg@16 / +13.1 pass@16 (search), "
                 "+5.6 avg@16 / +4.6 pass@16 (math) over vanilla GRPO (points)",
    paper_verified=True, setting="KB-SearchQA searcher/answerer (searcher reward 0.2 x F1, "
                                 "answerer 1.0 x EM)")
ROLES = ("searcher", "answerer")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  kb_search_qa(c, parametric_frac=0.0)  # every question needs its facts retrieved
  base = c.env.kwargs
  if c.scale == "tiny":
    base.min_hops = base.max_hops  # 2: the plan fills the schedule (docstring)
  turns = c.rollout.max_turns
  c.env.name = "roles"
  k = c.env.kwargs = type(base)()
  k.base, k.base_kwargs, k.roles = "kb_search_qa", base, ROLES
  k.schedule = (0,) * (turns - 1) + (1,)
  k.role_rewards = f"f1={float(args['searcher_scale'])},em=1.0"
  c.rollout.history = "windowed"  # per-agent weights: one turn, hence one agent, per row
  c.rollout.window_turns, c.rollout.window_tokens = turns - 1, 0  # the answerer sees every result
  agents_mode(c, args)
  drmas(c, args)
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = c.loss.kwargs.clip_ratio_high = 0.2
  if c.scale == "tiny":
    c.rollout.num_tasks, c.rollout.group_size = 8, 4
    c.train.iterations, c.train.minibatch_episodes = 10, 8
    c.train.eval_every, c.train.ckpt_every = 5, 5
    # SFT is half the CPU time here (3 windowed rows an episode, both agents' forwards on
    # every row under `separate`), but batch 16 left held-out success at 0.03 after SFT
    # (0.31 at the default 32): too weak a start to compare credit on.
    c.sft.steps, c.sft.num_demos = 60, 256
    c.eval.num_tasks, c.eval.k = 32, 4
  else:
    c.rollout.num_tasks, c.rollout.group_size = 32, 5  # Dr. MAS search: group 5
    c.eval.k = 16
  return c
