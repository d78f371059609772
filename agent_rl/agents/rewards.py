"""Per-agent rewards and rollout metrics from a multi-agent EpisodeBatch.

An env with roles names one reward term per role (`env.role_reward_terms`, names in
`env.reward_names`): role k's reward at turn t is that term's column
`extras["reward_terms/<name>"] [N, T]`, whoever acted at t (a deal pays both bargainers on
the turn it closes). Agent k's episode return R^(k)_i is the column's sum over the episode.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import jax.numpy as jnp


def role_terms(env: Any) -> Optional[tuple[str, ...]]:
  """`env.role_reward_terms` checked against `env.roles` and `env.reward_names` (None when the
  env has no per-role rewards)."""
  terms = getattr(env, "role_reward_terms", None)
  if terms is None:
    return None
  roles, names = tuple(getattr(env, "roles", ())), tuple(getattr(env, "reward_names", ()))
  if len(terms) != len(roles):
    raise ValueError(f"{type(env).__name__}.role_reward_terms {tuple(terms)} must name one "
                     f"reward term per role {roles}")
  missing = [t for t in terms if t not in names]
  if missing:
    raise ValueError(f"{type(env).__name__}.role_reward_terms {missing} are not among its "
                     f"reward_names {names}")
  return tuple(terms)


def agent_returns(batch: Any, terms: Sequence[str]) -> jnp.ndarray:
  """`[N, K]` f32: R^(k)_i, the sum over valid turns of role k's reward term."""
  cols = [jnp.sum(jnp.where(batch.valid, batch.extras[f"reward_terms/{t}"], 0.0), axis=1)
          for t in terms]
  return jnp.stack(cols, axis=1).astype(jnp.float32)


def attach_agent_return(batch: Any, env: Any) -> Any:
  """The batch with `extras["agent_return"] [N, T]`: on each valid turn, the episode return
  of the agent acting at that turn (what `drmas` / `per_agent` score an agent by). Unchanged
  for an env without per-role rewards."""
  terms = role_terms(env)
  if terms is None:
    return batch
  ret = agent_returns(batch, terms)
  own = jnp.take_along_axis(ret, jnp.clip(batch.agent_id, 0, len(terms) - 1), axis=1)
  return batch.replace(extras={**batch.extras, "agent_return": jnp.where(batch.valid, own, 0.0)})


def agent_metrics(batch: Any, num: int, terms: Optional[Sequence[str]] = None,
                  prefix: str = "rollout") -> dict:
  """Per agent k: `{prefix}/agent{k}/turns` (turns it acted, mean per episode),
  `/valid_action` (fraction of its turns with a valid action) and, with role terms,
  `/return` (mean R^(k))."""
  out = {}
  ret = agent_returns(batch, terms) if terms else None
  for k in range(num):
    mine = batch.valid & (batch.agent_id == k)
    n_turns = jnp.sum(mine)
    out[f"{prefix}/agent{k}/turns"] = n_turns / batch.valid.shape[0]
    out[f"{prefix}/agent{k}/valid_action"] = (
        jnp.sum(mine & batch.valid_action) / jnp.maximum(n_turns, 1))
    if ret is not None:
      out[f"{prefix}/agent{k}/return"] = jnp.mean(ret[:, k])
  return out
