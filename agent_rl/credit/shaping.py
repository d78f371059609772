"""Reward shaping applied before a credit kernel: DAPO overlong penalty and KL-in-reward.

- Overlong reward shaping: Yu et al., DAPO (arXiv 2503.14476), verl `DAPORewardManager`
  (ALGORITHMS.md §1.12).
- KL penalty in the reward with a fixed or adaptive coefficient: Ziegler et al. (arXiv
  1909.08593), verl `apply_kl_penalty`, `FixedKLController`, `AdaptiveKLController` (§1.8).

All functions are pure: controllers map (beta, observed KL) to the next beta instead of
mutating an object, so the coefficient can live in the train state and cross jit boundaries.
The reward-side KL estimators here are values only (no gradient flows through a reward);
the gradient-carrying estimators for the KL loss live in agent_rl.losses.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from agent_rl.credit.outcome import token_counts
from agent_rl.registry import Registry
from agent_rl.losses.kl import kl_penalty
from agent_rl.rollout.batch import EpisodeBatch

# --- DAPO overlong shaping (§1.12) ----------------------------------------------------------


def overlong_penalty(lengths: jax.Array, *, max_response_length: int, overlong_buffer_len: int,
                     penalty_factor: float = 1.0) -> jax.Array:
  """`[B]` penalty min(-(|y| - (L_max - L_buf)) / L_buf * p, 0) for response lengths `[B]`.

  0 up to L_max - L_buf tokens, then linear down to -p at L_max (and beyond, unclipped, as verl).
  """
  if overlong_buffer_len <= 0:
    raise ValueError(f"overlong_buffer_len must be > 0, got {overlong_buffer_len}")
  exceed = jnp.asarray(lengths, jnp.float32) - (max_response_length - overlong_buffer_len)
  return jnp.minimum(-exceed / overlong_buffer_len * penalty_factor, 0.0)


def apply_overlong_penalty(batch: EpisodeBatch, *, max_response_length: int, overlong_buffer_len: int,
                           penalty_factor: float = 1.0, lengths: Optional[jax.Array] = None) -> EpisodeBatch:
  """Adds the DAPO overlong penalty to the last valid turn's reward of each episode.

  lengths `[N]`: response length per episode; default = policy-generated (loss-mask) tokens of
  valid turns, the multi-turn analogue of verl's valid response length.
  """
  y = token_counts(batch) if lengths is None else lengths
  pen = overlong_penalty(y, max_response_length=max_response_length, overlong_buffer_len=overlong_buffer_len,
                         penalty_factor=penalty_factor)
  t = batch.num_turns
  last = jnp.max(jnp.where(batch.valid, jnp.arange(t)[None, :], -1), axis=1)  # [N], -1 if none
  add = jnp.where(jnp.arange(t)[None, :] == last[:, None], pen[:, None], 0.0)
  return batch.replace(reward=batch.reward + add)


# --- KL in the reward (§1.8) ----------------------------------------------------------------

def kl_estimate(logprob: jax.Array, ref_logprob: jax.Array, kind: str = "kl") -> jax.Array:
  """Per-token KL estimate (§1.8 table; one implementation: `agent_rl.losses.kl_penalty`).
  Used as a reward it carries no gradient, so a '+' variant names the same value."""
  return jax.lax.stop_gradient(kl_penalty(logprob, ref_logprob, kind))


def kl_in_reward(token_level_scores, old_log_prob, ref_log_prob, response_mask, beta, *, kl_penalty: str = "kl"):
  """verl `apply_kl_penalty`: r' = score - beta * KL * m. All `[B, L]`; beta scalar.

  Returns (token_level_rewards `[B, L]`, current_kl scalar = batch mean of the per-sequence
  masked-mean KL, which feeds the controller's update with n_steps = B).
  """
  m = jnp.asarray(response_mask, jnp.float32)
  kld = kl_estimate(old_log_prob, ref_log_prob, kl_penalty) * m
  per_seq = jnp.sum(kld * m, axis=-1) / (jnp.sum(m, axis=-1) + 1e-8)
  return token_level_scores - beta * kld, jnp.mean(per_seq)


def turn_kl_penalty(batch: EpisodeBatch, beta, *, kl_penalty: str = "kl"):
  """KL-in-reward on an EpisodeBatch: each turn's reward loses beta * (sum of its tokens' KL).

  KL is taken between batch.logprobs (behaviour) and batch.ref_logprobs on loss-mask tokens;
  a turn-level reward has no token resolution, so a turn's penalty is the sum over its
  tokens (the episode score is the same as verl's token-level penalty). Returns (batch with
  shaped reward, current_kl as in `kl_in_reward`).
  """
  if batch.ref_logprobs is None:
    raise ValueError("turn_kl_penalty needs batch.ref_logprobs ([N, L] reference log-probs); it is None")
  n, t = batch.reward.shape
  m = batch.loss_mask * (batch.turn_index >= 0)
  kld = kl_estimate(batch.logprobs, batch.ref_logprobs, kl_penalty) * m
  ti = jnp.clip(batch.turn_index, 0, t - 1)
  per_turn = jnp.zeros((n, t), jnp.float32).at[jnp.arange(n)[:, None], ti].add(kld)
  shaped = batch.reward - beta * per_turn * batch.valid
  per_seq = jnp.sum(kld, axis=-1) / (jnp.sum(m, axis=-1) + 1e-8)
  return batch.replace(reward=shaped), jnp.mean(per_seq)


KL_CONTROLLERS = Registry("KL controller")


@KL_CONTROLLERS.register("fixed")
def fixed_kl_update(beta, current_kl, n_steps, **_):
  """verl FixedKLController: beta never changes (default kl_coef 0.001)."""
  del current_kl, n_steps
  return beta


@KL_CONTROLLERS.register("adaptive")
def adaptive_kl_update(beta, current_kl, n_steps, *, target_kl: float = 0.1, horizon: int = 10000):
  """verl AdaptiveKLController (Ziegler et al.): beta (1 + clip(KL/target - 1, -0.2, 0.2) n / horizon)."""
  if horizon <= 0:
    raise ValueError(f"adaptive KL controller horizon must be > 0, got {horizon}")
  err = jnp.clip(current_kl / target_kl - 1.0, -0.2, 0.2)
  return beta * (1.0 + err * n_steps / horizon)
