"""The trained network: the policy LM plus an optional critic (a value head on the policy
trunk, or a separate value model), and the pure `apply` the learner differentiates.

PPO's critic (Schulman et al., 2017) either shares the trunk (`critic="shared"`: one
forward, value head on the final hidden state) or is a separate transformer of the same
size (`critic="separate"`, as RAGEN/verl's PPO).
"""
from __future__ import annotations

from typing import Optional

import jax
from flax import nnx

from agent_rl.models import ModelConfig, Transformer, ValueHead


class ActorCritic(nnx.Module):
  """`lm` is the policy; `value_head` / `critic_lm` exist only when a critic is configured."""

  def __init__(self, cfg: ModelConfig, critic: str = "none", *, rngs: nnx.Rngs):
    if critic not in ("none", "shared", "separate"):
      raise ValueError(f"config.model.critic: must be none|shared|separate, got {critic!r}")
    self.critic = critic
    self.lm = Transformer(cfg, rngs=rngs)
    if critic == "separate":
      self.critic_lm = Transformer(cfg, rngs=rngs)
    if critic != "none":
      self.value_head = ValueHead(cfg.hidden, rngs=rngs)

  def __call__(self, tokens, positions, valid) -> tuple[jax.Array, Optional[jax.Array]]:
    """tokens/positions [B,L] i32, valid [B,L] bool -> logits [B,L,V] f32, values [B,L] | None."""
    logits, hidden, _ = self.lm.apply(tokens, positions, valid)
    if self.critic == "none":
      return logits, None
    if self.critic == "separate":
      _, hidden, _ = self.critic_lm.apply(tokens, positions, valid)
    return logits, self.value_head(hidden)


def make_apply(graphdef):
  """`apply(params, tokens, positions, valid) -> (logits, values)` for a split ActorCritic."""

  def apply(params, tokens, positions, valid):
    return nnx.merge(graphdef, params)(tokens, positions, valid)

  return apply
