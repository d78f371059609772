"""Optimizers from config: AdamW (or SGD), warmup + constant/cosine, global-norm clipping,
gradient accumulation (optax.MultiSteps)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections as mlc
import optax

from agent_rl.agents.params import path_names


def make_schedule(o: mlc.ConfigDict, total_steps: int) -> optax.Schedule:
  total = max(int(o.total_steps or total_steps), 1)
  warm = int(o.warmup_steps)
  if o.schedule == "constant":
    main = optax.constant_schedule(o.lr)
  elif o.schedule == "cosine":
    main = optax.cosine_decay_schedule(o.lr, max(total - warm, 1))
  else:
    raise ValueError(f"config.optim.schedule: unknown schedule {o.schedule!r}")
  if warm <= 0:
    return main
  return optax.join_schedules([optax.linear_schedule(0.0, o.lr, warm), main], [warm])


def make_optimizer(o: mlc.ConfigDict, total_steps: int) -> optax.GradientTransformation:
  """`o` is `config.optim`; `total_steps` the number of updates (for cosine decay)."""
  sched = make_schedule(o, total_steps)
  if o.name == "adamw":
    opt = optax.adamw(sched, b1=o.b1, b2=o.b2, weight_decay=o.weight_decay)
  elif o.name == "sgd":
    opt = optax.sgd(sched)
  else:
    raise ValueError(f"config.optim.name: unknown optimizer {o.name!r}; known: adamw, sgd")
  if o.clip_norm and o.clip_norm > 0:
    opt = optax.chain(optax.clip_by_global_norm(o.clip_norm), opt)
  if o.grad_accum > 1:
    opt = optax.MultiSteps(opt, every_k_schedule=int(o.grad_accum))
  return opt


def critic_only(opt: optax.GradientTransformation, policy_key: str = "lm"
                ) -> optax.GradientTransformation:
  """`opt` restricted to the critic: the gradients of the `policy_key` subtree (the policy LM)
  are zeroed before `opt` (so clipping and the moments see the critic's alone) and its
  updates after (weight decay included), so the policy does not move. Same state as `opt`
  (one checkpoint layout for the critic warm-up and the RL updates after it)."""

  def mask(tree):
    return jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if path_names(path)[:1] == [policy_key] else x, tree)

  def update(grads, state, params=None):
    updates, state = opt.update(mask(grads), state, params)
    return mask(updates), state

  return optax.GradientTransformation(opt.init, update)
