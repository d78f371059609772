"""Rollout settings shared by the paper configs of one agentic world (configs/*_texthouse.py,
configs/*_minishop.py): each world's paper setup in one place, so the configs stay deltas.

    from agent_rl.train.world_defaults import texthouse, minishop
    c, args = scaled_config(arg, VARIANTS); texthouse(c, long="long" in args)

Sizes follow verl-agent's ALFWorld / WebShop runs (the GiGPO paper's setup): a window of the
last 2 turns in the prompt (history_length 2), admissible actions listed in each observation,
50 steps (ALFWorld) / 15 steps (WebShop); `tiny` shrinks the horizon to what a 2-core CPU runs
in minutes.
"""
from __future__ import annotations

from agent_rl.eval.reproduce.comparison import PriorRun  # light: no JAX


def _windowed(c, tiny_turns: int, full_turns: int, tiny_window: int, tiny_action: int):
  c.rollout.history = "windowed"
  c.rollout.window_turns = 2
  if c.scale == "tiny":
    c.rollout.max_turns = tiny_turns
    c.rollout.window_tokens = tiny_window  # 0: what the prompt, the window and a turn need
    c.rollout.max_action_tokens = tiny_action
    c.tokenizer.vocab_size = 1024
    # A minibatch of 64 episodes is 64 x max_turns window rows of ~870 tokens (TextHouse's
    # worst-case observation with the repeated goal): 35 GiB of activations by the start-up
    # estimate (59 with SPA's world-model turns), and SkillC's first update died allocating
    # 26.6 GB on this 24 GiB machine. In 8 slices (the same updates, train/step.py) it is
    # 4.4 GiB (7.3), so two runs fit beside each other.
    c.train.microbatches = 8
  else:
    c.rollout.max_turns = full_turns
    c.rollout.window_tokens = 4096
    c.rollout.max_action_tokens = 256  # room for verl-agent's <think> block before <action>
  return c


# The five one-stage families whose expert plans fit tiny's 8 turns (4-8 steps); the sixth,
# pick_two_obj_and_place, needs 9-10 (84% of 300 sampled tasks over 8), so at tiny it would be
# a panel of tasks no policy can finish.
TINY_FAMILIES = ("pick_and_place", "look_at_obj_in_light", "pick_clean_then_place",
                 "pick_heat_then_place", "pick_cool_then_place")


def texthouse(c, *, long: bool = False, tiny_window: int = 448):
  """TextHouse (one ALFWorld task) or TextLab (`long`: 4 chained stages, 20-40 expert steps).

  tiny_window: the window's token budget at `tiny` (0: the worst case, ~870 with the repeated
  goal). 448 gave the same rollouts as the worst case (equal rewards, no window truncated in 4
  iterations; `rollout/window_truncated_samples` reports any) at 0.68x the iteration time
  (README "Agentic worlds"); SPA's 128-token world-model turns pass 0."""
  c.env.name = "textlab" if long else "texthouse"
  c.env.kwargs.max_steps = 100 if long else 50
  # verl-agent's ALFWorld prompt lists the admissible actions; at `tiny` the list (up to ~40
  # actions) would triple the context of a 2-core CPU run, so it is off there.
  c.env.kwargs.list_actions = c.scale != "tiny"
  c.env.kwargs.repeat_goal = True   # the windowed context drops the first observation (the goal)
  if c.scale == "tiny" and not long:
    c.env.kwargs.families = TINY_FAMILIES
    # tiny's RL shape for the 2-core CPU (~27 s an iteration; README "Agentic worlds"): 8 tasks
    # x 8 (the group size kept), 20 iterations; a 300-step SFT warm start (100 left held-out
    # success at 0.00: the planner's demos walk straight to the hidden object, which a policy
    # must find by search; 300 reach 0.05, so RL starts with some successes to group on).
    c.rollout.num_tasks, c.train.iterations, c.sft.steps = 8, 20, 300
  return _windowed(c, tiny_turns=24 if long else 8, full_turns=c.env.kwargs.max_steps,
                   tiny_window=0 if long else tiny_window, tiny_action=24)


def minishop(c):
  """MiniShop with WebShop's 15-step episodes, and verl-agent's clip-higher PPO loss (0.2 /
  0.28) for every row, so the GRPO arm of gigpo/tsr/trial_minishop is one run set."""
  c.env.name = "minishop"
  c.env.kwargs.max_steps = 15
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low, c.loss.kwargs.clip_ratio_high = 0.2, 0.28
  if c.scale == "tiny":  # 5 results a page (WebShop shows 10): a page then fits the window
    c.env.kwargs.page_size, c.env.kwargs.num_results = 5, 40
    # tiny's RL shape (README "Agentic worlds"): the window is kept at its worst case (1,093
    # tokens; 768 dropped a turn from 45% of the SFT policy's samples), and the prefill's
    # attention scores are B x heads x L^2 floats, ~45 MB an episode: 16 tasks x 8 took 5.8 GB
    # for the rollout and the 64 x 4 eval episodes 11.6 GB (one run OOM-killed beside another
    # on this 24 GiB machine). 8 tasks x 8, 32 eval tasks x 4 halve both, 20 iterations.
    c.rollout.num_tasks, c.train.iterations, c.eval.num_tasks = 8, 20, 32
    c.sft.steps = 300  # the rows start from one such run (MINISHOP_SFT_RECIPE)
    # Item ids as single tokens: split into ~6 digit/letter pieces, the 300-step SFT policy named
    # an id that was on the page in 15 of 120 clicks (held-out success 0.00; 2026-12-04).
    c.tokenizer.env_symbols = True
  # 40 action tokens: with 300 ids held whole the 1,024-piece tokenizer has fewer merges, and
  # the longest expert search turn is 33 tokens.
  return _windowed(c, tiny_turns=6, full_turns=15, tiny_window=0, tiny_action=40)


# Turn rows a micro-batch of the world configs at `full` (verl's ppo_micro_batch_size_per_gpu is
# 8-16 samples there); 8 x 4,096 tokens.
FULL_MICRO_ROWS = 8


def full_policy(c, preset: str = "qwen2.5-1.5b"):
  """The GiGPO paper's policy at `full`: Qwen2.5-1.5B-Instruct shape, bf16 over f32 masters,
  16 tasks x 8 rollouts, KL loss 0.01 low_var_kl [recalled from the paper, unverified]."""
  c.model.preset = preset  # the shape when no init_from is given
  c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
  c.rollout.num_tasks, c.rollout.group_size = 16, 8
  c.rollout.temperature = 1.0
  c.loss.kl_coef, c.loss.kl_type = 0.01, "low_var_kl"
  # Memory at this size (gigpo_texthouse:full, 2026-12-07). The update's rows are turns, each a
  # 4,096-token window; a minibatch of 32 episodes x 50 turns in one piece was estimated at
  # 92,310 GiB of activations (the dense core's [heads, L, L] probabilities of every row and
  # layer). Micro-batches of FULL_MICRO_ROWS turns (gradient accumulation in train/step.py:
  # one update, each slice aggregated with the minibatch's token counts: the same), blocks
  # recomputed in the backward, attention in key blocks of 512 (models/blocked_attention.py).
  # The held-out panel (256 tasks x pass@4) rolls out 32 tasks at a time: 128 episodes, the
  # training rollout's size, not a 1,024-episode rollout's 230 GiB of KV cache and prefill.
  # Call after the rollout's history and turns are set (the micro-batches count turn rows);
  # the Sokoban configs' short concatenated episodes keep the defaults. train.microbatches is
  # fixed here: overriding max_turns, minibatch_episodes or adding SFT steps at `full` needs a
  # train.microbatches dividing the new rows (and sft.batch_size; the validation names it).
  if c.rollout.history == "windowed":
    from agent_rl.train.checks import minibatch_rows  # checks imports optax: only when called
    c.model.remat, c.model.attention_block = "block", 512
    c.train.microbatches = max(1, minibatch_rows(c) // FULL_MICRO_ROWS)
    c.eval.slice_tasks = 32
  return c


PPO_WARMUP = 5  # critic-only iterations of the `ppo_warmup` variant, added to the run's iterations


def gigpo_or_baseline(c, args):
  """GiGPO (gamma 0.95, w 1, mean_norm: the paper's defaults) unless a baseline variant is
  named: `grpo`, `rloo`, `ppo` (a shared-trunk critic with GAE, gamma 0.95), or `ppo_warmup`
  (that PPO after PPO_WARMUP critic-only iterations: verl's trainer.critic_warmup, so the
  critic first fits the SFT policy's returns; then the same policy updates as the other arms),
  with the clip-higher PPO loss (0.2 / 0.28) of verl-agent's runs. `args`: the variant flags
  (scaled_config's Variants, where a variant the config does not declare is off)."""
  on = lambda k: bool(args.values.get(k, False))  # noqa: E731
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = 0.2
  c.loss.kwargs.clip_ratio_high = 0.28
  if on("grpo"):
    c.credit.name = "grpo"
  elif on("rloo"):
    c.credit.name = "rloo"
  elif on("ppo") or on("ppo_warmup"):
    c.model.critic = "shared"
    c.credit.name = "gae"
    c.credit.kwargs.gamma = 0.95
    if on("ppo_warmup"):
      c.train.critic_warmup = PPO_WARMUP
      c.train.iterations += PPO_WARMUP
  else:
    gigpo(c)
  return c


def gigpo(c):
  """GiGPO with the paper's defaults: gamma 0.95, step weight 1, mean_norm."""
  c.credit.name = "gigpo"
  c.credit.kwargs.gamma, c.credit.kwargs.step_weight = 0.95, 1.0
  c.credit.kwargs.norm = "mean_norm"
  return c


def kb_search_qa(c, *, parametric_frac: float = -1.0):
  """KB-SearchQA (issue 19 §2) with Search-R1's rollout (Jin et al. 2025, arXiv:2503.09516):
  the whole history in context (concatenated: a retrieved `<information>` block must stay
  visible to later turns), tool results as observation tokens that never enter the loss
  mask (`rollout.layout.TokenBuffer.prompt`: loss_mask 0, turn_index -1; windowed history:
  `rollout.history` masks all but the action span), top-3 passages [Search-R1's setting,
  recalled]. `full`: 1-4 hop questions, up to 4 searches and the answer (5 turns); `tiny`:
  1-2 hops in 3 turns over a 60-entity world, results cut to 24 tokens, so a 2-core CPU runs
  it in minutes. parametric_frac >= 0 sets the share of questions whose facts are in the
  instruction (CARL's competence split; the env's default otherwise)."""
  c.env.name = "kb_search_qa"
  k = c.env.kwargs
  if parametric_frac >= 0:
    k.parametric_frac = parametric_frac
  k.top_k = 3
  c.rollout.history = "concatenated"
  if c.scale == "tiny":
    k.num_entities, k.max_hops, k.max_searches, k.result_tokens = 60, 2, 2, 24
    c.rollout.max_turns = 3  # the expert plan: a search per hop, then the answer
    # Expert turns are <= 18 tokens at this vocabulary but 32 at the 400 of the config tests'
    # shrink; the decode loop stops when every row has stopped, so the slack is cheap.
    c.rollout.max_action_tokens = 36
    c.tokenizer.vocab_size = 1024
  else:
    k.max_hops, k.max_searches, k.result_tokens = 4, 4, 128
    c.rollout.max_turns = 5
    c.rollout.max_action_tokens = 500  # Search-R1's max response length [recalled, unverified]
  k.max_turns = c.rollout.max_turns  # the env's own limit agrees with the rollout's
  return c


def search_r1(c, *, ppo: bool = False):
  """Search-R1's optimizer setup [recalled from the paper and its train_{ppo,grpo}.sh, not
  re-checked]: outcome reward (EM) on the answer turn, KL loss 0.001 low_var_kl, clip 0.2;
  GRPO with a group of 5, or PPO with a critic and GAE (gamma 1, lam 1). The KL term is on
  at `full` only: at `tiny` its reference forward costs CPU time for a 0.001 coefficient."""
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = c.loss.kwargs.clip_ratio_high = 0.2
  if c.scale == "full":
    c.loss.kl_coef, c.loss.kl_type = 0.001, "low_var_kl"
  if ppo:
    c.model.critic = "shared"
    c.credit.name = "gae"
    c.credit.kwargs.gamma, c.credit.kwargs.lam = 1.0, 1.0
  else:
    c.credit.name = "grpo"
  if c.scale == "full":  # Search-R1: 512 prompts x 5 a step [recalled]; scaled to one host
    c.rollout.num_tasks, c.rollout.group_size = 32, 5
  return c


def spa_ppo(c, args):
  """SPA's recipe after the SFT phase (shiqichen17/SPA config/base.yaml; ALGORITHMS.md §4.11):
  world-model SFT turns unless `no_wm`, then PPO with a shared-trunk critic, GAE gamma = lam =
  1, clip 0.2 / 0.28, entropy 0.001 (configs/spa_sokoban.py, configs/spa_texthouse.py)."""
  c.sft.world_model = "no_wm" not in args
  c.model.critic = "shared"
  c.credit.name = "gae"
  c.credit.kwargs.gamma = 1.0
  c.credit.kwargs.lam = 1.0
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = 0.2
  c.loss.kwargs.clip_ratio_high = 0.28
  c.loss.entropy_coef = 0.001
  return c


def deal_lite(c):
  """DealLite self-play (configs/ibrl_deal.py, configs/iterpo_deal.py): windowed history
  with one turn per row (per-agent weights and single-turn credit both need it), 6 turns,
  clip 0.2 both sides; tiny: SFT on the Nash-offer plans, 15 RL iterations of 8 tasks x 4,
  32 held-out tasks; full: a 5-turn window, no SFT (the instruct model is the start)."""
  c.env.name = "deal_lite"
  c.rollout.history = "windowed"
  c.loss.kwargs.clip_ratio_low = c.loss.kwargs.clip_ratio_high = 0.2
  if c.scale == "tiny":
    c.rollout.max_turns, c.rollout.max_action_tokens = 6, 16
    c.rollout.window_turns, c.rollout.window_tokens = 1, 0
    c.rollout.num_tasks, c.rollout.group_size = 8, 4
    c.train.iterations, c.train.minibatch_episodes = 15, 32
    c.train.eval_every, c.train.ckpt_every = 5, 5
    c.sft.steps, c.sft.num_demos = 80, 256
    c.eval.num_tasks, c.eval.k = 32, 1
  else:
    c.rollout.max_turns, c.rollout.max_action_tokens = 6, 128
    c.rollout.window_turns, c.rollout.window_tokens = 5, 4096
    c.sft.steps = 0
  return c


def agents_mode(c, args):
  """Per-agent weights from the `lora` / `shared` variants (default `separate`); LoRA rank 16,
  alpha 32 for the adapters (the multi-agent configs)."""
  c.agents.mode = "lora" if args["lora"] else "shared" if args["shared"] else "separate"
  if c.agents.mode == "lora":
    c.model.lora.rank, c.model.lora.alpha = 16, 32.0
  return c


def drmas(c, args):
  """Dr. MAS (configs/drmas_*.py): agent-wise advantage normalization (`drmas` kernel, std
  normalized, groups per (task, agent)); the `grpo` variant is its global-normalization
  baseline (pooled rows, not grouped by agent)."""
  c.credit.name = "drmas"
  c.credit.kwargs.norm_by_std = True
  if args["grpo"]:
    c.credit.kwargs.group_by_agent, c.credit.kwargs.pooled_rows = False, True
  else:
    c.credit.kwargs.group_by_agent = True
  return c


# The TextHouse rows (configs/{gigpo,beacon,skillc}_texthouse.py) start from one SFT policy run
# (tiny's 300 steps on 256 planner demos; held-out success 0.05), so no arm repeats the warm start
# and every row's GRPO arm is the same run (the harness links twins).
TEXTHOUSE_SFT = "runs/texthouse_sft300"
TEXTHOUSE_SFT_RUN = PriorRun(TEXTHOUSE_SFT, "gigpo_texthouse", overrides={"train.iterations": "0"})
TEXTHOUSE_SFT_RECIPE = TEXTHOUSE_SFT_RUN.command()


# The Sokoban rows that start from a short SFT policy run (configs/prm_sokoban.py's regime:
# 40 SFT steps leave held-out success ~0.44, so RL, not the warm start, carries the learning).
SOKOBAN_SFT40 = "runs/sokoban_sft40"


def from_policy_run(run_dir: str, **extra: str) -> dict:
  """A row's `overrides` that start every arm from the policy run in `run_dir` (its LM and the
  tokenizer it trained), plus `extra` settings (e.g. sft_steps="0": no warm start of its own)."""
  return {"model.init_from": run_dir, "tokenizer.path": f"{run_dir}/tokenizer.model",
          **{k.replace("_", ".", 1): v for k, v in extra.items()}}


SOKOBAN_SFT40_OVERRIDES = from_policy_run(SOKOBAN_SFT40)
TEXTHOUSE_SFT_OVERRIDES = from_policy_run(TEXTHOUSE_SFT, sft_steps="0")
SOKOBAN_SFT40_RUN = PriorRun(SOKOBAN_SFT40, "ragen_sokoban",
                             overrides={"train.iterations": "0", "sft.steps": "40"})
SOKOBAN_SFT40_RECIPE = SOKOBAN_SFT40_RUN.command()  # docstrings quote it
# prm_sokoban's process reward model, trained on that policy's rollouts.
PRM_SFT40_RUN = PriorRun("runs/prm_sft40", "reward_model", "tiny,process",
                         {"rm.policy_run": SOKOBAN_SFT40, "model.init_from": SOKOBAN_SFT40},
                         module="agent_rl.reward.train")
# Hera's workers (configs/hera_sokoban.py; FutureBridge-OPD's student and teacher): 15 and 150
# SFT steps of tiny Sokoban reading the board only (a window of 0 turns), one tokenizer.
HERA_DEVICE, HERA_CLOUD = "runs/hera_device", "runs/hera_cloud"
_WINDOW0 = {"rollout.history": "windowed", "rollout.window_turns": "0"}
HERA_DEVICE_RUN = PriorRun(HERA_DEVICE, "ragen_sokoban", overrides={
    "train.iterations": "0", "sft.steps": "15", **_WINDOW0})
HERA_CLOUD_RUN = PriorRun(HERA_CLOUD, "ragen_sokoban", overrides={
    "train.iterations": "0", "sft.steps": "150", **_WINDOW0,
    "tokenizer.path": f"{HERA_DEVICE}/tokenizer.model"})

# The MiniShop rows (configs/{gigpo,tsr,trial}_minishop.py) start from one SFT policy run too:
# tiny's 300 steps on 256 solver demos, item ids as single tokens; held-out success 0.00, but
# half its id clicks name an item on the page and it buys (eval reward +0.02, score terms 0.5-0.6).
MINISHOP_SFT = "runs/minishop_sft300"
MINISHOP_SFT_RUN = PriorRun(MINISHOP_SFT, "gigpo_minishop", overrides={"train.iterations": "0"})
MINISHOP_SFT_RECIPE = MINISHOP_SFT_RUN.command()
MINISHOP_SFT_OVERRIDES = from_policy_run(MINISHOP_SFT, sft_steps="0")
MINISHOP_SETTING = "MiniShop (WebShop-like), from a 300-step SFT policy run"


def sokoban_from_policy_run(c):
  """6x6 one-box Sokoban, 10 steps, GRPO-family with the clip-higher PPO loss (0.2 / 0.28),
  and no SFT phase: the policy is `model.init_from` (the rows' `SOKOBAN_SFT40_OVERRIDES`;
  without it, a tiny run trains from scratch, as the config tests do)."""
  c.env.name = "sokoban"
  c.env.kwargs.dim_room = (6, 6)
  c.env.kwargs.num_boxes = 1
  c.env.kwargs.max_steps = 10
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low, c.loss.kwargs.clip_ratio_high = 0.2, 0.28
  c.sft.steps = 0
  return c


# Each graph-credit kernel with its paper's defaults (ALGORITHMS.md §4.4-4.6; the kernels'
# docstrings): RewardFlow's ALFWorld script (gamma 0.9, w 1, mean_norm), GraphGPO's recipe
# (gamma 0.1, scale 10, mean_std_norm), Gated-BEPO's proposal (gamma 0.95, lambda 0.95, sum).
GRAPH_CREDIT = {
    "rewardflow": dict(gamma=0.9, step_weight=1.0, norm="mean_norm"),
    "graphgpo": dict(gamma=0.1, reward_scale=10.0, step_weight=1.0, episode_weight=1.0,
                     norm="mean_std_norm"),
    "gated_bepo": dict(gamma=0.95, lam=0.95, fusion="sum", norm="mean_norm"),
}


def graph_credit(c, method: str, args):
  """A graph-credit row's arms: `method` (a GRAPH_CREDIT kernel) unless the variant names a
  baseline: `gigpo` (the step-group method all three extend: gamma 0.95, w 1, mean_norm) or
  `grpo` (episode-level only)."""
  if "grpo" in args:
    c.credit.name = "grpo"
  elif "gigpo" in args:
    gigpo(c)
  else:
    c.credit.name = method
    for k, v in GRAPH_CREDIT[method].items():
      c.credit.kwargs[k] = v
  return c


GRAPH_ARMS = dict(gigpo=False, grpo=False)  # the variants of every graph-credit row


def graph_credit_comparison(method_arm: str, paper_source: str, paper_verified: bool):
  """A graph-credit row: `method_arm` vs GiGPO and GRPO from the 40-step SFT Sokoban policy
  (the GiGPO and GRPO arms are the same runs in every such row: the harness reuses them)."""
  from agent_rl.eval.reproduce import Comparison
  return Comparison(
      arms={method_arm: "", "GiGPO": "gigpo", "GRPO": "grpo"}, method=method_arm,
      baselines=("GiGPO", "GRPO"), metrics=("eval/success", "eval/avg@4"),
      overrides=SOKOBAN_SFT40_OVERRIDES, priors=(SOKOBAN_SFT40_RUN,), paper_source=paper_source,
      paper_verified=paper_verified, setting="Sokoban 6x6, 1 box, from a 40-step SFT policy run")


def graph_credit_config(arg, method: str):
  """`get_config` of a graph-credit row: Sokoban from the policy run, `method`'s kernel (or the
  `gigpo` / `grpo` baseline), the Qwen2.5-1.5B shape at `full`."""
  from agent_rl.train.config import scaled_config
  c, args = scaled_config(arg, GRAPH_ARMS)
  sokoban_from_policy_run(c)
  graph_credit(c, method, args)
  if c.scale == "full":
    full_policy(c)
  return c
