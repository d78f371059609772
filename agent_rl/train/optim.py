"""Optimizers from config: AdamW (or SGD), warmup + constant/cosine, global-norm clipping,
gradient accumulation (optax.MultiSteps)."""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections as mlc
import optax

from agent_rl.agents.params import path_names


def make_schedule(o: mlc.ConfigDict, total_steps: int, field: str = "optim") -> optax.Schedule:
  """lr at update `count`: 0 -> lr linearly over `warmup_steps`, then constant or cosine decay to
  0 at `total_steps` (`o.total_steps` when set). `field` names the config block in errors."""
  total = max(int(o.total_steps or total_steps), 1)
  warm = int(o.warmup_steps)
  if o.schedule == "constant":
    main = optax.constant_schedule(o.lr)
  elif o.schedule == "cosine":
    main = optax.cosine_decay_schedule(o.lr, max(total - warm, 1))
  else:
    raise ValueError(f"config.{field}.schedule: unknown schedule {o.schedule!r}")
  if warm <= 0:
    return main
  return optax.join_schedules([optax.linear_schedule(0.0, o.lr, warm), main], [warm])


def make_optimizer(o: mlc.ConfigDict, total_steps: int,
                   field: str = "optim") -> optax.GradientTransformation:
  """`o` is `config.optim`; `total_steps` the number of updates (for cosine decay)."""
  sched = make_schedule(o, total_steps, field)
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


def _phase_optim(c: mlc.ConfigDict, field: str) -> mlc.ConfigDict:
  """config.optim as a phase with its own lr schedule uses it (`field`: "sft", the SFT phase;
  "rm", a reward-model run): AdamW betas, weight decay, clipping and gradient accumulation are
  optim's; the lr, warm-up and schedule are the phase's own (`<field>.lr`,
  `<field>.warmup_steps`, `<field>.schedule` spanning `<field>.steps`, as verl's SFT trainer
  and OpenRLHF's reward-model trainer warm up and decay their own lr), and the RL schedule's
  `optim.total_steps` and warm-up do not reach it."""
  s = c[field]
  return mlc.ConfigDict(dict(c.optim.to_dict(), lr=s.lr, warmup_steps=s.warmup_steps,
                             schedule=s.schedule, total_steps=0))


def _phase_updates(c: mlc.ConfigDict, field: str) -> int:
  """Optimizer updates in a phase: one per `optim.grad_accum` steps (optax.MultiSteps)."""
  return max(int(c[field].steps) // max(int(c.optim.grad_accum), 1), 1)


def check_phase_schedule(c: mlc.ConfigDict, field: str, need: Callable) -> None:
  """The checks of a phase's own schedule (`_phase_optim`), each naming its field;
  `need(cond, field, msg)` raises ValueError("config.<field>: msg")."""
  s = c[field]
  need(s.schedule in ("constant", "cosine"), f"{field}.schedule",
       f"must be constant|cosine, got {s.schedule!r}")
  ups = s.steps // max(c.optim.grad_accum, 1)  # the phase's optimizer updates
  need(isinstance(s.warmup_steps, int) and not isinstance(s.warmup_steps, bool)
       and 0 <= s.warmup_steps and (s.warmup_steps < ups or not s.steps),
       f"{field}.warmup_steps", f"must be an int in [0, {ups}) (the phase's updates: "
       f"{field}.steps / optim.grad_accum), got {s.warmup_steps!r}")


def phase_optimizer(c: mlc.ConfigDict, field: str) -> optax.GradientTransformation:
  """The optimizer of phase `field` ("sft" | "rm"; `_phase_optim`'s settings)."""
  return make_optimizer(_phase_optim(c, field), _phase_updates(c, field), field=field)


def phase_lr(c: mlc.ConfigDict, field: str) -> Callable[[int], float]:
  """Step (1-based) of phase `field` -> the lr of the update it feeds, as `phase_optimizer`
  applies it."""
  sched = make_schedule(_phase_optim(c, field), _phase_updates(c, field), field=field)
  k = max(int(c.optim.grad_accum), 1)
  return lambda step: float(sched((step - 1) // k))


def sft_optimizer(c: mlc.ConfigDict) -> optax.GradientTransformation:
  """The SFT phase's optimizer (`sft.lr`, `sft.warmup_steps`, `sft.schedule`)."""
  return phase_optimizer(c, "sft")


def sft_lr(c: mlc.ConfigDict) -> Callable[[int], float]:
  """SFT step (1-based) -> the lr of the update it feeds (logged as sft/lr)."""
  return phase_lr(c, "sft")


def _actor_or_critic(policy_key: str):
  """params -> "actor" on the `policy_key` subtree (the policy LM), "critic" elsewhere."""
  return lambda params: jax.tree_util.tree_map_with_path(
      lambda path, _: "actor" if path_names(path)[:1] == [policy_key] else "critic", params)


def actor_critic(actor: optax.GradientTransformation, critic: optax.GradientTransformation,
                 policy_key: str = "lm") -> optax.GradientTransformation:
  """verl's two optimizers in one: `actor` on the policy LM (params[policy_key]) and `critic` on
  the rest (value head, separate critic), each with its own state: moments, step count (so its
  own schedule position) and gradient clipping. Used with a critic warm-up (critic_only)."""
  return optax.multi_transform({"actor": actor, "critic": critic}, _actor_or_critic(policy_key))


def _hold(opt: optax.GradientTransformation) -> optax.GradientTransformation:
  """`opt`'s state, left as it is, and zero updates."""
  return optax.GradientTransformation(
      opt.init, lambda grads, state, params=None: (jax.tree.map(jnp.zeros_like, grads), state))


def critic_only(actor: optax.GradientTransformation, critic: optax.GradientTransformation,
                policy_key: str = "lm") -> optax.GradientTransformation:
  """actor_critic(actor, critic) during the critic warm-up (verl's trainer.critic_warmup): the
  critic's optimizer steps, the actor's holds its state (moments and step count unchanged, so
  its schedule starts when it first trains) and updates the policy LM by zero (no weight
  decay). Same state tree as actor_critic: one checkpoint layout across the switch. The actor's
  gradients never reach the critic's clipping (separate optimizers, as in verl)."""
  return optax.multi_transform({"actor": _hold(actor), "critic": critic},
                               _actor_or_critic(policy_key))
