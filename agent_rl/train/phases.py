"""The two phases of a run over its one TrainState: SFT warm start, then RL.

`Run` holds what does not change during a run (config, env, jitted steps, checkpoint,
writer); `Progress` is the state that does (train state, where the run is, the frozen
reference), and each phase function takes one Progress and returns the next, so nothing is
mutated behind a closure. Every random choice derives from (config.seed, phase, step), and a
checkpoint holds a whole Progress, so a run killed at any point continues exactly.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from agent_rl.agents import agent_metrics, attach_agent_return, check_checkpoint, role_terms
from agent_rl.agents.frozen import freeze_rows
from agent_rl.credit import baseline
from agent_rl.envs.tasks import draw_tasks
from agent_rl.envs.tools import tool_metrics
from agent_rl.eval.episodes import config_episodes
from agent_rl.eval.evaluate import evaluate_panels, extras_metrics
from agent_rl.objective import shapers
from agent_rl.parallel.distributed import main_process_first
from agent_rl.train import buckets, hindsight, host_games, learner, optim, prefit, sft
from agent_rl.train.checkpoint import CheckpointLayoutError, RunCheckpoint
from agent_rl.train.metrics import check_finite, progress, to_host
from agent_rl.train.state import StateSpec, TrainState, copy_tree, new_train_state


class RLBatch(NamedTuple):
  """What `rl_batch` hands the update: the training rows, the rollout's metrics, the shaped
  EpisodeBatch, the new shaper state, the update key, and the state (its critic pre-fit)."""
  rows: Any
  metrics: dict
  batch: Any
  shaper_state: dict
  key: jax.Array
  state: TrainState


class SimulatedKill(RuntimeError):
  """Raised by `run(..., kill_after=k)`: the process 'dies' after iteration k's metrics are
  written and before anything else is saved, exactly where a `kill -9` loses the most."""


class Preempted(SystemExit):
  """SIGTERM / a preemption notice: the checkpoint is saved, the process exits non-zero."""


@dataclasses.dataclass(frozen=True)
class Meta:
  """Where a run is (the checkpoint's JSON `meta`)."""
  phase: str  # "sft" | "rl"
  sft_step: int = 0
  iteration: int = 0
  best_eval_success: float = -1.0
  shaper_state: dict = dataclasses.field(default_factory=dict)  # e.g. the adaptive KL beta
  agents: str = ""  # agents.Agents.tag of the run ("" in checkpoints from before issue 21)

  @property
  def global_step(self) -> int:
    return self.sft_step + self.iteration

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, d: dict) -> "Meta":
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


@dataclasses.dataclass(frozen=True)
class Progress:
  state: TrainState
  meta: Meta
  reference: Optional[Any] = None  # frozen LM params of the KL reference (RL phase only)


@dataclasses.dataclass(frozen=True)
class Run:
  """The fixed parts of a run (built once by `train.run`)."""
  c: Any
  workdir: str
  setup: Any  # train.setup.Setup: tokenizer, env, pieces, model_cfg
  ecfg: Any  # rollout EpisodeConfig
  spec: StateSpec
  policy: Any  # rollout Policy over spec.lm_graphdef
  rl_opt: Any
  sft_opt: Any
  # (state, rows, key, row_length) -> (state, mean metrics): epochs x minibatches; row_length
  # (static) is the rows' length before a length-bucket cut (train/buckets.py)
  rl_update: Callable
  sft_step: Callable
  credit_fn: Callable
  roll_fn: Callable
  baseline_fn: Optional[Callable]  # ReMax's greedy baseline rollout, when the kernel needs it
  strategy: Any
  strategy_kwargs: dict
  uses_reference: bool
  teacher: Optional[tuple]  # (lm_graphdef, params) of the distillation teacher
  ckpt: RunCheckpoint
  writer: Any
  kill_after: Optional[int] = None
  reward_model: Optional[Any] = None  # reward.use.RewardSource of config.reward.model
  eval_envs: tuple = ()  # (name, env, prompt pieces) of each config.eval.variant_kwargs panel
  counterparts: tuple = ()  # agents.counterparts.Counterpart of each config.eval.counterparts
  forward_chunks: int = 1  # slices of the rollout rows per no-grad forward (train.microbatches)
  critic_update: Optional[Callable] = None  # rl_update's critic-only twin (train.critic_warmup)

  @property
  def sft_steps(self) -> int:
    return int(self.c.sft.steps)

  @property
  def iterations(self) -> int:
    return int(self.c.train.iterations)

  @property
  def length_bucket(self) -> int:
    """Rows cut to multiples of this many tokens (train/buckets.py); 0: whole rows."""
    return int(self.c.train.get("length_bucket", 0))


# -- shared steps -----------------------------------------------------------------------------

def evaluate_params(run: Run, params) -> dict:
  """eval/... on the run's env, eval/<name>/... on each `eval.variant_kwargs` panel and each
  `eval.counterparts` panel."""
  return evaluate_panels(run.c, run.policy, params["lm"], run.setup, run.ecfg,
                         run.spec.place.batch, run.eval_envs, run.counterparts)


def log_episodes(run: Run, params, step: int, tag: str) -> None:
  """A few greedy held-out episodes as text (prompt, actions, observations, rewards) into the
  writers and the report. Every process runs the (collective) rollout; process 0 writes."""
  c = run.c
  if c.log.episodes:
    run.writer.write_episodes(step, tag, config_episodes(
        c, run.policy, params["lm"], run.setup, run.ecfg, run.spec.place.batch, c.log.episodes))


def save(run: Run, prog: Progress, *, metrics: Optional[dict] = None, force: bool = False) -> bool:
  s = prog.state
  return run.ckpt.save(prog.meta.global_step, s.params,
                       {"opt_state": s.opt_state, "step": s.step, "rng": s.rng},
                       prog.meta.to_json(), reference=prog.reference, metrics=metrics, force=force)


def exit_if_preempted(run: Run, prog: Progress, where: str) -> None:
  """At a step boundary: on preemption save (every process at the same step) and exit."""
  if run.ckpt.preempted(prog.meta.global_step):
    if prog.meta.global_step not in run.ckpt.all_steps():  # orbax may have saved it already
      save(run, prog, force=True)
    run.ckpt.close()
    raise Preempted(f"SIGTERM: checkpoint saved{where}")


def restore_targets(run: Run) -> Callable[[dict], tuple]:
  """Abstract restore targets for a checkpoint's phase (optimizer state of that phase)."""
  def targets(meta: dict):
    try:  # raised as a layout error: never "corrupt", so the step is not moved aside
      check_checkpoint(meta.get("agents", ""), run.setup.agents, run.ckpt.directory)
    except ValueError as e:
      raise CheckpointLayoutError(str(e)) from None
    phase = Meta.from_json(meta).phase
    t = run.spec.abstract_train_state(run.rl_opt if phase == "rl" else run.sft_opt)
    ref = run.spec.abstract_params(lm_only=True) if (run.uses_reference and phase == "rl") else None
    return t.params, {"opt_state": t.opt_state, "step": t.step, "rng": t.rng}, ref
  return targets


def initial_progress(run: Run, params) -> Progress:
  """A fresh run: SFT first when configured, else straight to RL."""
  tag = run.setup.agents.tag
  if run.sft_steps:
    return Progress(new_train_state(run.spec, params, run.sft_opt, run.c.seed),
                    Meta("sft", agents=tag))
  return start_rl(run, params, Meta("rl", shaper_state=shapers.initial_state(run.c), agents=tag))


def resume(run: Run) -> Optional[Progress]:
  r = run.ckpt.restore_run(restore_targets(run))
  if r is None:
    return None
  meta = Meta.from_json(r.meta)
  print(f"resumed from checkpoint: {r.meta}", flush=True)
  state = TrainState(params=r.params, opt_state=r.opt["opt_state"], step=r.opt["step"],
                     rng=r.opt["rng"])
  return Progress(state, meta, r.reference)


def start_rl(run: Run, params, meta: Meta) -> Progress:
  """RL starts from `params` with a fresh optimizer state; the KL reference (only when a
  term or shaper uses it) is a frozen copy of exactly these params, and so is a separate
  critic's decoder with `model.critic_init=policy` (the value head stays fresh)."""
  if run.c.model.critic == "separate" and run.c.model.get("critic_init", "policy") == "policy":
    # In place (an nnx.State); each copy keeps the critic's own shardings.
    params["critic_lm"] = jax.tree.map(
        lambda p, q: p if p.sharding == q.sharding else jax.device_put(p, q.sharding),
        copy_tree(params["lm"]), params["critic_lm"])
  ref = copy_tree(params["lm"]) if run.uses_reference else None
  return Progress(new_train_state(run.spec, params, run.rl_opt, run.c.seed), meta, ref)


# -- SFT --------------------------------------------------------------------------------------

def sft_phase(run: Run, prog: Progress) -> Progress:
  """SFT up to `sft.steps` in its stages (train/sft.py `Stages`: copy rows, IWM rows, demos),
  then the switch to RL (evaluated and saved). Returns the Progress at the start of RL."""
  c, place = run.c, run.spec.place
  stages = sft.Stages.of(c, run.setup.tokenizer)
  rows, iwm = main_process_first(lambda: sft.sft_rows(
      c, run.setup, run.ecfg, run.workdir, run.policy, prog.state.params["lm"],
      run.spec.lm_graphdef, iwm_needed=prog.meta.sft_step < stages.copy_steps + stages.iwm_steps),
      "demos")
  rows = place.batch(freeze_rows(rows, run.setup.agents.frozen))
  iwm = None if iwm is None else place.batch(iwm)  # no agent's turns (checks: none frozen)
  if prog.meta.sft_step == 0:
    ev = evaluate_params(run, prog.state.params)
    run.writer.write(0, ev)
    print(f"before SFT: {ev}", flush=True)
  bar = progress(run.sft_steps, prog.meta.sft_step, "sft")
  lr_of = optim.sft_lr(c)  # the lr of the step just taken, logged beside its loss
  state, meta = prog.state, prog.meta
  while meta.sft_step < run.sft_steps:
    batch, stage = sft.stage_batch(rows, iwm, stages, c.sft.batch_size, meta.sft_step, c.seed)
    # Cut after the longest demo of the batch (train/buckets.py); the NLL is a token mean.
    mb = place.batch(buckets.cut(batch, run.length_bucket)[0])
    run.ckpt.wait()  # the step donates the state an async save may still be reading
    state, m = run.sft_step(state, mb)
    meta = dataclasses.replace(meta, sft_step=meta.sft_step + 1)
    if (stages.ordinal(meta.sft_step - 1) % c.train.log_every == 0
        or meta.sft_step == run.sft_steps):  # each kind of step every log_every of its own
      last = stages.log_row(stage, to_host(m)) | {"sft/lr": lr_of(meta.sft_step)}
      check_finite(meta.global_step, last)
      run.writer.write(meta.global_step, last)
      if bar is not None:
        bar.set_postfix(loss=f"{last.get('sft/loss', last.get('sft/copy/loss')):.3f}")
    if bar is not None:
      bar.update(1)
    exit_if_preempted(run, Progress(state, meta), " during SFT")
  if bar is not None:
    bar.close()
  # The SFT optimizer state is dropped here; RL gets a fresh one (and the reference copy).
  rl = start_rl(run, state.params, dataclasses.replace(
      meta, phase="rl", shaper_state=shapers.initial_state(c)))
  ev = evaluate_params(run, rl.state.params)
  run.writer.write(meta.global_step, ev)
  print(f"after SFT: {ev}", flush=True)
  if run.iterations == 0:  # a policy run (SFT only): what the agent does after its training
    log_episodes(run, rl.state.params, meta.global_step, "after")
  save(run, rl, force=True)
  return rl


# -- RL ---------------------------------------------------------------------------------------

def iteration_inputs(run: Run, it: int):
  """Iteration `it`'s tasks `[num_tasks]` (not yet placed on the mesh), rollout key and update
  key: pure functions of the run seed and `it` (exact resume; the resets ahead below)."""
  c = run.c
  key = jax.random.fold_in(jax.random.key(c.seed), 1000 + it)
  k_tasks, k_roll, k_upd = jax.random.split(key, 3)
  tasks = draw_tasks(run.setup.env, jax.random.split(k_tasks, c.rollout.num_tasks))
  return tasks, k_roll, k_upd


def reset_ahead(run: Run, it: int) -> None:
  """Starts iteration `it`'s game resets in a host env's workers (train/host_games.py)."""
  if it < run.iterations and host_games.can_reset_ahead(run.c, run.setup.env):
    tasks, k_roll, _ = iteration_inputs(run, it)
    host_games.reset_ahead(run.c, run.setup.env, run.strategy, tasks, k_roll)


def rl_batch(run: Run, prog: Progress, it: int):
  """Rollout, scoring (critic, reference, teacher), reward shaping, the critic's pre-fit
  (train/prefit.py) and credit of iteration `it`."""
  c, place, params = run.c, run.spec.place, prog.state.params
  tasks, k_roll, k_upd = iteration_inputs(run, it)
  tasks = place.batch(tasks)
  host_t0 = dict(getattr(run.roll_fn, "totals", {}))
  batch, rmetrics = run.strategy.run(run.roll_fn, params["lm"], tasks, k_roll, **run.strategy_kwargs)
  rmetrics = {**rmetrics, **host_games.time_metrics(run.roll_fn, host_t0),  # host games' split
              **tool_metrics(batch),  # tool calls, answer rate, EM/F1 (tool envs)
              **extras_metrics(batch, run.setup.env, "rollout")}  # e.g. route/calls/<worker>
  if run.setup.agents.num > 1:  # per-role rewards -> agent_return; per-agent metrics
    batch = attach_agent_return(batch, run.setup.env)
    rmetrics.update(agent_metrics(batch, run.setup.agents.num, role_terms(run.setup.env)))
  if run.baseline_fn is not None:  # ReMax: the greedy return of the same tasks (same reset keys)
    batch, bm = baseline.attach_baseline_return(batch, run.baseline_fn, params["lm"], tasks, k_roll)
    rmetrics = {**rmetrics, **bm}
  # The scoring passes run on rows cut after the longest filled one (train/buckets.py).
  score_kw = (dict(chunks=run.forward_chunks, length=buckets.batch_length(
      batch, run.length_bucket))
         if c.model.critic != "none" or prog.reference is not None or run.teacher is not None
         else {})
  if c.model.critic != "none":
    batch = batch.replace(values=learner.critic_values(run.spec.graphdef, params, batch,
                                                       mode=run.setup.agents.mode, **score_kw))
  if prog.reference is not None:  # each row under its agent's reference (per-agent weights)
    batch = batch.replace(ref_logprobs=learner.reference_logprobs(
        run.spec.lm_graphdef, prog.reference, batch, mode=run.setup.agents.mode, **score_kw))
  if run.teacher is not None:  # on-policy distillation: the teacher scores the student's tokens
    g, p, mode = run.teacher
    batch = batch.replace(teacher_logprobs=learner.reference_logprobs(g, p, batch, mode=mode,
                                                                      **score_kw))
  if run.reward_model is not None:  # its scores reach the rewards via the reward_model shaper
    batch = run.reward_model.attach(batch)
  batch, smetrics, shaper_state = shapers.apply_shapers(c, batch, prog.meta.shaper_state)
  # (it donates prog.state: `state` holds the same policy LM, its critic fitted)
  state, batch, pmetrics = prefit.fit_critic_first(run, prog.state, batch, k_upd, score_kw)
  rows = freeze_rows(learner.prepare_jit(batch, run.credit_fn(batch)), run.setup.agents.frozen)
  if c.hindsight.mode:  # TRIAL-style: the policy with privileged context rescores the tokens
    rows, hmetrics = hindsight.rescore(run, state.params["lm"], tasks, k_roll, batch, rows)
    rmetrics = {**rmetrics, **hmetrics}
  return RLBatch(rows, {**rmetrics, **smetrics, **pmetrics}, batch, shaper_state, k_upd, state)


def evaluate_only(run: Run, prog: Progress) -> dict:
  """A run with no SFT step and no RL iteration (e.g. a fixed policy from `model.init_from`
  or frozen `agents.init` workers, evaluated as a baseline arm): its held-out evaluation at
  step 0, written and saved with a checkpoint, so the run is finished like any other."""
  m = evaluate_params(run, prog.state.params)
  run.writer.write(0, m)
  print(f"evaluation only (no SFT step, no RL iteration): {m}", flush=True)
  save(run, dataclasses.replace(prog, meta=dataclasses.replace(
      prog.meta, best_eval_success=m["eval/success"])),
       metrics={"eval/success": m["eval/success"]}, force=True)
  return m


def rl_phase(run: Run, prog: Progress) -> dict:
  """RL iterations up to `train.iterations`, evaluating, saving and honouring preemption at
  each boundary. Returns the last metrics written."""
  c = run.c
  if run.iterations == 0 and run.sft_steps == 0:  # nothing trains: evaluate the initial policy
    return evaluate_only(run, prog)
  bar = progress(run.iterations, prog.meta.iteration, "rl")
  last: dict = {}
  warm = int(c.train.get("critic_warmup", 0))
  while prog.meta.iteration < run.iterations:
    t0 = time.perf_counter()
    rows, rmetrics, batch, shaper_state, k_upd, state = rl_batch(run, prog, prog.meta.iteration)
    # Where the iteration goes (rollout and credit vs the update): the rows are waited for,
    # which the update would do anyway.
    jax.block_until_ready(rows)
    t_rows = time.perf_counter() - t0
    it = prog.meta.iteration + 1  # the next iteration: its games reset during the update
    evaluating = it % c.train.eval_every == 0 or it == run.iterations
    if not evaluating:  # (an evaluation resets the games first: then after it)
      reset_ahead(run, it)
    run.ckpt.wait()  # the async save overlapped the rollout; the update donates the state
    # Critic warm-up (verl's trainer.critic_warmup): the value term alone, the policy fixed.
    update = run.critic_update if prog.meta.iteration < warm else run.rl_update
    # Rows cut after the longest filled row (train/buckets.py); `full` stays the loss's C.
    rows, full = buckets.cut(rows, run.length_bucket)
    state, umetrics = update(state, run.spec.place.batch(rows), k_upd, full)
    if warm:
      umetrics = {**umetrics, "train/critic_only": float(prog.meta.iteration < warm)}
    meta = dataclasses.replace(prog.meta, iteration=prog.meta.iteration + 1,
                               shaper_state=shaper_state)
    m = to_host({**rmetrics, **umetrics,
                 "rollout/reward": jnp.mean(jnp.sum(batch.reward * batch.valid, axis=1))})
    m["time/iteration_s"] = time.perf_counter() - t0
    m["time/rollout_s"] = t_rows      # rollout, scoring passes, critic pre-fit, credit
    m["time/update_s"] = m["time/iteration_s"] - t_rows  # the updates (and the save's wait)
    m["time/gen_tokens_per_s"] = m["rollout/gen_tokens"] / m["time/iteration_s"]
    m["train/row_length"] = float(rows.tokens.shape[1])  # the update's (bucketed) row length
    if c.train.halt_on_nan:
      check_finite(meta.global_step, m)
    improved = False
    if evaluating:
      m.update(evaluate_params(run, state.params))
      improved = m["eval/success"] > meta.best_eval_success
      if improved:
        meta = dataclasses.replace(meta, best_eval_success=m["eval/success"])
      reset_ahead(run, it)
    run.writer.write(meta.global_step, m)
    last = m
    prog = Progress(state, meta, prog.reference)
    if run.kill_after is not None and meta.iteration == run.kill_after:
      run.ckpt.close()
      raise SimulatedKill(f"simulated kill after iteration {run.kill_after}")
    if bar is not None:
      bar.set_postfix(success=f"{m['rollout/success']:.2f}", reward=f"{m['rollout/reward']:.2f}",
                      tok_s=f"{m['time/gen_tokens_per_s']:.0f}")
      bar.update(1)
    # Orbax decides the cadence (the run's save steps); an improved eval is always kept.
    evals = {"eval/success": m["eval/success"]} if "eval/success" in m else None
    save(run, prog, metrics=evals, force=improved)
    exit_if_preempted(run, prog, "")
  if bar is not None:
    bar.close()
  if last:  # the run did iterate: what the agent does after training
    log_episodes(run, prog.state.params, prog.meta.global_step, "after")
  return last
