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
      # Learner log-probs from hidden states in chunks of this many tokens (rows x positions;
      # memory ~chunk x V, not B x L x V); 0 materializes the logits (the benchmark's baseline).
      # -1 (auto, train.setup.logprob_chunk): materialized for vocabularies <= 8,192 (faster
      # there), else max(256, 2**24 // vocab) tokens (<= 64 MiB of f32 logits per chunk).
      logprob_chunk=-1,
      remat="none",  # none | block: recompute each decoder block in the backward (jax.checkpoint)
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
  ))
  c.optim = mlc.ConfigDict(dict(
      name="adamw", lr=3e-4, warmup_steps=0, schedule="constant", weight_decay=0.0,
      b1=0.9, b2=0.95, clip_norm=1.0, grad_accum=1, total_steps=0,
  ))
  c.train = mlc.ConfigDict(dict(
      iterations=20, epochs=1, minibatch_episodes=64,
      # > 1: each train step's batch (RL minibatch, SFT batch) in this many slices whose
      # gradients are averaged into one update (train/step.py), and forward passes over the
      # rollout in slices as large: memory / microbatches, the same updates.
      microbatches=1,
      log_every=1, eval_every=5, ckpt_every=5, keep_checkpoints=3,
      halt_on_nan=True,
  ))
  c.sft = mlc.ConfigDict(dict(
      steps=0, batch_size=32, lr=1e-3, num_demos=512, world_model=False,
      # expert: the env's solver plans | route_agreement: Hera's router labels (agents/hera.py)
      plans="expert",
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
  """Checks fields, values, registry names and kwargs; raises ValueError naming the field."""
  from agent_rl import credit, envs, losses  # noqa: registries
  from agent_rl.models import PRESETS
  from agent_rl.models.config import DTYPES

  def need(cond: bool, field: str, msg: str) -> None:
    if not cond:
      raise ValueError(f"config.{field}: {msg}")

  check_fields(c)
  need(c.model.preset in PRESETS, "model.preset",
       f"unknown preset {c.model.preset!r}; known: {', '.join(sorted(PRESETS))}")
  need(c.model.critic in ("none", "shared", "separate"), "model.critic",
       f"must be none|shared|separate, got {c.model.critic!r}")
  lc = c.model.logprob_chunk
  need(isinstance(lc, int) and not isinstance(lc, bool) and lc >= -1, "model.logprob_chunk",
       f"must be an int >= -1 (-1 = auto, 0 = materialized logits), got {lc!r}")
  from agent_rl.models.config import REMAT
  need(c.model.remat in REMAT, "model.remat", f"must be {'|'.join(REMAT)}, got {c.model.remat!r}")
  for f in ("dtype", "param_dtype"):
    need(c.model[f] in ("", *DTYPES), f"model.{f}",
         f"must be one of {'|'.join(DTYPES)} (or '' for the preset's), got {c.model[f]!r}")
  _validate_lora(c, need)
  from agent_rl.envs.host import build as host_envs
  if host_envs.is_host(c.env.name):
    host_envs.validate(c, need)
  else:
    need(c.env.name in envs.ENVS, "env.name",
         f"unknown environment {c.env.name!r}; known: {', '.join(envs.ENVS.names())} (or "
         f"{host_envs.PREFIX}<adapter>: {', '.join(host_envs.load_adapters())})")
  need(c.credit.name in credit.CREDIT, "credit.name",
       f"unknown credit kernel {c.credit.name!r}; known: {', '.join(credit.names())}")
  need(c.loss.name in losses.LOSSES, "loss.name",
       f"unknown loss {c.loss.name!r}; known: {', '.join(losses.LOSSES.names())}")
  need(c.loss.agg_mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"), "loss.agg_mode",
       f"unknown aggregation mode {c.loss.agg_mode!r}")
  from agent_rl.rollout.strategies import STRATEGIES
  need(c.rollout.strategy in STRATEGIES, "rollout.strategy",
       f"unknown rollout strategy {c.rollout.strategy!r}; known: {', '.join(STRATEGIES.names())}")
  _validate_kwargs(c, need)
  _validate_objective(c, need)
  need(c.rollout.history in ("concatenated", "windowed"), "rollout.history",
       f"must be concatenated|windowed, got {c.rollout.history!r}")
  for f in ("num_tasks", "group_size", "max_turns", "max_action_tokens"):
    need(c.rollout[f] >= 1, f"rollout.{f}", f"must be >= 1, got {c.rollout[f]}")
  need(c.rollout.temperature >= 0, "rollout.temperature", "must be >= 0")
  need(0 < c.rollout.top_p <= 1, "rollout.top_p", f"must be in (0, 1], got {c.rollout.top_p}")
  n = c.rollout.num_tasks * c.rollout.group_size
  need(c.train.minibatch_episodes >= 1 and n % c.train.minibatch_episodes == 0,
       "train.minibatch_episodes",
       f"{c.train.minibatch_episodes} must divide num_tasks*group_size = {n}")
  k = c.train.get("microbatches", 1)
  need(isinstance(k, int) and not isinstance(k, bool) and k >= 1
       and c.train.minibatch_episodes % k == 0, "train.microbatches",
       f"{k!r} must be an int >= 1 dividing train.minibatch_episodes "
       f"({c.train.minibatch_episodes})")
  if c.sft.steps:
    need(c.sft.batch_size % k == 0, "train.microbatches",
         f"{k!r} must divide sft.batch_size ({c.sft.batch_size}): the SFT step is split too")
  need(c.optim.lr > 0, "optim.lr", "must be > 0")
  need(c.optim.grad_accum >= 1, "optim.grad_accum", "must be >= 1")
  need(c.optim.schedule in ("constant", "cosine"), "optim.schedule",
       f"must be constant|cosine, got {c.optim.schedule!r}")
  need(c.train.iterations >= 0, "train.iterations", "must be >= 0")
  need(c.train.epochs >= 1, "train.epochs", "must be >= 1")
  need(c.sft.steps >= 0, "sft.steps", "must be >= 0")
  need(c.sft.get("plans", "expert") in ("expert", "route_agreement"), "sft.plans",
       f"must be expert|route_agreement, got {c.sft.get('plans')!r}")
  need(c.loss.kl_coef >= 0 and c.loss.kl_in_reward >= 0, "loss.kl_coef",
       "KL coefficients must be >= 0")
  from agent_rl.train import teacher
  teacher.validate(c, need)
  if c.sft.world_model:
    from agent_rl.data.world_model import STATE_TEXT
    need(c.env.name in STATE_TEXT, "sft.world_model",
         f"no structured state text for env {c.env.name!r}; known: {', '.join(STATE_TEXT.names())}")
  if c.model.init_from:
    import os
    need(os.path.isdir(c.model.init_from), "model.init_from",
         f"{c.model.init_from!r} is not a directory")
  _validate_mesh(c, need)
  need(not (host_envs.is_host(c.env.name) and len(c.eval.variant_kwargs)), "eval.variant_kwargs",
       "extra eval panels are env kwargs of a JAX env; host envs evaluate on env.host.eval_split")
  from agent_rl.reward.config import validate_reward
  validate_reward(c, need)
  from agent_rl.train.hindsight import validate_hindsight
  validate_hindsight(c, need)
  from agent_rl.agents.config import validate_agents
  validate_agents(c, need)
  from agent_rl.agents import counterparts
  counterparts.validate(c, need)
  from agent_rl.metrics import check_log_config
  check_log_config(c.log)


# Keyword arguments the run passes to a registry's functions itself, not the config's to set:
# envs get the tokenizer (train/setup.py); policy losses get the aggregation mode, the key,
# turn indices, importance weights and the global token/sequence counts (train/step.py).
_SUPPLIED = {
    "env.kwargs": ("tokenizer",),
    "loss.kwargs": ("loss_agg_mode", "key", "turn_index", "weights", "num_tokens", "num_seqs"),
}
# Credit kernels that read critic values (batch.values); until kernels declare their inputs
# (issue 16 §3), this list is where a critic-needing kernel is named.
_CRITIC_KERNELS = ("gae", "bilevel_gae")


def _validate_kwargs(c: mlc.ConfigDict, need) -> None:
  """Every `*kwargs` entry is a keyword its registered function takes (checked against the
  function's signature); the KL estimator and the critic the credit kernel needs exist."""
  from agent_rl import credit, envs, losses
  from agent_rl.rollout.strategies import STRATEGIES
  from agent_rl.envs.host.build import is_host
  for field, registry, name, kwargs in (
      *([] if is_host(c.env.name) else [("env.kwargs", envs.ENVS, c.env.name, c.env.kwargs)]),
      ("credit.kwargs", credit.CREDIT, c.credit.name, c.credit.kwargs),
      ("loss.kwargs", losses.LOSSES, c.loss.name, c.loss.kwargs),
      ("rollout.strategy_kwargs", STRATEGIES, c.rollout.strategy, c.rollout.strategy_kwargs)):
    try:
      registry.check_kwargs(name, dict(kwargs), f"config.{field}", _SUPPLIED.get(field, ()))
    except ValueError as e:
      # A config file's kwargs for its own choice outlive `--config.x.name=other`.
      raise ValueError(f"{e} (--config.{field}='{{}}' first drops the config file's "
                       "kwargs)") from None
  try:  # in-loop strategies check their settings against the episode (gate, tsr, branch)
    from agent_rl.rollout.episode import EpisodeConfig
    STRATEGIES.get(c.rollout.strategy).configure(EpisodeConfig(max_turns=c.rollout.max_turns),
                                                 **dict(c.rollout.strategy_kwargs))
  except ValueError as e:
    need(False, "rollout.strategy_kwargs", f"{c.rollout.strategy}: {e}")
  kl = losses.KL_ESTIMATORS.names()
  need(c.loss.kl_type in kl + [k + "+" for k in kl], "loss.kl_type",
       f"unknown KL estimator {c.loss.kl_type!r}; known: {', '.join(kl)} (each also with a "
       "straight-through '+', e.g. 'k1+')")
  heuristic = c.rollout.strategy_kwargs.get("heuristic", None)
  if isinstance(heuristic, str) and heuristic:
    from agent_rl.rollout.search import HEURISTICS
    need(heuristic in HEURISTICS, "rollout.strategy_kwargs.heuristic",
         f"unknown search heuristic {heuristic!r}; known: {', '.join(HEURISTICS.names())}")
  need(c.credit.name not in _CRITIC_KERNELS or c.model.critic != "none", "credit.name",
       f"credit kernel {c.credit.name!r} needs critic values but config.model.critic is "
       "'none'; set model.critic=shared|separate")


def _validate_objective(c: mlc.ConfigDict, need) -> None:
  """Loss terms and reward shapers exist; their coefficients make sense."""
  from agent_rl.credit.shaping import KL_CONTROLLERS
  from agent_rl.objective import shapers, terms
  for f, fn in (("loss.terms", terms.term_names), ("reward.shapers", shapers.shaper_names)):
    try:
      fn(c)
    except ValueError as e:
      raise ValueError(str(e)) from None
  need(c.loss.is_cap >= 0, "loss.is_cap", f"must be >= 0 (0 = off), got {c.loss.is_cap}")
  need(c.loss.is_level in ("token", "sequence"), "loss.is_level",
       f"must be token|sequence, got {c.loss.is_level!r}")
  need(c.reward.kl_controller in KL_CONTROLLERS, "reward.kl_controller",
       f"unknown KL controller {c.reward.kl_controller!r}; known: {', '.join(KL_CONTROLLERS.names())}")
  need(c.reward.overlong_buffer >= 0, "reward.overlong_buffer", "must be >= 0")
  try:
    shapers.parse_weights(c.reward.term_weights)
  except ValueError as e:
    raise ValueError(str(e)) from None


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


def _validate_lora(c: mlc.ConfigDict, need) -> None:
  r = c.model.lora.rank
  need(isinstance(r, int) and not isinstance(r, bool) and r >= 0, "model.lora.rank",
       f"must be an int >= 0 (0 = LoRA off), got {r!r}")
  if r > 0:
    try:
      lora_config(c)
    except ValueError as e:  # LoraConfig names the sub-field (lora.alpha, lora.targets, ...)
      raise ValueError(f"config.model.{e}") from None


def _validate_mesh(c: mlc.ConfigDict, need) -> None:
  """The mesh fits the devices and the batches split evenly over its batch axes."""
  import jax
  from agent_rl.parallel.mesh import AXES, resolve_shape
  m = c.mesh
  need(m.num_devices >= 0, "mesh.num_devices", f"must be >= 0, got {m.num_devices}")
  need(m.memory_budget_gib >= 0, "mesh.memory_budget_gib", "must be >= 0")
  n_dev = m.num_devices or jax.device_count()
  need(n_dev <= jax.device_count(), "mesh.num_devices",
       f"{m.num_devices} requested, {jax.device_count()} available")
  dcn = [int(m.dcn[a]) for a in AXES]
  slices = 1
  for a, d in zip(AXES, dcn):
    need(d >= 1, f"mesh.dcn.{a}", f"must be >= 1, got {d}")
    slices *= d
  need(n_dev % slices == 0, "mesh.dcn", f"{slices} slices do not divide {n_dev} devices")
  try:
    ici = resolve_shape(tuple(int(m[a]) for a in AXES), AXES, n_dev // slices)
  except ValueError as e:
    raise ValueError(f"config.mesh: {e}") from None
  size = dict(zip(AXES, (i * d for i, d in zip(ici, dcn))))
  parts = size["data"] * size["fsdp"]
  n = c.rollout.num_tasks * c.rollout.group_size
  need(n % parts == 0, "rollout.num_tasks",
       f"num_tasks * group_size = {n} episodes cannot be split over mesh data x fsdp = {parts}")
  need(c.train.minibatch_episodes % parts == 0, "train.minibatch_episodes",
       f"{c.train.minibatch_episodes} episodes per minibatch cannot be split over mesh "
       f"data x fsdp = {parts}")
  k = c.train.get("microbatches", 1)
  if isinstance(k, int) and k >= 1:  # the type is checked with the other train fields
    need((c.train.minibatch_episodes // k) % parts == 0, "train.microbatches",
         f"a micro-batch of {c.train.minibatch_episodes // k} episodes (minibatch_episodes / "
         f"microbatches) cannot be split over mesh data x fsdp = {parts}")
    if c.sft.steps:
      need((c.sft.batch_size // k) % parts == 0, "train.microbatches",
           f"an SFT micro-batch of {c.sft.batch_size // k} demos (sft.batch_size / "
           f"microbatches) cannot be split over mesh data x fsdp = {parts}")
  if c.sft.steps:
    need(c.sft.batch_size % parts == 0, "sft.batch_size",
         f"{c.sft.batch_size} cannot be split over mesh data x fsdp = {parts}")


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
