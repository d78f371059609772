"""SFT warm start on solver demonstrations (the SFT -> RL pipeline of RAGEN, SPA, GiGPO).

Demonstrations are stored as a TFDS dataset (`agent_rl.data.demos`), replayed through the
RL episode loop by a scripted policy (`agent_rl.data.scripted`) so the SFT sequences have
exactly the RL layout, and fitted with the masked NLL on action tokens.
"""
from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl import losses
from agent_rl.data.demos import DemoBuilder, load_demos, prepare, sample_tasks
from agent_rl.data.scripted import encode_plans, scripted_policy
from agent_rl.rollout.compiled import rollout
from agent_rl.train.step import Minibatch, shifted_logprobs

# Demo task seeds live far from the RL stream and the eval seeds.
DEMO_SEED_BASE = 1_000_000


def demo_rows(c, setup, ecfg, workdir: str) -> Minibatch:
  """All SFT rows: the solver plans of `config.sft.num_demos` tasks replayed as episodes."""
  seeds = [DEMO_SEED_BASE + i for i in range(c.sft.num_demos)]
  builder = DemoBuilder(env=setup.env, env_name=c.env.name, env_kwargs=dict(c.env.kwargs),
                        seeds=seeds, data_dir=os.path.join(workdir, "data"))
  prepare(builder)
  demos = load_demos(builder)
  forced = encode_plans(setup.tokenizer, [p for _, p in demos], ecfg.max_turns,
                        ecfg.sampler.max_tokens)
  tasks = sample_tasks(setup.env, [s for s, _ in demos])
  g_cfg = dataclasses.replace(ecfg, group_size=1, gate=None, search=None,
                              sampler=dataclasses.replace(ecfg.sampler, greedy=True))
  batch, metrics = rollout(scripted_policy(setup.model_cfg.vocab_size), jnp.asarray(forced),
                           setup.env, tasks, jax.random.key(0), g_cfg, setup.pieces)
  rows = Minibatch(tokens=batch.tokens, position=batch.position,
                   attention_mask=batch.attention_mask, loss_mask=batch.loss_mask,
                   turn_index=batch.turn_index, old_logprobs=batch.logprobs,
                   advantages=jnp.zeros_like(batch.logprobs))
  if batch.segment_len:
    rows = jax.tree.map(lambda x: x.reshape(-1, batch.segment_len), rows)
  print(f"SFT demos: {len(demos)} tasks, replayed success {float(metrics['rollout/success']):.3f}",
        flush=True)
  return rows


def make_sft_loss(apply_fn):
  def loss_fn(params, mb: Minibatch, key):
    del key
    logits, _ = apply_fn(params, mb.tokens, mb.position, mb.attention_mask)
    lp, _ = shifted_logprobs(logits, mb.tokens)
    loss, m = losses.sft_loss(lp, mb.loss_mask)
    return loss, {f"sft/{k}": v for k, v in m.items()} | {"sft/loss": loss}
  return loss_fn


def sft_batches(rows: Minibatch, batch_size: int, step: int, seed: int) -> Minibatch:
  """The minibatch of SFT step `step` (a pure function of step: resumable)."""
  r = rows.tokens.shape[0]
  epoch, i = divmod(step * batch_size, r)
  perm = np.random.default_rng(seed + epoch).permutation(r)
  idx = perm[np.arange(i, i + batch_size) % r]
  return jax.tree.map(lambda x: x[idx], rows)
