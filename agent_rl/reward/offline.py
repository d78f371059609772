"""Offline preference baselines: DPO / KTO on the reward-model pair data, as a run.

    python -m agent_rl.reward.offline --config=configs/reward_model.py:tiny,dpo --workdir=runs/dpo \
        --config.rm.policy_run=runs/sokoban_tiny --config.model.init_from=runs/sokoban_tiny

The same pairs as an outcome RM (`reward.train.build_data`: ranked rollouts of `rm.policy_run`
or a pairs JSONL) train the *policy* with the registered loss term `dpo` or `kto`
(`objective.preference_terms`; `rm.kind` picks which, `loss.terms` must list it with a
coefficient in `loss.term_kwargs`), against a frozen copy of the initial policy as the
reference (its per-token log-probs computed once for every row). Rows keep the pair layout
(chosen, rejected) the DPO term reads; KTO reads chosen as desirable (+1 advantages) and
rejected as undesirable (-1). Held-out: the implicit-reward pairwise accuracy
(beta-free sign of the log-ratio margin) on held-out pairs, and the policy's held-out env
success (`eval/success`, the RL runs' evaluation), before and after. Checkpoints are
RunCheckpoint's (the policy under `lm`: `train.evaluate` / export / `model.init_from` read it).
"""
from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from agent_rl.eval.evaluate import episode_config, evaluate
from agent_rl.objective import Minibatch, build_objective
from agent_rl.objective.terms import TERMS, term_names
from agent_rl.reward import data as rdata
from agent_rl.reward.train import _forward_rows, build_data, held_out_scores, init_run, start_run
from agent_rl.rollout.policy import Policy
from agent_rl.train.checkpoint import RunCheckpoint
from agent_rl.train.config import validate
from agent_rl.train.metrics import MetricWriter, check_finite, to_host
from agent_rl.train.optim import phase_lr, phase_optimizer
from agent_rl.train.policy import make_apply, policy_token_stats
from agent_rl.train.setup import model_factory
from agent_rl.train.state import copy_tree, jit_step, new_train_state
from agent_rl.train.step import make_train_step

PHASE = "preference"


class PrefRows(NamedTuple):
  rows: rdata.Rows  # [2P, L] interleaved (chosen, rejected)
  ref_logprobs: Any  # [2P, L] the frozen reference's


def check_term(c) -> None:
  kind = c.rm.kind
  if kind not in term_names(c) or not TERMS.get(kind).active(c):
    raise ValueError(f"config.loss.terms: rm.kind={kind!r} trains with the {kind!r} loss term; "
                     f"list it in loss.terms with a coefficient (loss.term_kwargs.{kind}=1.0), "
                     f"got terms {c.loss.terms!r}")


def _minibatch(rows: rdata.Rows, ref: np.ndarray, pairs: np.ndarray, size: int, step: int,
               seed: int) -> PrefRows:
  epoch, i = divmod(step * size, len(pairs))
  idx = np.random.default_rng(seed + epoch).permutation(len(pairs))[np.arange(i, i + size) % len(pairs)]
  order = pairs[idx].reshape(-1)  # whole pairs: the DPO term reads rows 2i / 2i+1
  return PrefRows(rdata.Rows(*(x[order] for x in rows)), ref[order])


def make_loss(apply_fn, objective):
  def loss(params, mb: PrefRows, key):
    r = mb.rows
    tok, pos, attn = r.tokens, r.position, r.attention_mask
    agent = (r.turn_index >= 0).astype(jnp.float32)
    sign = jnp.where(jnp.arange(tok.shape[0]) % 2 == 0, 1.0, -1.0)[:, None]
    batch = Minibatch(tokens=tok, position=pos, attention_mask=attn, loss_mask=agent,
                      turn_index=r.turn_index, old_logprobs=mb.ref_logprobs,
                      advantages=sign * agent, ref_logprobs=mb.ref_logprobs)
    return objective(apply_fn(params, tok, pos, attn), batch, key)
  return loss


def train_preference_policy(c: mlc.ConfigDict, workdir: str) -> dict:
  """DPO / KTO of the policy on the pair data of `config.rm`; returns the final metrics."""
  validate(c)
  if c.rm.kind not in ("dpo", "kto"):
    raise ValueError(f"config.rm.kind: the offline preference run trains dpo|kto, got "
                     f"{c.rm.kind!r} (outcome / process RMs: python -m agent_rl.reward.train)")
  check_term(c)
  c, place = start_run(c, workdir)
  rm = c.rm
  with place.context():
    setup, spec, params = init_run(c, workdir, place, lambda mcfg: model_factory(c, mcfg))
    ref = copy_tree(params["lm"])
    d = build_data(c, setup, place, spec, params["lm"], workdir)
    seg = d.segment_len
    lp_fn = jax.jit(lambda p, r: policy_token_stats(spec.lm_graphdef, p, *_forward_rows(r, seg))[0]
                    .reshape(r.tokens.shape))
    chunk = 2 * rm.batch_size
    ref_tr = held_out_scores(lambda r: lp_fn(ref, r), place, d.rows, chunk)
    ref_he = held_out_scores(lambda r: lp_fn(ref, r), place, d.held_rows, chunk)
    opt = phase_optimizer(c, "rm")  # rm.lr, rm.warmup_steps, rm.schedule over rm.steps
    lr_of = phase_lr(c, "rm")  # the lr of the step just taken, logged as rm/lr
    step_fn = jit_step(make_train_step(make_loss(make_apply(spec.graphdef), build_objective(c)),
                                       opt), spec, opt)
    ecfg = episode_config(c, setup.tokenizer)
    policy = Policy.from_model(setup.model_cfg, spec.lm_graphdef)

    def held_out(p) -> dict:
      lp = held_out_scores(lambda r: lp_fn(p["lm"], r), place, d.held_rows, chunk)
      agent = d.held_rows.turn_index >= 0
      ratio = ((lp - ref_he) * agent).sum(axis=1)
      h = ratio[d.held_pairs[:, 0]] - ratio[d.held_pairs[:, 1]]
      ev = to_host(evaluate(policy, p["lm"], setup.env, setup.pieces, ecfg,
                            num_tasks=c.eval.num_tasks, seed=c.eval.seed, k=c.eval.k,
                            greedy=c.eval.greedy, place=place.batch,
                            slice_tasks=c.eval.get("slice_tasks", 0)))
      return {"eval/pref_accuracy": float(np.mean((h > 0) + 0.5 * (h == 0))), **ev}

    writer = MetricWriter.from_config(c, workdir)
    ckpt = RunCheckpoint(os.path.join(workdir, "checkpoints"), keep=c.train.keep_checkpoints,
                         save_steps=[rm.steps])
    first = held_out(params)
    writer.write(0, first)
    print(f"before {rm.kind}: {first}", flush=True)
    state = new_train_state(spec, params, opt, c.seed)
    last: dict = {}
    for step in range(1, rm.steps + 1):
      mb = place.batch(_minibatch(d.rows, ref_tr, d.pairs, rm.batch_size, step - 1, c.seed))
      state, m = step_fn(state, mb)
      m = to_host(m) | {"rm/lr": lr_of(step)}
      check_finite(step, m)
      if step % rm.eval_every == 0 or step == rm.steps:
        m.update(held_out(state.params))
        ckpt.save(step, state.params, {"opt_state": state.opt_state, "step": state.step,
                                       "rng": state.rng}, {"phase": PHASE, "kind": rm.kind},
                  metrics={"eval/success": m["eval/success"]}, force=True)
        print(f"{rm.kind} step {step}: " + ", ".join(
            f"{k}={v:.3f}" for k, v in m.items() if k.startswith("eval/")), flush=True)
      if step % c.train.log_every == 0 or step == rm.steps:
        writer.write(step, m)
      last = m
    ckpt.close()
    writer.close()
  return {**{f"before/{k}": v for k, v in first.items()}, **last}


if __name__ == "__main__":
  from absl import app, flags
  from agent_rl.train.cli import define_config_flag
  _CONFIG = define_config_flag("config", "preference config file (agent_rl.train.cli)")
  _WORKDIR = flags.DEFINE_string("workdir", None, "where checkpoints and metrics go")
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(lambda argv: train_preference_policy(_CONFIG.value, _WORKDIR.value))
