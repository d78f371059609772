"""The one base config of sane defaults; paper configs in configs/ are small deltas over it.

`base_config()` returns an ml_collections ConfigDict whose fields are typed (a wrong type in
`--config.x=y` fails at parse time, naming the field) and `validate(config)` checks fields
(none unknown or missing), values, registry names, sizes and each registered function's
kwargs against its signature at start-up, before anything is compiled. `scaled_config(arg,
VARIANTS)` is what every `configs/*.py:get_config(arg)` starts from.
"""
from __future__ import annotations

from typing import Any, Mapping

import ml_collections as mlc

from agent_rl.train.variants import parse_variants


def base_config() -> mlc.ConfigDict:
  c = mlc.ConfigDict()
  c.seed = 0
  c.scale = "tiny"  # documentation only: which scale a paper config was built at

  c.model = mlc.ConfigDict(dict(
      preset="tiny",
      # Overrides of the preset (0 / "" keep the preset's value).
      hidden=0, num_layers=0, num_heads=0, num_kv_heads=0, intermediate=0,
      # Compute / stored dtypes ("" keeps the preset's; float32 | bfloat16 | float16). Mixed
      # precision = dtype "bfloat16" over param_dtype "float32" (see agent_rl.models.dense).
      dtype="", param_dtype="",
      init_from="",  # a HF safetensors dir or an agent_rl checkpoint dir ("" = random init)
      critic="none",  # none | shared (value head on the policy trunk) | separate
      # A separate critic's decoder as RL starts: "policy" = a copy of the policy LM then (after
      # SFT / model.init_from; verl's critic.model.path is the actor's), "random" = the seed's
      # init. The value head starts fresh either way.
      critic_init="policy",
      # Learner log-probs from hidden states in chunks of this many tokens (rows x positions;
      # memory ~chunk x V, not B x L x V); 0 materializes the logits (the benchmark's baseline).
      # -1 (auto, train.setup.logprob_chunk): materialized for vocabularies <= 8,192 (faster
      # there), else max(256, 2**24 // vocab) tokens (<= 64 MiB of f32 logits per chunk).
      logprob_chunk=-1,
      remat="none",  # none | block: recompute each decoder block in the backward (jax.checkpoint)
      # Tokens a row per chunk when a block is prefilled into the KV cache (a rollout's
      # window every turn, evaluation prompts), each chunk through all layers: its scores are
      # [B, heads, chunk, S] and MLP [B, chunk, F]; 0 = the whole block at once. The same values.
      prefill_chunk=256,
      # Keys per block of the train step's attention (models/blocked_attention.py): each layer
      # saves its rows' outputs and log-sum-exps, not their [heads, L, L] probabilities (memory
      # linear in L; long windows at `full`); 0 = the dense core (faster for short rows on CPU).
      attention_block=0,
      # LoRA (agent_rl.models.lora): rank 0 = off (full fine-tuning); rank > 0 trains only the
      # adapters (delta W = alpha / rank * A B) on these comma-listed projections, the base frozen.
      lora=mlc.ConfigDict(dict(rank=0, alpha=16.0, dropout=0.0, targets="q,k,v,o,gate,up,down")),
  ))
  c.tokenizer = mlc.ConfigDict(dict(
      path="",  # an existing sentencepiece .model; "" trains one on env text into workdir
      vocab_size=384,
      # True: the env's `tokenizer_symbols` (MiniShop's item ids) are single tokens of the
      # tokenizer trained here, so a tiny policy copies an id as one token, not six.
      env_symbols=False,
  ))
  # name: a JAX env of envs.ENVS, or "host:<adapter>" (envs/host/build.py): kwargs are then
  # the adapter's, and `host` sets its worker pool and text interface.
  c.env = mlc.ConfigDict(dict(name="sokoban", kwargs=mlc.ConfigDict(), host=mlc.ConfigDict(dict(
      workers=0,  # worker processes stepping the games; 0 = in-process, one after another
      step_timeout_s=60.0,  # a worker silent this long per item it owes is restarted
      obs_tokens=256,  # observation budget (tokens; longer text is truncated, counted)
      admissible=True,  # list the game's admissible commands after each observation
      action_format="answer",  # answer (<answer>cmd</answer>) | raw (the first line)
      invalid_penalty=-0.1,  # reward of a turn without a parsable command (game not stepped)
      score_scale=1.0,  # reward = the game's score delta x this (ScienceWorld's 0-100: 0.01)
      max_answer_bytes=256,
      split="train", eval_split="",  # task panels; "" = evaluate on the training panel
      extras="",  # comma list of GameStep.extras keys carried into the batch
      overlap=True,  # two half-batches in flight (rollout/overlap.py)
      # the next iteration's resets start in the workers before the update (pool.py)
      prefetch_resets=True,
      # hindsight teachers (config.hindsight) read each task's expert plan, cut to this
      privileged_tokens=128,
      # Several agents on a game without roles of its own (envs/host/roles.py): comma lists.
      roles="", schedule="",  # role names; who acts turn t ("" = round robin)
      offset_by_task=False,  # each task's episodes start at a different point of the schedule
      role_scales="",  # per-role scales of the score, columns role/<role> ("" = team reward)
  ))))
  c.rollout = mlc.ConfigDict(dict(
      num_tasks=16, group_size=8, max_turns=5, max_action_tokens=16,
      temperature=1.0, top_p=1.0, top_k=0,
      history="concatenated",  # concatenated | windowed
      window_turns=2, window_tokens=256,
      strategy="plain", strategy_kwargs=mlc.ConfigDict(),
  ))
  c.credit = mlc.ConfigDict(dict(name="grpo", kwargs=mlc.ConfigDict()))
  # Several agents in an episode (agent_rl.agents; the env names its roles): one network with
  # role prompts (shared), one LoRA adapter per agent on a shared base (lora, needs
  # model.lora.rank > 0) or a full copy per agent (separate); both need windowed history.
  # init: agent k's policy from a run ("", "runs/a", ...: agents/frozen.py); frozen: agents
  # that act but never train ("1,2").
  c.agents = mlc.ConfigDict(dict(mode="shared", num=0, init="", frozen=""))  # num 0: env roles
  c.loss = mlc.ConfigDict(dict(
      name="vanilla", agg_mode="token-mean", kwargs=mlc.ConfigDict(),
      entropy_coef=0.0,
      kl_coef=0.0,  # > 0 adds a KL-to-reference loss term (needs a reference model)
      kl_type="low_var_kl",
      kl_in_reward=0.0,  # > 0 subtracts beta * KL from turn rewards (fixed controller)
      value_coef=0.5, value_clip=0.5,
      # The objective: registered loss terms (agent_rl.objective.terms), summed with their
      # coefficients; a term with coefficient 0 is off. Terms: policy, entropy (-entropy_coef),
      # kl (kl_coef), value (value_coef, with a critic), distill (distill.coef), sft (sft_coef:
      # NLL of positive-advantage tokens), is_correction (truncated sampler IS, cap is_cap).
      terms="policy,entropy,kl,value,distill,sft,is_correction",
      sft_coef=0.0,
      is_cap=0.0,  # > 0: TIS weights min(pi_old / q_sample, is_cap) on the policy loss
      is_level="token",  # token | sequence
      term_kwargs=mlc.ConfigDict(),  # free: coefficients/options of your own terms
  ))
  # Reward shapers applied to the batch before credit (agent_rl.objective.shapers), in order;
  # each is off at coefficient 0: kl_in_reward (loss.kl_in_reward), overlong, reward_weights.
  c.reward = mlc.ConfigDict(dict(
      shapers="kl_in_reward,overlong,reward_weights",
      kl_controller="fixed",  # fixed | adaptive (verl's controllers)
      kl_target=0.1, kl_horizon=10000,  # adaptive controller
      overlong_buffer=0,  # DAPO: tokens of the soft-penalty buffer (0 = off)
      overlong_penalty=1.0,
      overlong_max_length=0,  # 0 = rollout.max_turns * rollout.max_action_tokens
      term_weights="",  # "success=1.0,format=0.5": reward = weighted env reward_terms
      # A learned reward model in RL (agent_rl.reward.use; shaper "reward_model"): the workdir
      # of a reward-model run, how its scores enter the turn rewards (add | replace: the
      # outcome score on the last turn; process: per-turn scores) and the coefficients.
      model="", model_use="add", model_coef=1.0, env_coef=1.0,
      hacking_ema=0.8,  # EMA rate of the reward-hacking signal (RM score up, env success down)
  ))
  # Training a reward model as a run (`python -m agent_rl.reward.train`, agent_rl.reward):
  # outcome (Bradley-Terry on pairs) or process (per-turn BCE on the env's step labels).
  c.rm = mlc.ConfigDict(dict(
      kind="outcome",  # outcome | process
      source="rollouts",  # rollouts (ranked by env return within a group) | pairs (TFDS)
      policy_run="",  # agent_rl workdir whose policy generates the rollouts ("" = the RM's init)
      pairs_path="",  # JSONL of {"prompt", "chosen", "rejected"} (source=pairs)
      rollout_batches=6, held_out_batches=2,  # rollout batches for training / held-out
      held_out_frac=0.2,  # source=pairs: the last fraction of the pairs is held out
      steps=200, batch_size=32, lr=1e-3, eval_every=50, margin=0.0,
      # The RM's own lr schedule, as SFT's (train/optim.py phase_optimizer): 0 -> lr over
      # warmup_steps updates, then constant | cosine (to 0 at rm.steps); not optim's RL schedule.
      warmup_steps=0, schedule="constant",
  ))
  c.optim = mlc.ConfigDict(dict(
      name="adamw", lr=3e-4, warmup_steps=0, schedule="constant", weight_decay=0.0,
      b1=0.9, b2=0.95, clip_norm=1.0, grad_accum=1, total_steps=0,
      # True (with a critic): actor and critic get separate optimizer states, schedules and
      # gradient clipping (verl's two optimizers, train/optim.py actor_critic); always so with
      # train.critic_warmup or train.critic_prefit. False: one optimizer over all params.
      actor_critic_split=False,
  ))
  c.train = mlc.ConfigDict(dict(
      iterations=20, epochs=1, minibatch_episodes=64,
      # > 1: each train step's batch (RL minibatch, SFT batch) in this many slices whose
      # gradients make one update, each slice's loss aggregated with the whole batch's
      # counts (train/step.py), and forward passes over the rollout in slices as large:
      # memory / microbatches, the same updates.
      microbatches=1,
      log_every=1, eval_every=5, ckpt_every=5, keep_checkpoints=3,
      halt_on_nan=True,
      # > 0 (with a critic): the first this many RL iterations update the critic alone
      # (the value term; verl's trainer.critic_warmup), the policy does not move; actor and
      # critic then have separate optimizer states, the actor's starting at its first update
      # (train/optim.py critic_only).
      critic_warmup=0,
      # > 0 (with a critic): each RL iteration first fits the critic on its own batch, this
      # many critic-only passes (train.epochs x minibatches each), then re-scores the values
      # the credit reads (IterPO's fit-Q-then-improve; train/prefit.py); 0: the values are
      # the critic's at rollout time (verl). Actor and critic get separate optimizer states.
      critic_prefit=0,
      # > 0: each RL update, SFT step and rollout-time scoring pass (critic, KL reference,
      # teacher) runs on its rows cut after the longest filled row, rounded up to a multiple
      # of this many tokens (train/buckets.py: the same loss, one compile per length); 0:
      # rows at the layout's worst-case length. Off by default, as
      # verl's use_remove_padding: it pays where rows are mostly padding (short observations
      # under a large obs_tokens, episodes that end early), and each length compiles once.
      length_bucket=0,
  ))
  c.sft = mlc.ConfigDict(dict(
      steps=0, batch_size=32, lr=1e-3, num_demos=512, world_model=False,
      # SFT's own lr schedule (train/optim.py sft_optimizer; logged as sft/lr): 0 -> lr over
      # warmup_steps updates, then constant | cosine (to 0 at sft.steps); AdamW's other
      # settings (betas, weight decay, clipping, grad_accum) are config.optim's.
      warmup_steps=0, schedule="constant",
      # expert: the env's solver plans | route_agreement: Hera's router labels (agents/hera.py)
      plans="expert",
      # Implicit world modeling on early experience (host games, data/early_experience.py):
      # this many other admissible commands at each expert state, and the first iwm_steps of
      # `steps` fit their next observations before the demos (0, 0: off).
      iwm_alternatives=0, iwm_steps=0,
      # Copy pretraining (data/copy_corpus.py): the first copy_steps of `steps` (before IWM)
      # fit synthetic rows of copy_width tokens whose only learnable content is copying from
      # the context, a stand-in for a pretrained checkpoint's induction heads (0: off); with
      # copy_every = n > 0, every n-th step after IWM is a copy step too (rehearsal).
      copy_steps=0, copy_width=64, copy_every=0,
      # Action-balanced demo turns (data/action_balance.py): a turn's tokens weigh
      # n(kind)^-action_balance, kind its action's first word (0: off; 1: inverse frequency).
      action_balance=0.0,
  ))
  c.distill = mlc.ConfigDict(dict(
      teacher="",  # an agent_rl workdir whose best/latest checkpoint scores the rollouts
      coef=0.0,  # > 0 turns on-policy distillation on
      mode="loss",  # loss (sampled reverse KL) | advantage (coef * (logpT - logp) per token)
      task_advantages=True,  # False: pure distillation, the RL advantages are dropped
      intervene=0.0,  # > 0: the teacher takes over turns it finds this unlikely (nats/token)
  ))
  # TRIAL-style hindsight teacher (agent_rl.train.hindsight): the policy itself, its context
  # holding the env's privileged text, scores the sampled tokens; the log-prob gap reweights
  # the advantages. mode "" = off | weight | bonus (losses.distill.hindsight_gap_advantages).
  c.hindsight = mlc.ConfigDict(dict(mode="", beta=1.0, gap_clip=2.0, normalize=True))
  c.eval = mlc.ConfigDict(dict(
      num_tasks=64, seed=10_000, greedy=True, k=4,
      # > 0: the panel rolls out this many tasks at a time (it must divide num_tasks): an
      # evaluation's KV cache and prefill are one slice's (slice_tasks * k episodes).
      slice_tasks=0,
      # Extra held-out panels: name -> env kwargs overriding env.kwargs (e.g. DealLite against
      # a scripted counterpart: {"fair": {"opponent": "fair"}}), reported as eval/<name>/...
      variant_kwargs=mlc.ConfigDict(),
      # Learned held-out counterparts (agents.counterparts): name -> "RUN_DIR" or
      # "RUN_DIR@STEP"; agent `counterpart_agent` keeps its weights, the others come from
      # that run. Reported as eval/<name>/... (per-agent weights only).
      counterparts=mlc.ConfigDict(), counterpart_agent=0))
  c.mesh = mlc.ConfigDict(dict(
      data=-1, fsdp=1, tensor=1,  # per slice; one axis may be -1 (fills the devices)
      # Multi-slice (DCN) factor of each axis, e.g. dcn.data=2 for two TPU slices.
      dcn=mlc.ConfigDict(dict(data=1, fsdp=1, tensor=1)),
      num_devices=0,  # 0 = all devices; else the first n (single process: tests, elastic restore)
      memory_budget_gib=0.0,  # > 0 refuses configs whose estimated per-device peak exceeds it
  ))
  c.log = mlc.ConfigDict(dict(
      sinks="jsonl,tensorboard",  # comma list of agent_rl.metrics.SINKS: jsonl | tensorboard | wandb
      wandb_project="", wandb_entity="",  # "" = wandb's defaults
      wandb_mode="",  # "" = wandb's default / WANDB_MODE; online | offline | disabled
      episodes=3,  # held-out episodes rendered as text before and after training
  ))
  return c


def validate(c: mlc.ConfigDict) -> None:
  """Checks fields, values, registry names and kwargs; raises ValueError naming the field
  (the checks are `agent_rl.train.checks`)."""
  from agent_rl.train.checks import validate_config
  validate_config(c)


FREE_DICTS = ("counterparts",)  # name -> value blocks of the user's own keys (eval.counterparts)


def is_free_dict(key: str) -> bool:
  """A block whose keys are the user's (kwargs of a registered function, panel names): not
  typed by base_config, kept as the run set it when a run's config is read back."""
  return key == "kwargs" or key.endswith("_kwargs") or key in FREE_DICTS


def check_fields(c: mlc.ConfigDict, base: mlc.ConfigDict | None = None, path: str = "config"):
  """Raises ValueError naming the first field of `c` that `base` (default `base_config()`)
  lacks, or that `c` lacks: a typo in a config file or a `--config.x` override. The entries
  of `kwargs` / `*_kwargs` dicts are free (they are checked against their function)."""
  base = base_config() if base is None else base
  extra = sorted(set(c.keys()) - set(base.keys()))
  if extra:
    raise ValueError(f"{path}.{extra[0]}: unknown field; {path} has: "
                     f"{', '.join(sorted(base.keys()))}")
  missing = sorted(set(base.keys()) - set(c.keys()))
  if missing:
    raise ValueError(f"{path}.{missing[0]}: missing (was {path} replaced by a dict?)")
  for k in base.keys():
    if isinstance(base[k], mlc.ConfigDict) and not is_free_dict(k):
      if not isinstance(c[k], mlc.ConfigDict):
        raise ValueError(f"{path}.{k}: must be a block of fields, got {c[k]!r}")
      check_fields(c[k], base[k], f"{path}.{k}")


def lora_config(c: mlc.ConfigDict):
  """`config.model.lora` as a models.lora.LoraConfig, or None when rank is 0 (LoRA off)."""
  from agent_rl.models.lora import LoraConfig
  lc = c.model.lora
  if lc.rank == 0:
    return None
  return LoraConfig(rank=lc.rank, alpha=lc.alpha, dropout=lc.dropout,
                    targets=tuple(t.strip() for t in lc.targets.split(",") if t.strip()))


def scaled_config(arg: str | None, variants: Mapping[str, Any] | None = None):
  """(config, Variants) for `get_config(arg)`: the scale `tiny` (default, one CPU) or `full`,
  plus the config's own `variants` (name -> default, see `agent_rl.train.variants`); an
  unknown word in `arg` raises naming it and listing the known ones."""
  args = parse_variants(arg, variants or {}, scales=("tiny", "full"))
  c = base_config()
  c.scale = args.scale
  if c.scale == "tiny":
    c.model.preset = "tiny"
    c.model.hidden, c.model.num_layers, c.model.num_heads = 128, 2, 4
    c.model.num_kv_heads, c.model.intermediate = 2, 384
    c.tokenizer.vocab_size = 768
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 5, 8
    c.sft.steps, c.sft.batch_size, c.sft.num_demos, c.sft.lr = 100, 32, 256, 2e-3
    c.optim.lr = 2e-4
    c.train.iterations, c.train.minibatch_episodes = 30, 64
    c.train.eval_every, c.train.ckpt_every = 10, 10
    c.eval.num_tasks, c.eval.k = 64, 4
  else:
    c.model.preset = "qwen2.5-0.5b"
    c.tokenizer.vocab_size = 4096
    c.rollout.num_tasks, c.rollout.group_size = 8, 16
    c.rollout.max_turns, c.rollout.max_action_tokens = 5, 64
    c.sft.steps = 0
    c.optim.lr = 1e-6
    c.train.iterations, c.train.minibatch_episodes = 200, 32
    c.eval.num_tasks = 256
  return c, args
