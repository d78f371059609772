"""The main job: tokenizer -> (SFT warm start) -> RL iterations -> eval, with exact resume.

    python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=/tmp/run

Every random choice derives from (config.seed, phase, step), and the checkpoint stores
the train state (params, optimizer state, step, RNG) plus the phase/iteration reached, so
a run killed at any point and restarted with the same command continues exactly.
SIGTERM (TPU preemption) saves a checkpoint and exits.
"""
from __future__ import annotations

import functools
import os
import signal
import time

import jax
import jax.numpy as jnp
import ml_collections as mlc

from agent_rl import credit as credit_lib
from agent_rl.credit.shaping import turn_kl_penalty
from agent_rl.data.demos import batched_sampler
from agent_rl.eval.evaluate import episode_config, evaluate
from agent_rl.eval.report import write_report
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.strategies import STRATEGIES
from agent_rl.train import learner, sft
from agent_rl.train.checkpoint import Checkpointer, abstract_like
from agent_rl.train.config import validate
from agent_rl.train.metrics import MetricWriter, check_finite, progress, to_host
from agent_rl.train.optim import make_optimizer
from agent_rl.parallel.distributed import main_process_first
from agent_rl.parallel.memory import report as memory_report
from agent_rl.train import pretrained
from agent_rl.train.policy import make_apply
from agent_rl.train.setup import build
from agent_rl.train.sharding import Placement, abstract_state, init_state, jit_step, make_placement
from agent_rl.train.step import TrainState, make_loss_fn, make_train_step


class _Preempted:
  """SIGTERM flag: the loop checkpoints at the next step boundary, then exits."""

  def __init__(self):
    self.hit = False
    try:
      signal.signal(signal.SIGTERM, self._on)
    except ValueError:  # not the main thread (e.g. inside some test runners)
      pass

  def _on(self, *_):
    self.hit = True


def _check_workdir(workdir: str) -> None:
  os.makedirs(workdir, exist_ok=True)
  if not os.access(workdir, os.W_OK):
    raise PermissionError(f"--workdir {workdir!r} is not writable")


class SimulatedKill(RuntimeError):
  """Raised by `run(..., kill_after=k)`: the process 'dies' after iteration k's metrics are
  written and before anything else is saved, exactly where a `kill -9` loses the most."""


def run(c: mlc.ConfigDict, workdir: str, *, kill_after: int | None = None) -> dict:
  """Runs SFT (if configured) and RL; returns the last metrics written.

  kill_after: tests of exact resume only — abort (SimulatedKill) right after RL iteration
  `kill_after` has logged its metrics, without checkpointing it.
  """
  validate(c)
  _check_workdir(workdir)
  if c.distill.coef > 0 and not c.tokenizer.path:  # the student speaks the teacher's tokens
    c = c.copy_and_resolve_references()
    c.tokenizer.path = pretrained.run_tokenizer_path(c.distill.teacher)
  pretrained.save_run_config(c, workdir)
  place = make_placement(c)
  with place.context():
    return _run(c, workdir, place, kill_after)


def startup_report(c, setup, optimizer, place: Placement, roll_fn, ecfg) -> str:
  """Prints the mesh and per-device memory (from shapes, before compiling); refuses a config
  over `config.mesh.memory_budget_gib`."""
  _, _, params, p_sh, opt, opt_sh = abstract_state(c, setup.model_cfg, optimizer, place)
  keys = jax.ShapeDtypeStruct((c.rollout.num_tasks,), jax.random.key(0).dtype)
  tasks = jax.eval_shape(batched_sampler(setup.env), keys)
  batch, _ = jax.eval_shape(roll_fn, params["lm"], tasks, jax.random.key(0))
  n, length = batch.tokens.shape
  rows = c.train.minibatch_episodes
  if batch.segment_len:
    length, rows = batch.segment_len, rows * c.rollout.max_turns
  rep = memory_report(mesh=place.mesh, rules=place.rules, params=params, params_shardings=p_sh,
                      optimizer=opt, opt_shardings=opt_sh, model_cfg=setup.model_cfg,
                      episodes=n, cache_len=length, rows=rows, length=length,
                      budget_gib=c.mesh.memory_budget_gib)
  if jax.process_index() == 0:
    print(rep.text(), flush=True)
  rep.check()
  return rep.text()


def _run(c, workdir: str, place: Placement, kill_after):
  setup = main_process_first(lambda: build(c, workdir), "build")
  ecfg = episode_config(c, setup.tokenizer)
  sft_steps, rl_iters = int(c.sft.steps), int(c.train.iterations)
  n_rows = c.rollout.num_tasks * c.rollout.group_size
  updates_per_iter = c.train.epochs * (n_rows // c.train.minibatch_episodes)
  if ecfg.history == "window":
    updates_per_iter *= c.rollout.max_turns
  optimizer = make_optimizer(c.optim, rl_iters * updates_per_iter)
  sft_opt = make_optimizer(mlc.ConfigDict(dict(c.optim.to_dict(), lr=c.sft.lr, warmup_steps=0,
                                               schedule="constant")), max(sft_steps, 1))
  graphdef, lm_graphdef, _, _, _, _ = abstract_state(c, setup.model_cfg, optimizer, place)
  policy = Policy.from_model(setup.model_cfg, lm_graphdef)
  strategy = STRATEGIES.get(c.rollout.strategy)
  strat_kw = dict(c.rollout.strategy_kwargs)
  roll_fn = make_rollout(policy, setup.env, strategy.configure(ecfg, **strat_kw), setup.pieces)
  startup_report(c, setup, optimizer, place, roll_fn, ecfg)

  graphdef, lm_graphdef, state = init_state(c, setup.model_cfg, optimizer, place)
  if c.model.init_from:
    params = state.params
    params["lm"] = pretrained.init_from(c, setup.model_cfg, place)
    state = state.replace(params=params)
  teacher = None
  if c.distill.coef > 0:
    _, t_graphdef, t_params = pretrained.load_run_policy(c.distill.teacher,
                                                         setup.model_cfg.vocab_size, place)
    teacher = (t_graphdef, t_params)
  apply_fn = make_apply(graphdef)
  rl_step = jit_step(make_train_step(make_loss_fn(apply_fn, c.loss, c.distill), optimizer),
                     state, place)
  # Independent arrays: each jitted step donates (deletes) the state it is given.
  sft_state0 = jax.tree.map(jnp.copy, state)
  sft_state0 = sft_state0.replace(opt_state=jax.jit(
      sft_opt.init, out_shardings=abstract_state(c, setup.model_cfg, sft_opt, place)[5])(
          sft_state0.params))
  sft_step = jit_step(make_train_step(sft.make_sft_loss(apply_fn), sft_opt), sft_state0, place)
  # Hyperparameters are bound before jit (static); the kernel compiles once per shape.
  credit_fn = jax.jit(functools.partial(credit_lib.get(c.credit.name), **dict(c.credit.kwargs)))

  ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=c.train.keep_checkpoints)
  best = Checkpointer(os.path.join(workdir, "checkpoint_best"), keep=1)  # best eval/success
  writer = MetricWriter(workdir)
  meta = {"phase": "sft" if sft_steps else "rl", "sft_step": 0, "iteration": 0,
          "best_eval_success": -1.0}
  restored = ckpt.restore_latest({"rl": abstract_like(state), "sft": abstract_like(sft_state0)})
  states = {"rl": state, "sft": sft_state0}
  if restored is not None:
    _, states, meta = restored
    print(f"resumed from checkpoint: {meta}", flush=True)
  global_step = lambda: meta["sft_step"] + meta["iteration"]
  writer.truncate_after(global_step())
  pre = _Preempted()
  last: dict = {}

  def close_checkpointers():
    ckpt.close()
    best.close()

  def save(force=False):
    ckpt.save(global_step(), states, dict(meta), force=force)

  def do_eval():
    params = states["rl"].params if meta["phase"] == "rl" else states["sft"].params
    m = to_host(evaluate(policy, params["lm"], setup.env, setup.pieces, ecfg,
                         num_tasks=c.eval.num_tasks, seed=c.eval.seed, k=c.eval.k,
                         greedy=c.eval.greedy, place=place.batch))
    if meta["phase"] == "rl" and m["eval/success"] > meta["best_eval_success"]:
      meta["best_eval_success"] = m["eval/success"]
      best.save(global_step(), states, dict(meta), force=True)
    return m

  # -- SFT warm start ------------------------------------------------------------------
  if meta["phase"] == "sft":
    rows = place.batch(main_process_first(lambda: sft.demo_rows(c, setup, ecfg, workdir), "demos"))
    if meta["sft_step"] == 0:
      ev = do_eval()
      writer.write(0, ev)
      print(f"before SFT: {ev}", flush=True)
    bar = progress(sft_steps, meta["sft_step"], "sft")
    while meta["sft_step"] < sft_steps:
      mb = place.batch(sft.sft_batches(rows, c.sft.batch_size, meta["sft_step"], c.seed))
      ckpt.wait()  # the step donates the state an async save may still be reading
      best.wait()
      states["sft"], m = sft_step(states["sft"], mb)
      meta["sft_step"] += 1
      if meta["sft_step"] % c.train.log_every == 0 or meta["sft_step"] == sft_steps:
        last = to_host(m)
        check_finite(global_step(), last)
        writer.write(global_step(), last)
        if bar is not None:
          bar.set_postfix(loss=f"{last['sft/loss']:.3f}")
      if bar is not None:
        bar.update(1)
      if pre.hit:
        save(force=True)
        close_checkpointers()
        raise SystemExit("SIGTERM: checkpoint saved during SFT")
    if bar is not None:
      bar.close()
    # RL starts from the SFT weights with a fresh optimizer state.
    # (A copy: the RL step donates its params, and the SFT state stays in the checkpoint.)
    params = jax.tree.map(jnp.copy, states["sft"].params)
    states["rl"] = states["rl"].replace(params=params, opt_state=optimizer.init(params))
    meta["phase"] = "rl"
    ev = do_eval()
    writer.write(global_step(), ev)
    print(f"after SFT: {ev}", flush=True)
    save(force=True)

  # -- RL ------------------------------------------------------------------------------
  # The KL reference is the policy RL started from: the SFT result, else the initial
  # weights (re-derived from the seed, so a resumed run gets the same reference).
  use_ref = c.loss.kl_coef > 0 or c.loss.kl_in_reward > 0
  ref_params = None
  if use_ref:
    ref_params = (states["sft"].params["lm"] if sft_steps else
                  init_state(c, setup.model_cfg, optimizer, place)[2].params["lm"])
  base = jax.random.key(c.seed)
  bar = progress(rl_iters, meta["iteration"], "rl")
  while meta["iteration"] < rl_iters:
    it = meta["iteration"]
    t0 = time.perf_counter()
    k_it = jax.random.fold_in(base, 1000 + it)
    k_tasks, k_roll, k_upd = jax.random.split(k_it, 3)
    tasks = place.batch(batched_sampler(setup.env)(jax.random.split(k_tasks, c.rollout.num_tasks)))
    batch, rmetrics = strategy.run(roll_fn, states["rl"].params["lm"], tasks, k_roll, **strat_kw)
    if c.model.critic != "none":
      batch = batch.replace(values=learner.critic_values(graphdef, states["rl"].params, batch))
    if use_ref:
      batch = batch.replace(ref_logprobs=learner.reference_logprobs(lm_graphdef, ref_params, batch))
      if c.loss.kl_in_reward > 0:  # verl's fixed controller: r' = r - beta * KL
        batch, kl_r = turn_kl_penalty(batch, c.loss.kl_in_reward, kl_penalty=c.loss.kl_type)
        rmetrics = {**rmetrics, "rollout/kl_in_reward": kl_r}
    if teacher is not None:  # on-policy distillation: the teacher scores the student's tokens
      batch = batch.replace(teacher_logprobs=learner.reference_logprobs(*teacher, batch))
    cr = credit_fn(batch)
    rows = learner.prepare_jit(batch, cr)
    ckpt.wait()  # the async save overlapped the rollout; the update donates the state
    best.wait()
    states["rl"], umetrics = learner.update(
        rl_step, states["rl"], rows, k_upd, epochs=c.train.epochs,
        minibatch_rows=c.train.minibatch_episodes * (c.rollout.max_turns if batch.segment_len else 1),
        place=place.batch)
    meta["iteration"] += 1
    m = to_host({**rmetrics, **umetrics,
                 "rollout/reward": jnp.mean(jnp.sum(batch.reward * batch.valid, axis=1))})
    m["time/iteration_s"] = time.perf_counter() - t0
    m["time/gen_tokens_per_s"] = m["rollout/gen_tokens"] / m["time/iteration_s"]
    if c.train.halt_on_nan:
      check_finite(global_step(), m)
    if meta["iteration"] % c.train.eval_every == 0 or meta["iteration"] == rl_iters:
      m.update(do_eval())
    writer.write(global_step(), m)
    last = m
    if kill_after is not None and meta["iteration"] == kill_after:
      close_checkpointers()
      raise SimulatedKill(f"simulated kill after iteration {kill_after}")
    if bar is not None:
      bar.set_postfix(success=f"{m['rollout/success']:.2f}", reward=f"{m['rollout/reward']:.2f}",
                      tok_s=f"{m['time/gen_tokens_per_s']:.0f}")
      bar.update(1)
    if meta["iteration"] % c.train.ckpt_every == 0 or meta["iteration"] == rl_iters or pre.hit:
      save(force=True)
    if pre.hit:
      close_checkpointers()
      raise SystemExit("SIGTERM: checkpoint saved")
  if bar is not None:
    bar.close()
  close_checkpointers()
  writer.close()
  if jax.process_index() == 0 and os.path.exists(os.path.join(workdir, "metrics.jsonl")):
    write_report(workdir)
  return last
