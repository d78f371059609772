"""The trained network: the policy LM plus an optional critic (a value head on the policy
trunk, or a separate value model), and the pure `apply` the learner differentiates.

PPO's critic (Schulman et al., 2017) either shares the trunk (`critic="shared"`: one
forward, value head on the final hidden state) or is a separate transformer of the same
size (`critic="separate"`, as RAGEN/verl's PPO; it starts as a copy of the policy LM when RL
starts, `model.critic_init`, train/phases.start_rl).

The learner never sees logits: `token_stats` turns the final hidden states into per-token
log-probs and entropies with `agent_rl.models.logprobs.shifted_token_stats`, chunked over the
sequence (`logprob_chunk` tokens at a time, the config's `model.logprob_chunk`), so the train
step's memory does not scale with length x vocabulary (issue 16 §5).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np
from flax import nnx

from agent_rl.models import ModelConfig, Transformer, ValueHead, lora
from agent_rl.models.logprobs import shifted_token_stats

CRITICS = ("none", "shared", "separate")
DEFAULT_LOGPROB_CHUNK = 256
# fold_in streams of the train step's key for LoRA dropout, apart from the objective's own use
# of that key (clip-cov selection): the policy LM's and a separate critic LM's masks.
LM_DROPOUT, CRITIC_DROPOUT = 1, 2


class TokenStats(NamedTuple):
  """What the losses read from the policy, all `[B, L]` float32, token t scored by the
  logits at t-1 (position 0 gets 0); `values[:, t]` is V of the prefix ending at t.
  A critic-only update's forward (`value_stats`) has no log-probs or entropy (None)."""
  logprobs: Optional[jax.Array]
  entropy: Optional[jax.Array]
  values: Optional[jax.Array]


def check_logprob_chunk(chunk) -> int:
  if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 0:
    raise ValueError(f"config.model.logprob_chunk: must be an int >= 0 (0 = materialized "
                     f"logits), got {chunk!r}")
  return int(chunk)


class ActorCritic(nnx.Module):
  """`lm` is the policy; `value_head` / `critic_lm` exist only when a critic is configured.

  logprob_chunk: tokens per chunk of `token_stats` (0 materializes the [B,L,V]
    logits: only the memory benchmark's baseline uses it). A static attribute: it lives in
    the graphdef, so `make_apply(graphdef)` needs nothing else.
  """

  def __init__(self, cfg: ModelConfig, critic: str = "none", *,
               logprob_chunk: int = DEFAULT_LOGPROB_CHUNK, rngs: nnx.Rngs):
    if critic not in CRITICS:
      raise ValueError(f"config.model.critic: must be none|shared|separate, got {critic!r}")
    self.critic = critic
    self.logprob_chunk = check_logprob_chunk(logprob_chunk)
    self.lm = Transformer(cfg, rngs=rngs)
    if critic == "separate":
      self.critic_lm = Transformer(cfg, rngs=rngs)
    if critic != "none":
      self.value_head = ValueHead(cfg.hidden, rngs=rngs)

  def __call__(self, tokens, positions, valid) -> tuple[jax.Array, Optional[jax.Array]]:
    """tokens/positions [B,L] i32, valid [B,L] bool -> logits [B,L,V] f32, values [B,L] | None.

    Materializes the logits: for inspection and evaluation, not for the train step."""
    logits, hidden, _ = self.lm.apply(tokens, positions, valid)
    return logits, self._values(tokens, positions, valid, hidden)

  def values(self, tokens, positions, valid) -> jax.Array:
    """tokens/positions [B,L] i32, valid [B,L] bool -> critic values [B,L] f32."""
    if self.critic == "none":
      raise ValueError("ActorCritic.values: config.model.critic is 'none' (no critic)")
    hidden = None if self.critic == "separate" else self.lm.apply(tokens, positions, valid)[1]
    return self._values(tokens, positions, valid, hidden)

  def token_stats(self, tokens, positions, valid, *, with_entropy: bool = True,
                  dropout_key: Optional[jax.Array] = None) -> TokenStats:
    """tokens/positions [B,L] i32, valid [B,L] bool -> TokenStats (no [B,L,V] logits kept:
    the unused logits output of `Transformer.apply` is dead code under jit).

    dropout_key: the train step's key (the loss's forward only, never rollouts or scoring):
    LoRA dropout (`models.lora`) draws the LM's masks from fold_in(key, LM_DROPOUT) and a
    separate critic's from fold_in(key, CRITIC_DROPOUT); without `lora.dropout > 0` unused."""
    lm_key, critic_key = _dropout_keys(self.lm.cfg, dropout_key)
    _, hidden, _ = self.lm.apply(tokens, positions, valid, dropout_key=lm_key)
    lp, ent = shifted_token_stats(hidden, self.lm.head_weight(), tokens,
                                  chunk=self.logprob_chunk, with_entropy=with_entropy)
    return TokenStats(lp, ent, self._values(tokens, positions, valid, hidden, critic_key))

  def value_stats(self, tokens, positions, valid, *,
                  dropout_key: Optional[jax.Array] = None) -> TokenStats:
    """TokenStats(None, None, values): the forward of a critic-only update (train.critic_warmup,
    train.critic_prefit), whose loss is the value term alone and whose actor optimizer holds.
    It skips what that loss never reads: the vocabulary projection (log-probs, entropy) and,
    with a shared trunk, the trunk's backward (`stop_gradient` on its hidden states: the
    trunk's gradient would be discarded by the held actor). A separate critic runs alone.
    Values equal `token_stats(...).values` (same ops, same dropout keys)."""
    if self.critic == "none":
      raise ValueError("ActorCritic.value_stats: config.model.critic is 'none' (no critic)")
    lm_key, critic_key = _dropout_keys(self.lm.cfg, dropout_key)
    hidden = None
    if self.critic == "shared":
      hidden = jax.lax.stop_gradient(
          self.lm.apply(tokens, positions, valid, dropout_key=lm_key)[1])
    return TokenStats(None, None, self._values(tokens, positions, valid, hidden, critic_key))

  def _values(self, tokens, positions, valid, hidden, dropout_key=None) -> Optional[jax.Array]:
    if self.critic == "none":
      return None
    if self.critic == "separate":
      hidden = self.critic_lm.apply(tokens, positions, valid, dropout_key=dropout_key)[1]
    return self.value_head(hidden)


def _dropout_keys(cfg: ModelConfig, key: Optional[jax.Array]):
  """(policy LM key, critic LM key) for LoRA dropout, (None, None) when nothing drops (no
  fold_in traced: the p = 0 program is the one without a key)."""
  if key is None or not lora.uses_dropout(cfg):
    return None, None
  return jax.random.fold_in(key, LM_DROPOUT), jax.random.fold_in(key, CRITIC_DROPOUT)


def make_apply(graphdef, values_only: bool = False):
  """`apply(params, tokens, positions, valid, dropout_key=None, agent=None) -> TokenStats` for
  a split ActorCritic; the training losses pass their step key as `dropout_key` (LoRA
  dropout) and each row's acting agent as `agent` (one network: unused here; per-agent
  weights route on it in `agents.routing.make_apply`). values_only: `value_stats`, the
  critic-only update's forward."""

  def apply(params, tokens, positions, valid, dropout_key=None, agent=None) -> TokenStats:
    del agent
    model = nnx.merge(graphdef, params)
    fn = model.value_stats if values_only else model.token_stats
    return fn(tokens, positions, valid, dropout_key=dropout_key)

  return apply


def policy_token_stats(lm_graphdef, lm_params, tokens, positions, valid, *,
                       chunk: int = DEFAULT_LOGPROB_CHUNK, with_entropy: bool = False
                       ) -> tuple[jax.Array, jax.Array]:
  """(logprobs, entropy) [B, L] of a bare policy Transformer `(graphdef, params)` (reference
  or teacher models), by the same chunked path as `ActorCritic.token_stats`."""
  lm = nnx.merge(lm_graphdef, lm_params)
  _, hidden, _ = lm.apply(tokens, positions, valid)
  return shifted_token_stats(hidden, lm.head_weight(), tokens, chunk=chunk,
                             with_entropy=with_entropy)
