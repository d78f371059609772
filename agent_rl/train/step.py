"""The jitted RL update: `train_step(state, minibatch) -> (state, metrics)`.

Pure function over an explicit TrainState pytree, jitted once per (shape, config) with the
state donated. The policy loss, its aggregation mode and hyperparameters come from
`config.loss` through the losses registry; advantages arrive at turn or token level and are
broadcast to tokens here (the `[N, L]` advantage array of turn-level kernels is never
materialized outside the step).

Token conventions (EpisodeBatch, compacted): a token at position t is predicted by the
logits at t-1; `loss_mask[:, t]` marks policy-generated tokens; `logprobs[:, t]` is the
behaviour log-prob of token t.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agent_rl import losses


@struct.dataclass
class TrainState:
  params: Any
  opt_state: Any
  step: jax.Array  # i32 scalar: number of optimizer updates applied
  rng: jax.Array  # u32 [2] key data for loss-side randomness (clip-cov selection)


class Minibatch(NamedTuple):
  """Token-level arrays the update needs, all `[B, L]` (turn advantages `[B, T]`)."""
  tokens: jax.Array
  position: jax.Array
  attention_mask: jax.Array
  loss_mask: jax.Array
  turn_index: jax.Array
  old_logprobs: jax.Array
  advantages: jax.Array  # [B, L] token level
  returns: Optional[jax.Array] = None  # [B, L] value targets (critic)
  old_values: Optional[jax.Array] = None  # [B, L]
  ref_logprobs: Optional[jax.Array] = None  # [B, L]
  teacher_logprobs: Optional[jax.Array] = None  # [B, L] distillation teacher's, sampled tokens


def shifted_logprobs(logits: jax.Array, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Log-prob and entropy of token t under the logits at t-1; position 0 gets 0.

  Args:
    logits: `[B, L, V]`. tokens: `[B, L]` i32.
  Returns:
    logprobs `[B, L]` f32, entropy `[B, L]` f32.
  """
  # Score every position against the next token and shift the [B, L] results, rather than
  # slicing the [B, L, V] logits (a copy of the largest activation, and of its gradient).
  lg = logits.astype(jnp.float32)
  lse = jax.nn.logsumexp(lg, axis=-1)
  nxt = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)
  lp_next = jnp.take_along_axis(lg, nxt[..., None], axis=-1)[..., 0] - lse
  p = jax.nn.softmax(lg, axis=-1)
  ent_next = lse - jnp.sum(p * lg, axis=-1)
  pad = jnp.zeros((tokens.shape[0], 1), jnp.float32)
  return (jnp.concatenate([pad, lp_next[:, :-1]], 1),
          jnp.concatenate([pad, ent_next[:, :-1]], 1))


def make_loss_fn(apply_fn: Callable, loss_cfg: Any, distill_cfg: Any = None) -> Callable:
  """Builds `loss_fn(params, mb, key) -> (loss, metrics)`.

  apply_fn(params, tokens, positions, valid) -> (logits [B,L,V], values [B,L] or None).
  loss_cfg: `config.loss` (name, agg_mode, kwargs, entropy_coef, kl_coef, kl_type,
  value_coef, value_clip).
  distill_cfg: `config.distill` (coef, mode, task_advantages): on-policy distillation to the
  teacher log-probs in `mb.teacher_logprobs` (Agarwal et al., 2024, GKD, arXiv:2306.13649),
  either as the sampled reverse-KL loss (mode="loss"; gradient sg(logπ − logπT)·∇logπ) or as a
  per-token advantage coef·sg(logπT − logπ_old) added to the task advantages and optimized by
  the configured policy loss with its ratio clipping (mode="advantage", Thinking Machines'
  recipe). `task_advantages=False` drops the RL signal: pure distillation.
  """
  pg_fn = losses.get(loss_cfg.name)
  pg_kwargs = dict(loss_cfg.kwargs)
  agg = loss_cfg.agg_mode
  d = distill_cfg if (distill_cfg is not None and distill_cfg.coef > 0) else None
  pg_weight = 1.0 if (d is None or d.task_advantages or d.mode == "advantage") else 0.0

  def loss_fn(params, mb: Minibatch, key):
    logits, values = apply_fn(params, mb.tokens, mb.position, mb.attention_mask)
    lp, ent = shifted_logprobs(logits, mb.tokens)
    mask = mb.loss_mask.astype(jnp.float32)
    adv = mb.advantages
    distill_metrics = {}
    if d is not None:
      if mb.teacher_logprobs is None:
        raise ValueError("config.distill.coef > 0 but the minibatch has no teacher log-probs")
      gap = losses.reverse_kl_advantage(mb.old_logprobs, mb.teacher_logprobs, mask)
      distill_metrics["distill/reverse_kl"] = losses.agg_loss(-gap, mask, agg)
      if d.mode == "advantage":
        adv = (adv if d.task_advantages else jnp.zeros_like(adv)) + d.coef * gap
    pg, metrics = pg_fn(lp, mb.old_logprobs, adv, mask, loss_agg_mode=agg,
                        key=key, turn_index=mb.turn_index, **pg_kwargs)
    metrics = {f"loss/{k}": v for k, v in metrics.items()} | distill_metrics
    total = pg_weight * pg
    if d is not None and d.mode == "loss":
      kl, _ = losses.sampled_kl_loss(lp, mb.teacher_logprobs, mask, direction="reverse",
                                     loss_agg_mode=agg)
      total = total + d.coef * kl
    entropy = losses.agg_loss(ent, mask, agg)
    metrics["loss/entropy"] = entropy
    if loss_cfg.entropy_coef:
      total = total - loss_cfg.entropy_coef * entropy
    if loss_cfg.kl_coef and mb.ref_logprobs is not None:
      kl = losses.agg_loss(losses.kl_penalty(lp, mb.ref_logprobs, loss_cfg.kl_type), mask, agg)
      metrics["loss/kl_ref"] = kl
      total = total + loss_cfg.kl_coef * kl
    if values is not None and mb.returns is not None:
      vl, vm = losses.value_loss(values, mb.returns, mb.old_values, mask,
                                 cliprange_value=loss_cfg.value_clip, loss_agg_mode=agg)
      metrics.update({f"loss/{k}": v for k, v in vm.items()})
      metrics["loss/value"] = vl
      total = total + loss_cfg.value_coef * vl
    metrics["loss/policy"] = pg
    metrics["loss/total"] = total
    return total, metrics

  return loss_fn


def make_train_step(loss_fn: Callable, optimizer: optax.GradientTransformation) -> Callable:
  """`train_step(state, mb) -> (state, metrics)` (not yet jitted: the caller jits it with
  its shardings and `donate_argnums=0`)."""

  def train_step(state: TrainState, mb: Minibatch):
    key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, mb, key)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics["grad/norm"] = optax.global_norm(grads)
    metrics["param/norm"] = optax.global_norm(params)
    return state.replace(params=params, opt_state=opt_state, step=state.step + 1), metrics

  return train_step
