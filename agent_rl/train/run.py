"""The main job: tokenizer -> (SFT warm start) -> RL iterations -> eval, with exact resume.

    python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=/tmp/run

`run` is the whole lifecycle in order: validate and place, build the parts once
(`build_run`), restore or start, SFT phase, RL phase, report. The phases live in
`train/phases.py`, the on-disk layout in `train/checkpoint.py` (RunCheckpoint), the loss in
`agent_rl.objective`. SIGTERM (a TPU preemption) checkpoints at the next step boundary and
exits; with several processes every host saves at the same step (orbax's sync point).
"""
from __future__ import annotations

import functools
import os

import jax
import ml_collections as mlc

from agent_rl import agents
from agent_rl import credit as credit_lib
from agent_rl.agents import counterparts
from agent_rl.agents.frozen import freeze_optimizer, put_agent
from agent_rl.envs.tasks import batched_sampler
from agent_rl.eval.evaluate import episode_config
from agent_rl.eval.report import write_report
from agent_rl.objective import build_objective, shapers, terms
from agent_rl.parallel.distributed import main_process_first
from agent_rl.parallel.memory import report as memory_report
from agent_rl.parallel.placement import Placement, make_placement
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.strategies import STRATEGIES
from agent_rl.train import hindsight, lora_learner, phases, prefit, pretrained, sft
from agent_rl.train.checkpoint import RunCheckpoint
from agent_rl.train.checks import minibatch_rows
from agent_rl.train.config import validate
from agent_rl.train import teacher as teacher_lib
from agent_rl.train.teacher import uses_teacher
from agent_rl.train.metrics import MetricWriter
from agent_rl.train.optim import actor_critic, critic_only, make_optimizer, sft_optimizer
from agent_rl.train.phases import Preempted, SimulatedKill  # noqa: F401 (re-exported)
from agent_rl.train.setup import build, eval_variants, logprob_chunk, model_factory
from agent_rl.train.epochs import make_scan_update
from agent_rl.train.state import init_params, jit_step, jit_update, state_spec
from agent_rl.train.step import make_train_step


def run(c: mlc.ConfigDict, workdir: str, *, kill_after: int | None = None) -> dict:
  """Runs SFT (if configured) and RL; returns the last metrics written.

  kill_after: tests of exact resume only — abort (SimulatedKill) right after RL iteration
  `kill_after` has logged its metrics, without checkpointing it.
  """
  validate(c)
  _check_workdir(workdir)
  if uses_teacher(c) and not c.tokenizer.path:  # the student speaks the teacher's tokens
    c = c.copy_and_resolve_references()
    c.tokenizer.path = pretrained.run_tokenizer_path(c.distill.teacher)
  pretrained.save_run_config(c, workdir)
  place = make_placement(c.mesh)
  with place.context():
    r = build_run(c, workdir, place, kill_after)
    try:
      prog = phases.resume(r)
      if prog is None:
        prog = phases.initial_progress(r, initial_params(r))
      r.writer.truncate_after(prog.meta.global_step)
      if prog.meta.global_step == 0:  # what the agent does before training, as text
        phases.log_episodes(r, prog.state.params, 0, "before")
      if prog.meta.phase == "sft":
        prog = phases.sft_phase(r, prog)
      last = phases.rl_phase(r, prog)
      r.ckpt.close()
      r.writer.close()
    finally:
      getattr(r.setup.env, "close", lambda: None)()  # a host env's worker processes
  if jax.process_index() == 0 and os.path.exists(os.path.join(workdir, "metrics.jsonl")):
    write_report(workdir)
  return last


def uses_reference(c) -> bool:
  """A frozen reference exists only when something reads it (KL term, KL-in-reward)."""
  kl_term = "kl" in terms.term_names(c) and terms.TERMS.get("kl").active(c)
  return kl_term or shapers.needs_reference(c)


def minibatches_per_epoch(c) -> int:
  """Episodes of a rollout / episodes of a minibatch (a windowed minibatch is its episodes'
  turn rows, so the turns cancel)."""
  return c.rollout.num_tasks * c.rollout.group_size // c.train.minibatch_episodes


def updates_per_iteration(c) -> int:
  """Optimizer updates of one RL iteration: epochs x minibatches, in either history mode (the
  cosine schedule's horizon; it was x max_turns in windowed mode, decaying too slowly)."""
  return c.train.epochs * minibatches_per_epoch(c)


def build_run(c, workdir: str, place: Placement, kill_after=None) -> phases.Run:
  """Everything fixed for the run, built once: env and tokenizer, the state's layout (one
  `eval_shape` of the model), optimizers, the jitted steps, the rollout, the checkpoint."""
  setup = main_process_first(lambda: build(c, workdir), "build")
  ecfg = episode_config(c, setup.tokenizer)
  ag = setup.agents
  pretrained.save_run_agents(ag, workdir)  # the resolved count (eval, export, teachers read it)
  spec = state_spec(model_factory(c, setup.model_cfg, ag), place)
  sft_steps, iters = int(c.sft.steps), int(c.train.iterations)
  warm, fits = int(c.train.get("critic_warmup", 0)), prefit.prefit_passes(c)
  rl_opt = make_optimizer(c.optim, iters * updates_per_iteration(c))
  warm_opt = None
  if warm or fits or c.optim.get("actor_critic_split", False):
    # verl's separate optimizers: each schedule spans its own updates only
    actor_opt = make_optimizer(c.optim, (iters - warm) * updates_per_iteration(c))
    critic_opt = (make_optimizer(c.optim, iters * (1 + fits) * updates_per_iteration(c))
                  if fits else rl_opt)
    rl_opt, warm_opt = actor_critic(actor_opt, critic_opt), critic_only(actor_opt, critic_opt)
  sft_opt = sft_optimizer(c)
  if setup.model_cfg.lora is not None:  # only adapters (and a critic head) train and hold state
    rl_opt, sft_opt = lora_learner.freeze_base(rl_opt), lora_learner.freeze_base(sft_opt)
    warm_opt = warm_opt and lora_learner.freeze_base(warm_opt)
  if ag.frozen:  # agents that act but never train (agents/frozen.py): zero updates
    rl_opt, sft_opt = (freeze_optimizer(o, ag.mode, ag.frozen) for o in (rl_opt, sft_opt))
    warm_opt = warm_opt and freeze_optimizer(warm_opt, ag.mode, ag.frozen)
  policy = agents.rollout_policy(ag.mode, setup.model_cfg, spec.lm_graphdef, ag.num)
  strategy = STRATEGIES.get(c.rollout.strategy)
  strat_kw = dict(c.rollout.strategy_kwargs)
  # A host env (envs/host/) drives its own loop: the worker pool, two halves in flight.
  host_runner = getattr(setup.env, "runner", None)
  roll_cfg = strategy.configure(ecfg, **strat_kw)
  teacher = teacher_lib.load(c, setup, place)
  if host_runner is not None:
    roll_fn = host_runner(policy, roll_cfg, setup.pieces)
  elif c.distill.intervene > 0:  # the teacher may take over turns (rollout/intervene.py)
    roll_fn = teacher_lib.rollout_with_interventions(c, policy, setup.env, roll_cfg,
                                                     setup.pieces, teacher)
  else:
    roll_fn = make_rollout(policy, setup.env, roll_cfg, setup.pieces)
  # What the credit kernel reads must exist before anything compiles (kernel, input, env).
  needs = credit_lib.check_inputs(c.credit.name, dict(c.credit.kwargs), env=setup.env,
                                  env_name=c.env.name, critic=c.model.critic != "none",
                                  strategy=c.rollout.strategy,
                                  info_keys=None if host_runner is None else setup.env.info_keys())
  hindsight.check_env(c, setup.env)
  if c.sft.steps and c.sft.get("plans", "expert") == "route_agreement":
    from agent_rl.agents import hera
    hera.check(c, setup.env)
  baseline_fn = (credit_lib.baseline.make_baseline_rollout(policy, setup.env, ecfg, setup.pieces)
                 if needs.baseline_rollout else None)
  startup_report(c, spec, rl_opt, setup, roll_fn)

  apply_fn = agents.make_apply(ag.mode, spec.graphdef, ag.frozen)  # rows under their agent's
  objective = build_objective(c)
  # The step key also drives LoRA dropout in the loss's forward (not in the rollout's old
  # log-probs): the ratio's numerator is the dropped-out policy, as PEFT-trained TRL PPO.
  def stats_of(apply):
    return lambda params, mb, key: apply(params, mb.tokens, mb.position, mb.attention_mask,
                                         dropout_key=key, agent=mb.agent)
  lora = setup.model_cfg.lora is not None  # then no base-weight gradients are computed at all

  def loss_of(objective_fn, stats=stats_of(apply_fn)):
    """row_length -> the RL loss(params, mb, key): `row_length` is the rows' length before a
    length-bucket cut (train/buckets.py), the C of seq-mean-token-sum-norm."""
    def make(row_length):
      loss = lambda params, mb, key, counts=None: objective_fn(
          stats(params, mb, key), mb, key, row_length, counts)
      return lora_learner.frozen_loss(loss) if lora else loss
    return make

  sft_loss = sft.make_sft_loss(apply_fn)
  if lora:
    sft_loss = lora_learner.frozen_loss(sft_loss)
  reward_model = None
  if c.reward.model:  # a frozen reward model scores each rollout (agent_rl.reward.use)
    from agent_rl.reward.use import load_for_rl
    reward_model = load_for_rl(c, setup, place)
  ckpt = RunCheckpoint(os.path.join(workdir, "checkpoints"), keep=c.train.keep_checkpoints,
                       save_steps=save_steps(c))
  # Hyperparameters are bound before jit (static); the kernel compiles once per shape.
  credit_fn = jax.jit(functools.partial(credit_lib.get(c.credit.name), **dict(c.credit.kwargs)))
  mb_rows = minibatch_rows(c)
  grad_metrics = functools.partial(agents.per_agent_norms, ag.mode, num=ag.num)
  micro = int(c.train.microbatches)

  def rl_update(make_loss, opt):
    def rl_train_step(state, rows, key, row_length):  # an iteration's epochs x minibatches
      step = make_train_step(make_loss(row_length), opt, grad_metrics, microbatches=micro)
      scan = make_scan_update(step, epochs=int(c.train.epochs), minibatch_rows=int(mb_rows))
      return scan(state, rows, key)
    return jit_update(rl_train_step, spec, rl_opt)

  critic_update = None
  if warm_opt is not None:  # warm-up, pre-fit: the value term alone, the actor's optimizer holds
    value_c = c.copy_and_resolve_references()
    value_c.loss.terms = "value"
    # ... so its forward is the critic's alone (policy.value_stats: no vocabulary projection,
    # no backward through a shared trunk whose gradient the held actor would discard).
    values_fn = agents.make_apply(ag.mode, spec.graphdef, ag.frozen, values_only=True)
    critic_update = rl_update(loss_of(build_objective(value_c), stats_of(values_fn)), warm_opt)

  return phases.Run(
      c=c, workdir=workdir, setup=setup, ecfg=ecfg, spec=spec, policy=policy, rl_opt=rl_opt,
      sft_opt=sft_opt, rl_update=rl_update(loss_of(objective), rl_opt),
      sft_step=jit_step(make_train_step(sft_loss, sft_opt, microbatches=micro), spec, sft_opt),
      credit_fn=credit_fn, roll_fn=roll_fn, baseline_fn=baseline_fn, strategy=strategy,
      strategy_kwargs=strat_kw,
      uses_reference=uses_reference(c),
      teacher=teacher[:3] if teacher is not None and c.distill.coef > 0 else None,
      reward_model=reward_model, ckpt=ckpt, critic_update=critic_update,
      writer=MetricWriter.from_config(c, workdir), kill_after=kill_after,
      eval_envs=eval_variants(c, setup), counterparts=counterparts.load(c, setup, place),
      # A forward over the rollout's rows (critic, reference, teacher, hindsight) in slices of
      # a micro-batch's size (unsliced without micro-batches, as before).
      forward_chunks=minibatches_per_epoch(c) * micro if micro > 1 else 1)


def save_steps(c) -> list[int]:
  """The global steps orbax saves at: the end of SFT, every `ckpt_every` RL iterations and
  the last one (plus preemptions and improved evaluations, decided at run time)."""
  s, n, every = int(c.sft.steps), int(c.train.iterations), int(c.train.ckpt_every)
  return ([s] if s else []) + [s + i for i in range(1, n + 1) if i % every == 0 or i == n]


def initial_params(r: phases.Run):
  """Fresh params: born sharded from the seed, or `model.init_from` (a run or a HF dir)."""
  params = init_params(r.spec)
  if r.c.model.init_from:
    # In place: `dict(params, lm=...)` would turn the nnx.State into a dict whose pytree no
    # longer matches the jitted step's shardings.
    lm = pretrained.init_from(r.c, r.setup.model_cfg, r.spec.place)
    # Separate agents: every agent's copy starts as that network (agents.init may swap some).
    params["lm"] = put_agent(params["lm"], None, lm) if r.setup.agents.mode == "separate" else lm
  for k, path in enumerate(r.setup.agents.init):  # agent k from its own run (agents/frozen.py)
    if path:
      params["lm"] = put_agent(params["lm"], k, pretrained.init_agent_from(
          path, r.setup.model_cfg, r.spec.place, f"config.agents.init (agent {k})"))
  return params


def startup_report(c, spec, optimizer, setup, roll_fn) -> str:
  """Prints the mesh and per-device memory (from shapes, before compiling); refuses a config
  over `config.mesh.memory_budget_gib`."""
  place = spec.place
  opt, opt_sh = spec.opt_layout(optimizer)
  keys = jax.ShapeDtypeStruct((c.rollout.num_tasks,), jax.random.key(0).dtype)
  tasks = jax.eval_shape(batched_sampler(setup.env), keys)
  shapes = getattr(roll_fn, "eval_shape", None) or functools.partial(jax.eval_shape, roll_fn)
  batch, _ = shapes(spec.lm_params, tasks, jax.random.key(0))
  n, length = batch.tokens.shape
  rows = minibatch_rows(c) // c.train.microbatches  # one micro-batch is alive at a time
  if batch.segment_len:
    length = batch.segment_len
  if setup.agents is not None and setup.agents.mode == "separate":  # every trained agent reads
    rows *= setup.agents.num - len(setup.agents.frozen)            # every row (routing.make_apply)
  rep = memory_report(mesh=place.mesh, rules=place.rules, params=spec.params,
                      params_shardings=spec.param_shardings, optimizer=opt, opt_shardings=opt_sh,
                      model_cfg=setup.model_cfg, episodes=n, cache_len=length, rows=rows,
                      length=length, budget_gib=c.mesh.memory_budget_gib,
                      # every run evaluates (at its end at least); pass@k runs k per task
                      eval_episodes=(c.eval.get("slice_tasks", 0) or c.eval.num_tasks)
                      * max(1, c.eval.k),
                      logit_chunk=logprob_chunk(int(c.model.logprob_chunk),
                                                setup.model_cfg.vocab_size))
  if jax.process_index() == 0:
    print(rep.text(), flush=True)
  rep.check()
  return rep.text()


def _check_workdir(workdir: str) -> None:
  os.makedirs(workdir, exist_ok=True)
  if not os.access(workdir, os.W_OK):
    raise PermissionError(f"--workdir {workdir!r} is not writable")
