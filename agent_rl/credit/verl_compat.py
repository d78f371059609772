"""verl-signature entry points: `(token_level_rewards [B, L], response_mask [B, L], ...) -> (adv, ret)`.

Drop-in JAX counterparts of verl `core_algos.compute_*_advantage*` (ALGORITHMS.md §1.1-§1.7,
RAGEN bi-level GAE §3), with verl's semantics and defaults, for porting verl recipes and for
parity checks. All are jittable (`num_groups` and flags static). Differences from verl:
- `index` is `[B]` int32 group ids in `[0, num_groups)` (default num_groups = B) instead of a
  NumPy array of uid strings; `uid_to_index` converts on the host.
- outputs are float32; verl's unused `config` is dropped (gamma is an explicit argument).
- `masked_whiten` with Sum(mask) <= 1 raises eagerly but returns zeros under jit.
"""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

from agent_rl.credit import outcome
from agent_rl.credit.gae import (bilevel_gae_advantage_return, gae_advantage_return, masked_whiten,
                                 reinforce_pp_advantage_return)

__all__ = [
    "uid_to_index", "gae_advantage_return", "bilevel_gae_advantage_return", "grpo_outcome_advantage",
    "grpo_vectorized_outcome_advantage", "grpo_passk_outcome_advantage", "rloo_outcome_advantage",
    "rloo_vectorized_outcome_advantage", "reinforce_pp_outcome_advantage",
    "reinforce_pp_baseline_outcome_advantage", "remax_outcome_advantage", "opo_outcome_advantage",
    "gpg_outcome_advantage",
]


def uid_to_index(uids) -> np.ndarray:
  """Host-side: any `[B]` array of uids (strings, ints) -> `[B]` int32 dense group ids."""
  return np.unique(np.asarray(uids), return_inverse=True)[1].reshape(-1).astype(np.int32)


def _setup(token_level_rewards, response_mask, index, num_groups):
  r = jnp.asarray(token_level_rewards, jnp.float32)
  m = jnp.asarray(response_mask, jnp.float32)
  if r.ndim != 2 or m.shape != r.shape:
    raise ValueError(f"token_level_rewards {r.shape} and response_mask {m.shape} must both be [B, L]")
  idx = None
  if index is not None:
    idx = jnp.asarray(index)
    if idx.shape != r.shape[:1] or not jnp.issubdtype(idx.dtype, jnp.integer):
      raise ValueError(f"index must be [B]={r.shape[0]} integer group ids, got {idx.dtype}{idx.shape}")
    idx = idx.astype(jnp.int32)
  return r, m, idx, r.shape[0] if num_groups is None else num_groups


def _broadcast(a, m):
  adv = a[:, None] * m
  return adv, adv


def grpo_outcome_advantage(token_level_rewards, response_mask, index, *, epsilon: float = 1e-6,
                           norm_adv_by_std: bool = True, num_groups: Optional[int] = None):
  """verl `compute_grpo_outcome_advantage` (§1.2). norm_adv_by_std=False is Dr.GRPO."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  return _broadcast(outcome.grpo_scores(r.sum(-1), idx, g, norm_by_std=norm_adv_by_std, epsilon=epsilon), m)


def grpo_vectorized_outcome_advantage(token_level_rewards, response_mask, index, *, epsilon: float = 1e-6,
                                      norm_adv_by_std: bool = True, var_floor: float = 1e-6,
                                      num_groups: Optional[int] = None):
  """verl `compute_grpo_vectorized_outcome_advantage` (§1.2); var_floor=0.0 matches verl 0.9.1."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  a = outcome.grpo_vectorized_scores(r.sum(-1), idx, g, norm_by_std=norm_adv_by_std, epsilon=epsilon,
                                     var_floor=var_floor)
  return _broadcast(a, m)


def grpo_passk_outcome_advantage(token_level_rewards, response_mask, index, *, epsilon: float = 1e-6,
                                 norm_adv_by_std: bool = True, num_groups: Optional[int] = None):
  """verl `compute_grpo_passk_outcome_advantage` (§1.2). Singleton groups raise (eager)."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  return _broadcast(outcome.grpo_passk_scores(r.sum(-1), idx, g, norm_by_std=norm_adv_by_std,
                                              epsilon=epsilon), m)


def rloo_outcome_advantage(token_level_rewards, response_mask, index, *, num_groups: Optional[int] = None):
  """verl `compute_rloo_outcome_advantage` (§1.3): singleton keeps A = s."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  return _broadcast(outcome.rloo_scores(r.sum(-1), idx, g, singleton="raw"), m)


def rloo_vectorized_outcome_advantage(token_level_rewards, response_mask, index, *,
                                      num_groups: Optional[int] = None):
  """verl `compute_rloo_vectorized_outcome_advantage` (§1.3): singleton gets 0."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  return _broadcast(outcome.rloo_scores(r.sum(-1), idx, g, singleton="zero"), m)


def reinforce_pp_outcome_advantage(token_level_rewards, response_mask, *, gamma: float = 1.0,
                                   reset_at_mask: bool = True):
  """verl `compute_reinforce_plus_plus_outcome_advantage` (§1.4); reset_at_mask=False is verl 0.9.1."""
  r, m, _, _ = _setup(token_level_rewards, response_mask, None, None)
  return reinforce_pp_advantage_return(r, m, gamma, reset_at_mask=reset_at_mask)


def reinforce_pp_baseline_outcome_advantage(token_level_rewards, response_mask, index, *,
                                            num_groups: Optional[int] = None):
  """verl `compute_reinforce_plus_plus_baseline_outcome_advantage` (§1.4)."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  a = outcome.reinforce_pp_baseline_scores(r.sum(-1), idx, g)
  adv = masked_whiten(a[:, None] * m, m) * m
  return adv, adv


def remax_outcome_advantage(token_level_rewards, reward_baselines, response_mask):
  """verl `compute_remax_outcome_advantage` (§1.5): G = reverse cumsum of r m; A = G - b m."""
  r, m, _, _ = _setup(token_level_rewards, response_mask, None, None)
  b = jnp.asarray(reward_baselines, jnp.float32)
  if b.shape != r.shape[:1]:
    raise ValueError(f"reward_baselines must be [B]={r.shape[0]}, got {b.shape}")
  returns = jnp.flip(jnp.cumsum(jnp.flip(r * m, -1), axis=-1), -1)
  return returns - b[:, None] * m, returns


def opo_outcome_advantage(token_level_rewards, response_mask, index, *, num_groups: Optional[int] = None):
  """verl `compute_opo_outcome_advantage` (§1.6): length-weighted group baseline."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  return _broadcast(outcome.opo_scores(r.sum(-1), m.sum(-1), idx, g), m)


def gpg_outcome_advantage(token_level_rewards, response_mask, index, *, f_norm: float = 1.0,
                          num_groups: Optional[int] = None):
  """verl `compute_gpg_outcome_advantage` (§1.7); alpha = B / max(#{s != 0}, 1) as in verl."""
  r, m, idx, g = _setup(token_level_rewards, response_mask, index, num_groups)
  return _broadcast(outcome.gpg_scores(r.sum(-1), idx, g, f_norm=f_norm), m)

