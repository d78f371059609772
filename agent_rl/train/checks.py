"""Start-up checks of a run's config: every field, value, registry name and registered
function's kwargs, before anything is compiled; each error is a ValueError naming the field
(`config.<field>: ...`). `agent_rl.train.config.validate` is the entry point.
"""
from __future__ import annotations

import ml_collections as mlc

from agent_rl.train.config import check_fields, lora_config
from agent_rl.train.optim import check_phase_schedule


def minibatch_rows(c: mlc.ConfigDict) -> int:
  """Rows of one minibatch: its episodes, or in windowed history their turns (each turn is a
  row of the window's length); `train.microbatches` slices these rows."""
  return c.train.minibatch_episodes * (c.rollout.max_turns if c.rollout.history == "windowed"
                                       else 1)


def validate_config(c: mlc.ConfigDict) -> None:
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
  need(c.model.get("critic_init", "policy") in ("policy", "random"), "model.critic_init",
       f"must be policy|random, got {c.model.get('critic_init')!r}")
  lc = c.model.logprob_chunk
  need(isinstance(lc, int) and not isinstance(lc, bool) and lc >= -1, "model.logprob_chunk",
       f"must be an int >= -1 (-1 = auto, 0 = materialized logits), got {lc!r}")
  for f, zero in (("prefill_chunk", "the whole block"), ("attention_block", "the dense core")):
    v = c.model.get(f, 0)
    need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"model.{f}",
         f"must be an int >= 0 (0 = {zero}), got {v!r}")
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
  rows = minibatch_rows(c)
  need(isinstance(k, int) and not isinstance(k, bool) and k >= 1 and rows % k == 0,
       "train.microbatches",
       f"{k!r} must be an int >= 1 dividing a minibatch's {rows} rows (train.minibatch_episodes"
       f"{' x rollout.max_turns: windowed rows are turns' if rows != c.train.minibatch_episodes else ''})")
  st = c.eval.get("slice_tasks", 0)
  need(isinstance(st, int) and not isinstance(st, bool) and st >= 0
       and (st == 0 or c.eval.num_tasks % st == 0), "eval.slice_tasks",
       f"{st!r} must be an int >= 0 (0: the whole panel at once) dividing eval.num_tasks "
       f"({c.eval.num_tasks})")
  if c.sft.steps:
    need(c.sft.batch_size % k == 0, "train.microbatches",
         f"{k!r} must divide sft.batch_size ({c.sft.batch_size}): the SFT step is split too")
  need(c.optim.lr > 0, "optim.lr", "must be > 0")
  need(c.optim.grad_accum >= 1, "optim.grad_accum", "must be >= 1")
  need(c.optim.schedule in ("constant", "cosine"), "optim.schedule",
       f"must be constant|cosine, got {c.optim.schedule!r}")
  need(c.train.iterations >= 0, "train.iterations", "must be >= 0")
  need(c.train.epochs >= 1, "train.epochs", "must be >= 1")
  for field, what in (("critic_warmup", "critic-only iterations"),
                      ("critic_prefit", "critic-only passes an iteration")):
    n, name = c.train.get(field, 0), f"train.{field}"
    need(isinstance(n, int) and not isinstance(n, bool) and 0 <= n, name,
         f"must be an int >= 0, got {n!r}")
    if not n:
      continue
    need(c.model.critic != "none", name, f"{n} {what} need a critic (model.critic shared|separate)")
    from agent_rl.objective.terms import term_names
    need("value" in term_names(c) and c.loss.value_coef > 0, name,
         "needs the value term (loss.terms holds 'value', loss.value_coef > 0): it is what the "
         "critic-only update trains")
    need(c.agents.mode == "shared", name,
         f"supported with agents.mode='shared' (one network), got {c.agents.mode!r}")
  split = c.optim.get("actor_critic_split", False)
  need(isinstance(split, bool), "optim.actor_critic_split", f"must be a bool, got {split!r}")
  if split:
    need(c.model.critic != "none", "optim.actor_critic_split",
         "separate actor and critic optimizers need a critic (model.critic shared|separate)")
  warm = c.train.get("critic_warmup", 0)
  if warm:
    need(warm < c.train.iterations, "train.critic_warmup",
         f"{warm} must be < train.iterations ({c.train.iterations}): the actor never trains")
  lb = c.train.get("length_bucket", 0)
  need(isinstance(lb, int) and not isinstance(lb, bool) and lb >= 0, "train.length_bucket",
       f"must be an int >= 0 (tokens; 0: no cut), got {lb!r}")
  need(c.sft.steps >= 0, "sft.steps", "must be >= 0")
  check_phase_schedule(c, "sft", need)
  need(c.sft.lr > 0, "sft.lr", f"must be > 0, got {c.sft.lr}")
  need(c.sft.get("plans", "expert") in ("expert", "route_agreement"), "sft.plans",
       f"must be expert|route_agreement, got {c.sft.get('plans')!r}")
  _check_iwm(c, need)
  _check_copy(c, need)
  b = c.sft.action_balance
  need(0.0 <= b <= 1.0, "sft.action_balance",  # > 1: a rarer kind would outweigh a commoner one
       f"must be in [0, 1] (0: off, 1: inverse frequency), got {b!r}")
  need(not b or c.sft.get("plans", "expert") == "expert", "sft.action_balance",
       f"weighs the expert's demo turns; sft.plans={c.sft.get('plans')!r} has none")
  need(c.loss.kl_coef >= 0 and c.loss.kl_in_reward >= 0, "loss.kl_coef",
       "KL coefficients must be >= 0")
  from agent_rl.train import teacher
  teacher.validate(c, need)
  if c.sft.world_model and not host_envs.is_host(c.env.name):  # host: envs/host/build.py
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
    need((minibatch_rows(c) // k) % parts == 0, "train.microbatches",
         f"a micro-batch of {minibatch_rows(c) // k} rows (a minibatch's rows / microbatches) "
         f"cannot be split over mesh data x fsdp = {parts}")
    if c.sft.steps:
      need((c.sft.batch_size // k) % parts == 0, "train.microbatches",
           f"an SFT micro-batch of {c.sft.batch_size // k} demos (sft.batch_size / "
           f"microbatches) cannot be split over mesh data x fsdp = {parts}")
  if c.sft.steps:
    need(c.sft.batch_size % parts == 0, "sft.batch_size",
         f"{c.sft.batch_size} cannot be split over mesh data x fsdp = {parts}")


def _check_iwm(c, need) -> None:
  """Implicit world modeling on early experience (data/early_experience.py): host games'
  expert demos only, and its steps are the first of `sft.steps`."""
  from agent_rl.envs.host import build as host_envs
  k, n = c.sft.iwm_alternatives, c.sft.iwm_steps
  for field, v in (("sft.iwm_alternatives", k), ("sft.iwm_steps", n)):
    need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, field,
         f"must be an int >= 0, got {v!r}")
  if not (k or n):
    return
  need(bool(k) == bool(n), "sft.iwm_steps" if k else "sft.iwm_alternatives",
       f"sft.iwm_alternatives ({k}) and sft.iwm_steps ({n}) must be both > 0 or both 0: "
       "the IWM stage needs transitions and steps to fit them")
  need(n + c.sft.copy_steps <= c.sft.steps, "sft.iwm_steps",
       f"{n} must be <= sft.steps ({c.sft.steps}) less sft.copy_steps ({c.sft.copy_steps}): "
       "the IWM stage is the first of the SFT steps after the copy stage")
  need(host_envs.is_host(c.env.name), "sft.iwm_alternatives",
       f"early experience is drawn from a host text game's admissible commands (envs/host); "
       f"env {c.env.name!r} is not one")
  need(c.sft.get("plans", "expert") == "expert", "sft.iwm_alternatives",
       "early experience branches from the expert plans (sft.plans='expert')")
  # An IWM row is no agent's turn: with per-agent weights or frozen agents it would train one
  # agent's weights (row agent 0) or, agent 0 frozen, nothing at all.
  need(c.agents.mode == "shared" and not c.agents.frozen, "sft.iwm_alternatives",
       f"supported with one shared network (agents.mode='shared', no agents.frozen), got "
       f"mode={c.agents.mode!r} frozen={c.agents.frozen!r}")


def _check_copy(c, need) -> None:
  """Copy pretraining (data/copy_corpus.py): its steps are the first of `sft.steps`; with
  `sft.copy_every` some of the later ones too."""
  from agent_rl.data.copy_corpus import COPY_MAX
  n, w, every = c.sft.copy_steps, c.sft.copy_width, c.sft.copy_every
  for field, v in (("sft.copy_steps", n), ("sft.copy_width", w), ("sft.copy_every", every)):
    need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, field,
         f"must be an int >= 0, got {v!r}")
  if not (n or every):
    return
  need(n <= c.sft.steps, "sft.copy_steps",
       f"{n} must be <= sft.steps ({c.sft.steps}): the copy stage is the first of the SFT steps")
  need(every != 1, "sft.copy_every", "1 would leave no step for the demos (2: every other step)")
  need(w >= 2 * COPY_MAX, "sft.copy_width",
       f"{w} must be >= {2 * COPY_MAX} (room for a span of up to {COPY_MAX} tokens and its copy)")
  # A copy row is no agent's turn (as an IWM row, above).
  field = "sft.copy_steps" if n else "sft.copy_every"
  need(c.agents.mode == "shared" and not c.agents.frozen, field,
       f"supported with one shared network (agents.mode='shared', no agents.frozen), got "
       f"mode={c.agents.mode!r} frozen={c.agents.frozen!r}")
