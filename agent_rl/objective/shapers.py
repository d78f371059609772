"""Reward shapers: registered transforms of the EpisodeBatch's turn rewards, before credit.

    batch, metrics, state = apply_shapers(config, batch, state)     # host side, per iteration

`config.reward.shapers` lists them in order (comma-separated); each is enabled by its own
coefficient (0 = off), like the loss terms. `state` is a small dict of host floats that a
shaper carries across iterations (the adaptive KL controller's beta); the run saves it in the
checkpoint's meta, so a resumed run continues with the same coefficient.

Registered: `kl_in_reward` (r' = r - beta KL per turn, beta fixed or adaptive: Ziegler et al.
2019, verl `apply_kl_penalty` / `FixedKLController` / `AdaptiveKLController`; ALGORITHMS.md
§1.8), `overlong` (DAPO's soft overlong punishment, §1.12), `reward_weights` (the turn reward
recomputed as a weighted sum of the env's `reward_terms/<name>` extras).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax.numpy as jnp

from agent_rl.credit import shaping
from agent_rl.registry import Registry
from agent_rl.rollout.batch import EpisodeBatch


@dataclasses.dataclass(frozen=True)
class Shaper:
  fn: Callable[[EpisodeBatch, dict, Any], tuple[EpisodeBatch, dict, dict]]
  enabled: Callable[[Any], bool]
  needs: tuple[str, ...] = ()  # EpisodeBatch fields that must not be None


SHAPERS = Registry("reward shaper")


def register_shaper(name: str, *, enabled: Callable[[Any], bool], needs: tuple[str, ...] = ()):
  """Decorator: `fn(batch, state, c) -> (batch, metrics, state updates)` as shaper `name`."""
  def add(fn):
    SHAPERS.register(name, Shaper(fn=fn, enabled=enabled, needs=needs))
    return fn
  return add


def shaper_names(c) -> list[str]:
  names = [n.strip() for n in str(c.reward.shapers).split(",") if n.strip()]
  for n in names:
    if n not in SHAPERS:
      raise ValueError(f"config.reward.shapers: unknown reward shaper {n!r}; known: "
                       f"{', '.join(SHAPERS.names())}")
  return names


def active_shapers(c) -> list[str]:
  return [n for n in shaper_names(c) if SHAPERS.get(n).enabled(c)]


def needs_reference(c) -> bool:
  """Whether an enabled shaper scores the batch under the frozen reference policy."""
  return any("ref_logprobs" in SHAPERS.get(n).needs for n in active_shapers(c))


def initial_state(c) -> dict:
  return {"kl_beta": float(c.loss.kl_in_reward)}


def apply_shapers(c, batch: EpisodeBatch, state: dict) -> tuple[EpisodeBatch, dict, dict]:
  """Applies the enabled shapers in order; returns (batch, metrics, new state)."""
  metrics: dict = {}
  state = dict(state)
  for n in active_shapers(c):
    s = SHAPERS.get(n)
    for f in s.needs:
      if getattr(batch, f) is None:
        raise ValueError(f"config.reward.shapers: {n!r} needs batch.{f}, which is None")
    batch, m, upd = s.fn(batch, state, c)
    metrics.update(m)
    state.update(upd)
  return batch, metrics, state


@register_shaper("kl_in_reward", enabled=lambda c: c.loss.kl_in_reward > 0,
                 needs=("ref_logprobs",))
def kl_in_reward(batch: EpisodeBatch, state: dict, c):
  """Each turn's reward loses beta x (its tokens' summed KL to the reference); beta starts at
  `loss.kl_in_reward` and follows `reward.kl_controller` (fixed | adaptive)."""
  beta = state["kl_beta"]
  batch, kl = shaping.turn_kl_penalty(batch, jnp.float32(beta), kl_penalty=c.loss.kl_type)
  upd = shaping.KL_CONTROLLERS.get(c.reward.kl_controller)
  kw = (dict(target_kl=c.reward.kl_target, horizon=c.reward.kl_horizon)
        if c.reward.kl_controller == "adaptive" else {})
  new_beta = float(upd(beta, float(kl), batch.num_episodes, **kw))
  return batch, {"rollout/kl_in_reward": kl, "rollout/kl_beta": beta}, {"kl_beta": new_beta}


@register_shaper("overlong", enabled=lambda c: c.reward.overlong_buffer > 0)
def overlong(batch: EpisodeBatch, state: dict, c):
  """DAPO's overlong penalty on the last turn: 0 up to L_max - L_buf generated tokens, then
  linear to -`reward.overlong_penalty` at L_max (`reward.overlong_max_length`, 0 = the
  rollout's budget max_turns x max_action_tokens)."""
  del state
  l_max = int(c.reward.overlong_max_length or c.rollout.max_turns * c.rollout.max_action_tokens)
  before = jnp.sum(batch.reward * batch.valid)
  out = shaping.apply_overlong_penalty(batch, max_response_length=l_max,
                                       overlong_buffer_len=int(c.reward.overlong_buffer),
                                       penalty_factor=c.reward.overlong_penalty)
  pen = (jnp.sum(out.reward * out.valid) - before) / batch.num_episodes
  return out, {"rollout/overlong_penalty": pen}, {}


def parse_weights(text: str) -> dict[str, float]:
  """"success=1.0,format=0.5" -> {"success": 1.0, "format": 0.5} (names of reward terms)."""
  out = {}
  for part in (p.strip() for p in str(text).split(",") if p.strip()):
    name, sep, val = part.partition("=")
    try:
      out[name.strip()] = float(val)
    except ValueError:
      sep = ""
    if not sep or not name.strip():
      raise ValueError(f"config.reward.term_weights: {part!r} is not name=number")
  return out


@register_shaper("reward_weights", enabled=lambda c: bool(str(c.reward.term_weights).strip()))
def reward_weights(batch: EpisodeBatch, state: dict, c):
  """r_t = sum_k w_k x reward_terms/<k>_t over the env's reward terms (`reward.term_weights`,
  "name=w,..."; a term not named keeps weight 0): reweights success / format / penalty terms
  without touching the env."""
  del state
  weights = parse_weights(c.reward.term_weights)
  have = sorted(k[len("reward_terms/"):] for k in batch.extras if k.startswith("reward_terms/"))
  missing = [k for k in weights if k not in have]
  if missing:
    raise ValueError(f"config.reward.term_weights: reward term(s) {missing} not emitted by the "
                     f"env; its terms: {have}")
  r = sum(w * batch.extras[f"reward_terms/{k}"].astype(jnp.float32) for k, w in weights.items())
  return batch.replace(reward=r * batch.valid), {}, {}
