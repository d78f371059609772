"""Fatal-aware GRPO/RLOO (OpenSearch-VL): cut episodes at an error cascade, clamp their credit.

Paper: OpenSearch-VL (shawn0728/OpenSearch-VL, rllm deepresearch workflow + agent workflow
trainer); spec in shared/ALGORITHMS.md §4.8. The reward (format x (0.8 acc + 0.2 query),
with an LLM judge) is computed upstream on the prefix before f; this kernel takes it as
`batch.reward`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.needs import Needs, episode_extra
from agent_rl.credit.gigpo import normalize
from agent_rl.credit.segments import group_stats


def fatal_index(fatal: jax.Array, valid: jax.Array, *, k: int = 3) -> jax.Array:
  """`[N]` i32 index of the first turn of the first run of k consecutive erroneous valid turns
  (`batch.fatal`), or T when there is none. A non-erroneous turn resets the run."""
  n, t = valid.shape
  err = fatal & valid

  def step(carry, inp):
    run, f = carry
    e, i = inp
    run = jnp.where(e, run + 1, 0)
    f = jnp.where((f == t) & (run >= k), i - k + 1, f)
    return (run, f), None

  (_, f), _ = jax.lax.scan(step, (jnp.zeros((n,), jnp.int32), jnp.full((n,), t, jnp.int32)),
                           (err.T, jnp.arange(t, dtype=jnp.int32)))
  return f


@register("fatal_aware", needs=Needs(env_fields=("fatal",), optional_extras=("abnormal",)))
def fatal_aware(batch, *, estimator: str = "rloo", k: int = 3, norm_by_std: bool = True,
                eps: float = 1e-6) -> Credit:
  """Fatal-aware advantages with masking and a one-sided clamp (ALGORITHMS.md §4.8).

  Inputs: reward, valid, fatal (erroneous-step flag) `[N, T]`, group_id `[N]`; optional extra
  `batch.extras["abnormal"]` `[N, T]` bool, raised on any turn: the episode ended without an
  answer (default: none did).
  - f = `fatal_index` (cascade of k erroneous turns). No cascade + abnormal end: f = T and the
    episode is flagged; no cascade + answered: not fatal. Flagged = cascade or abnormal.
  - f = 0: score set to 0 and the episode dropped (mask all 0). Mask = valid & (t < f),
    returned as Credit.mask `[N, T]`.
  - Score s = sum of rewards (0 when f = 0). Advantages over the whole group, fatal episodes
    included: "rloo" A = n/(n-1) (s - mu), A = s when n = 1 (verl's loop version); "grpo"
    A = (s - mu)/(sigma + eps) (Bessel; singleton -> s). Then A <- max(A, 0) for flagged
    episodes (returns alike). Zero-variance groups give 0; padding turns 0.
  """
  if estimator not in ("rloo", "grpo"):
    raise ValueError(f"estimator must be 'rloo' or 'grpo', got {estimator!r}")
  n, t = batch.valid.shape
  valid = batch.valid
  f = fatal_index(batch.fatal, valid, k=k)
  cascade = f < t
  abnormal = episode_extra(batch, "abnormal", "fatal_aware", reduce="any", optional=True)
  flagged = cascade if abnormal is None else cascade | abnormal
  s = jnp.sum(jnp.where(valid, batch.reward, 0.0), axis=1)
  s = jnp.where(cascade & (f == 0), 0.0, s)
  has = jnp.any(valid, axis=1)
  if estimator == "grpo":
    norm = "mean_std_norm" if norm_by_std else "mean_norm"
    a = normalize(s, batch.group_id, n, has, norm=norm, eps=eps, singleton="raw")
  else:
    st = group_stats(s, batch.group_id, n, has)
    a = jnp.where(st.count > 1, st.count / jnp.maximum(st.count - 1, 1) * (s - st.mean), s)
  a = jnp.where(flagged, jnp.maximum(a, 0.0), a)
  mask = valid & (jnp.arange(t)[None, :] < f[:, None])
  adv = jnp.where(valid, a[:, None], 0.0)
  return Credit(turn=adv, returns=adv, mask=mask.astype(jnp.float32))
