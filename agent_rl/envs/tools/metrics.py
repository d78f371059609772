"""Tool-use metrics of a rollout batch, from the standard info extras (`ToolFormat.turn_info`).

The rollout stores every non-fixed info key as `batch.extras[key] [N, T]`; these means are
what Search-R1-style papers report: tool calls per episode, the answer rate (episodes that
gave a valid answer), errors and fatal (erroneous) turns per episode, and EM / F1 when the
env reports them (`em`, `f1`: the episode's score so far, read on its last valid turn).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def tool_metrics(batch, prefix: str = "rollout/tools/") -> dict[str, jax.Array]:
  """`{name: f32 scalar}` over the N episodes of an EpisodeBatch (valid turns only);
  empty for an env without the tool extras, else keys present when their extras are."""
  ex = batch.extras
  if "tool_call" not in ex:
    return {}
  valid = batch.valid.astype(bool)
  per_ep = lambda x: jnp.mean(jnp.sum(x.astype(bool) & valid, axis=1).astype(jnp.float32))
  out = {}
  out["calls_per_episode"] = per_ep(ex["tool_call"])
  if "tool_error" in ex:
    out["errors_per_episode"] = per_ep(ex["tool_error"])
  if "answered" in ex:
    out["answer_rate"] = jnp.mean(jnp.any(ex["answered"].astype(bool) & valid, axis=1).astype(jnp.float32))
  out["fatal_per_episode"] = per_ep(batch.fatal)
  last = valid & (jnp.cumsum(valid, axis=1) == jnp.sum(valid, axis=1, keepdims=True))
  for k in ("em", "f1"):
    if k in ex:
      out[k] = jnp.mean(jnp.sum(jnp.where(last, ex[k].astype(jnp.float32), 0.0), axis=1))
  if "parametric" in ex:
    # CARL's question: does the policy still search on items it already knows?
    par = jnp.any(ex["parametric"].astype(bool) & valid, axis=1)
    calls = jnp.sum(ex["tool_call"].astype(bool) & valid, axis=1).astype(jnp.float32)
    out["calls_per_parametric_episode"] = jnp.sum(jnp.where(par, calls, 0.0)) / jnp.maximum(jnp.sum(par), 1)
    out["calls_per_other_episode"] = jnp.sum(jnp.where(par, 0.0, calls)) / jnp.maximum(jnp.sum(~par), 1)
  return {prefix + k: v for k, v in out.items()}
