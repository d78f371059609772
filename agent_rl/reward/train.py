"""Training a reward model as a run: data, Bradley-Terry / per-turn BCE steps, held-out
metrics, RunCheckpoint.

    python -m agent_rl.reward.train --config=configs/reward_model.py:tiny --workdir=runs/rm
    python -m agent_rl.reward.train --config=configs/reward_model.py:tiny,process --workdir=runs/prm

Its own entry point over the same machinery as `python -m agent_rl.train` (the base config
and its validation, `train.setup.build`, the mesh and born-sharded params, `jit_step` over one
TrainState, RunCheckpoint, the metric writer), so the RL run's files stay untouched. The model
is `reward.model.RewardModel` (the policy's decoder + RewardHead); `model.init_from` (a policy
run or a HF directory) initializes its decoder, the head starts fresh. Data (`reward.data`):
`rm.kind=outcome` trains on pairs, either ranked rollouts of `rm.policy_run` (different task
seeds for the held-out batches) or a pairs JSONL (`rm.source=pairs`, the last
`rm.held_out_frac` held out); `rm.kind=process` trains per-turn BCE on the env's step labels.
Every `rm.eval_every` steps and at the end the held-out metrics are logged (`eval/rm_*`) and
the checkpoint saved; the best held-out step is kept (RunCheckpoint's `eval/success` slot
holds the outcome RM's pairwise accuracy, the PRM's AUC). `WORKDIR/rm_report.json` has the final metrics.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, NamedTuple

import jax
import ml_collections as mlc
import numpy as np

from agent_rl.envs.tasks import draw_tasks
from agent_rl.eval.evaluate import episode_config
from agent_rl.losses.preference import bradley_terry_loss, pair_rows, prm_bce_loss
from agent_rl.parallel.placement import make_placement
from agent_rl.reward import data as rdata
from agent_rl.reward.config import STEP_LABELS
from agent_rl.reward.evals import pairwise_metrics, step_metrics
from agent_rl.reward.model import reward_model_factory, score_rows
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.policy import Policy
from agent_rl.train import pretrained
from agent_rl.train.checkpoint import RunCheckpoint
from agent_rl.train.config import validate
from agent_rl.train.metrics import MetricWriter, check_finite, to_host
from agent_rl.train.optim import phase_lr, phase_optimizer
from agent_rl.train.setup import build
from agent_rl.train.state import TrainState, init_params, jit_step, new_train_state, state_spec
from agent_rl.train.step import make_train_step

PHASE = "reward_model"
ROLLOUT_SEED_BASE = 50_000  # rollout batches of RM data, away from RL iterations and eval seeds


class PRMBatch(NamedTuple):
  rows: rdata.Rows  # [B, L]
  labels: Any  # [B, T]
  mask: Any  # [B, T] valid turns


@dataclasses.dataclass(frozen=True)
class RMData:
  """Training and held-out examples (host). outcome: `rows` are episodes/encoded
  completions and `pairs` [P, 2] index them; process: `rows` episodes with labels."""
  rows: rdata.Rows
  pairs: np.ndarray
  labels: np.ndarray
  valid: np.ndarray
  held_rows: rdata.Rows
  held_pairs: np.ndarray
  held_labels: np.ndarray
  held_valid: np.ndarray
  segment_len: int = 0


def _resolve_tokenizer(c: mlc.ConfigDict) -> mlc.ConfigDict:
  """The RM reads the policy's tokens: with no `tokenizer.path`, the policy run's (or the
  `model.init_from` run's) tokenizer."""
  src = c.rm.policy_run or (c.model.init_from if os.path.isfile(
      os.path.join(c.model.init_from or "/nonexistent", pretrained.CONFIG_FILE)) else "")
  if src and not c.tokenizer.path:
    c = c.copy_and_resolve_references()
    c.tokenizer.path = pretrained.run_tokenizer_path(src)
  return c


def rollout_episodes(c, setup, place, lm_graphdef, lm_params) -> tuple[list, int]:
  """`rm.rollout_batches + rm.held_out_batches` rollout batches of the policy as host
  Episodes, and the batches' segment_len (windowed history)."""
  ecfg = episode_config(c, setup.tokenizer)
  roll = make_rollout(Policy.from_model(setup.model_cfg, lm_graphdef), setup.env, ecfg,
                      setup.pieces)
  labeller = STEP_LABELS.get(c.env.name) if c.rm.kind == "process" else None
  out, n = [], c.rollout.num_tasks * c.rollout.group_size
  for b in range(c.rm.rollout_batches + c.rm.held_out_batches):
    k_tasks, k_roll = jax.random.split(jax.random.fold_in(jax.random.key(c.seed),
                                                          ROLLOUT_SEED_BASE + b))
    tasks = place.batch(draw_tasks(setup.env, jax.random.split(k_tasks, c.rollout.num_tasks)))
    batch, _ = roll(lm_params, tasks, k_roll)
    out.append(rdata.episodes_of(batch, None if labeller is None else labeller(batch), b * n))
  return out, batch.segment_len


def build_data(c, setup, place, spec, init_lm, workdir: str) -> RMData:
  """The RM's training / held-out examples from `config.rm` (see the module docstring)."""
  rm = c.rm
  empty = np.zeros((0, 2), np.int64)
  if rm.source == "pairs":
    recs = rdata.load_pairs(rm.pairs_path, os.path.join(workdir, "data"))
    n_held = max(1, int(round(len(recs) * rm.held_out_frac)))
    if n_held >= len(recs):
      raise ValueError(f"config.rm.pairs_path: {len(recs)} pairs leave none to train on after "
                       f"holding out {n_held} (rm.held_out_frac={rm.held_out_frac})")
    rows = rdata.encode_pairs(recs, setup.tokenizer)
    k = 2 * (len(recs) - n_held)
    tr, he = (rdata.Rows(*(x[:k] for x in rows)), rdata.Rows(*(x[k:] for x in rows)))
    seq = lambda m: np.arange(2 * m).reshape(m, 2)
    z = np.zeros((0, 1), np.float32)
    return RMData(tr, seq(k // 2), z, z, he, seq(n_held), z, z)
  if rm.policy_run:
    pol = pretrained.load_run_policy(rm.policy_run, setup.model_cfg.vocab_size, place,
                                     compute=setup.model_cfg)
    if pol.model_cfg != setup.model_cfg:
      raise ValueError(f"config.rm.policy_run: the policy of {rm.policy_run} has model "
                       f"{pol.model_cfg}, this reward model {setup.model_cfg} (vocabulary or "
                       "tokenizer differs? leave tokenizer.path empty to use the run's)")
    graphdef, params = pol.lm_graphdef, pol.params
  else:  # the RM's own initial decoder acts (a random or init_from policy)
    graphdef, params = spec.lm_graphdef, init_lm
  eps, seg = rollout_episodes(c, setup, place, graphdef, params)
  tr = rdata.concat_episodes(eps[:rm.rollout_batches])
  he = rdata.concat_episodes(eps[rm.rollout_batches:])
  paired = rm.kind != "process"  # outcome RM, DPO, KTO
  pairs = rdata.rank_pairs(tr.returns, tr.group) if paired else empty
  held = rdata.rank_pairs(he.returns, he.group) if paired else empty
  if paired and (len(pairs) == 0 or len(held) == 0):
    raise ValueError(f"config.rm.policy_run: the rollouts of {rm.policy_run or 'the initial policy'}"
                     " gave no pairs with different env returns within a group (train "
                     f"{len(pairs)}, held-out {len(held)}); raise rollout.group_size / "
                     "rm.rollout_batches or use a policy whose returns vary")
  if rm.kind == "process" and not (tr.labels * tr.valid).any():
    raise ValueError(f"config.rm.kind: no turn of the training rollouts has a positive step "
                     f"label of env {c.env.name!r}; the PRM would learn a constant")
  print(f"reward-model data: {len(tr.returns)} + {len(he.returns)} held-out episodes, "
        f"{len(pairs)} + {len(held)} pairs, mean return {tr.returns.mean():.3f}", flush=True)
  return RMData(tr.rows, pairs, tr.labels, tr.valid, he.rows, held, he.labels, he.valid, seg)


def _forward_rows(rows: rdata.Rows, seg: int):
  tok, pos, attn = rows.tokens, rows.position, rows.attention_mask
  if seg:
    tok, pos, attn = (x.reshape(-1, seg) for x in (tok, pos, attn))
  return tok, pos, attn


def make_loss(graphdef, kind: str, num_turns: int, seg: int, margin: float) -> Callable:
  """`loss(params, mb, key) -> (loss, metrics)`: Bradley-Terry on interleaved pair rows
  (outcome) or per-turn BCE on the labelled valid turns (process)."""
  def scores(params, rows):
    return score_rows(graphdef, params, *_forward_rows(rows, seg), rows.turn_index, num_turns)

  def outcome(params, mb: rdata.Rows, key):
    del key
    c, r = pair_rows(scores(params, mb).outcome)
    loss, m = bradley_terry_loss(c, r, margin=margin)
    return loss, {"rm/loss": loss, "rm/accuracy": m["accuracy"], "rm/margin": m["margin"]}

  def process(params, mb: PRMBatch, key):
    del key
    loss, m = prm_bce_loss(scores(params, mb.rows).turns, mb.labels, mb.mask)
    return loss, {"rm/loss": loss, "rm/accuracy": m["accuracy"]}

  return outcome if kind == "outcome" else process


def minibatch(d: RMData, kind: str, size: int, step: int, seed: int):
  """The examples of step `step` (a pure function of step: resumable), `size` pairs or
  episodes drawn without replacement within an epoch."""
  n = len(d.pairs) if kind == "outcome" else d.rows.tokens.shape[0]
  epoch, i = divmod(step * size, n)
  idx = np.random.default_rng(seed + epoch).permutation(n)[np.arange(i, i + size) % n]
  if kind == "outcome":
    return rdata.pair_rows(d.rows, d.pairs[idx])
  return PRMBatch(rdata.Rows(*(x[idx] for x in d.rows)), d.labels[idx], d.valid[idx].astype(np.float32))


def held_out_scores(score_fn, place, rows: rdata.Rows, chunk: int):
  """Scores of every held-out row, in fixed-size chunks (one compile), padded rows dropped."""
  n = rows.tokens.shape[0]
  outs = []
  for a in range(0, n, chunk):
    part = rdata.Rows(*(x[a:a + chunk] for x in rows))
    pad = chunk - part.tokens.shape[0]
    if pad:
      part = rdata.Rows(*(np.concatenate([x, np.repeat(x[:1], pad, 0)]) for x in part))
    s = score_fn(place.batch(part))
    outs.append(jax.tree.map(lambda v: np.asarray(v)[:chunk - pad], s))
  return jax.tree.map(lambda *v: np.concatenate(v), *outs)


def evaluate_rm(score_fn, place, d: RMData, kind: str, chunk: int) -> dict:
  s = held_out_scores(score_fn, place, d.held_rows, chunk)
  if kind == "outcome":
    m = pairwise_metrics(s.outcome[d.held_pairs[:, 0]], s.outcome[d.held_pairs[:, 1]])
  else:
    m = step_metrics(s.turns, d.held_labels, d.held_valid)
  return {f"eval/rm_{k}": v for k, v in m.items()}


def start_run(c: mlc.ConfigDict, workdir: str):
  """The start-up shared by the reward-model and offline preference runs: the workdir, the
  resolved tokenizer, the saved run config and the placement. Returns `(c, place)`."""
  os.makedirs(workdir, exist_ok=True)
  c = _resolve_tokenizer(c)
  pretrained.save_run_config(c, workdir)
  return c, make_placement(c.mesh)


def init_run(c: mlc.ConfigDict, workdir: str, place, factory):
  """Inside `place.context()`: setup, the state spec of `factory(model_cfg)` and its params,
  the decoder from `model.init_from` when set. Returns `(setup, spec, params)`."""
  setup = build(c, workdir)
  spec = state_spec(factory(setup.model_cfg), place)
  params = init_params(spec)
  if c.model.init_from:
    params["lm"] = pretrained.init_from(c, setup.model_cfg, place)
  return setup, spec, params


def train_reward_model(c: mlc.ConfigDict, workdir: str) -> dict:
  """Trains the reward model `config` describes into `workdir`; returns the last held-out
  metrics. Resumes from the newest checkpoint there."""
  validate(c)
  if c.rm.kind not in ("outcome", "process"):
    raise ValueError(f"config.rm.kind: a reward-model run trains outcome|process, got "
                     f"{c.rm.kind!r} (dpo / kto: python -m agent_rl.reward.offline)")
  c, place = start_run(c, workdir)
  rm = c.rm
  with place.context():
    setup, spec, params = init_run(c, workdir, place,
                                   lambda mcfg: reward_model_factory(mcfg, c.seed))
    d = build_data(c, setup, place, spec, params["lm"], workdir)
    opt = phase_optimizer(c, "rm")  # rm.lr, rm.warmup_steps, rm.schedule over rm.steps
    lr_of = phase_lr(c, "rm")  # the lr of the step just taken, logged as rm/lr
    loss = make_loss(spec.graphdef, rm.kind, c.rollout.max_turns, d.segment_len, rm.margin)
    step_fn = jit_step(make_train_step(loss, opt), spec, opt)
    num_turns = c.rollout.max_turns if rm.source == "rollouts" else 1
    seg = d.segment_len
    score_fn = jax.jit(lambda p, rows: score_rows(spec.graphdef, p, *_forward_rows(rows, seg),
                                                  rows.turn_index, num_turns))
    evals = sorted({s for s in range(rm.eval_every, rm.steps + 1, rm.eval_every)} | {rm.steps})
    ckpt = RunCheckpoint(os.path.join(workdir, "checkpoints"), keep=c.train.keep_checkpoints,
                         save_steps=evals)
    writer = MetricWriter.from_config(c, workdir)
    state, step = _restore(ckpt, spec, opt)
    if state is None:
      state, step = new_train_state(spec, params, opt, c.seed), 0
    writer.truncate_after(step)
    chunk = 2 * rm.batch_size
    last: dict = {}
    while step < rm.steps:
      mb = place.batch(minibatch(d, rm.kind, rm.batch_size, step, c.seed))
      ckpt.wait()
      state, m = step_fn(state, mb)
      step += 1
      m = to_host(m) | {"rm/lr": lr_of(step)}
      check_finite(step, m)
      if step in evals:
        m.update(evaluate_rm(lambda rows: score_fn(state.params, rows), place, d, rm.kind, chunk))
        last = m
        ckpt.save(step, state.params, {"opt_state": state.opt_state, "step": state.step,
                                       "rng": state.rng},
                  {"phase": PHASE, "kind": rm.kind, "rm_step": step},
                  metrics={"eval/success": _best_metric(m)}, force=True)
        print(f"reward model step {step}: " + ", ".join(
            f"{k}={v:.3f}" for k, v in m.items() if k.startswith("eval/")), flush=True)
      if step % c.train.log_every == 0 or step in evals:
        writer.write(step, m)
    ckpt.close()
    writer.close()
  if not last:  # resumed at the end: score the restored params
    with place.context():
      last = evaluate_rm(lambda rows: score_fn(state.params, rows), place, d, rm.kind, 2 * rm.batch_size)
  if jax.process_index() == 0:
    with open(os.path.join(workdir, "rm_report.json"), "w") as f:
      json.dump({"kind": rm.kind, "source": rm.source, "steps": int(rm.steps),
                 "held_out": {k: float(v) for k, v in last.items() if k.startswith("eval/")}},
                f, indent=2, sort_keys=True)
  return last


def _best_metric(m: dict) -> float:
  """What best-by-eval ranks: held-out AUC for a PRM (its accuracy rewards always predicting
  the majority label when milestones are rare), pairwise accuracy for an outcome RM."""
  auc = m.get("eval/rm_auc", float("nan"))
  return float(auc) if np.isfinite(auc) else float(m["eval/rm_accuracy"])


def _restore(ckpt: RunCheckpoint, spec, opt):
  t = spec.abstract_train_state(opt)
  r = ckpt.restore_run(lambda meta: (t.params, {"opt_state": t.opt_state, "step": t.step,
                                                "rng": t.rng}, None))
  if r is None:
    return None, 0
  if r.meta.get("phase") != PHASE:
    raise ValueError(f"{ckpt.directory}: checkpoint of phase {r.meta.get('phase')!r}, not a "
                     "reward-model run")
  st = TrainState(params=r.params, opt_state=r.opt["opt_state"], step=r.opt["step"],
                  rng=r.opt["rng"])
  return st, int(r.meta["rm_step"])


def main(argv):
  del argv
  from absl import logging
  logging.set_verbosity(logging.WARNING)
  train_reward_model(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  from absl import app, flags
  from agent_rl.train.cli import define_config_flag
  _CONFIG = define_config_flag("config", "reward-model config file (agent_rl.train.cli)")
  _WORKDIR = flags.DEFINE_string("workdir", None, "where checkpoints and metrics go")
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
