"""CLEANER's rollback-purify: train on the trajectory with failed tool steps replaced by their
successful self-corrections (strategy "rollback_purify").

CLEANER (Xu, Chen & Li 2026, "Self-Purified Trajectories Boost Agentic Reinforcement
Learning", arXiv:2601.15141): when a tool call fails (an execution error) and the model later
retries and succeeds, its Similarity-Aware Adaptive Rollback (SAAR) rolls the history back
and replaces the failed step by the successful self-correction, so the policy is trained on
the clean trajectory instead of the error-recovery loop; by the similarity of the two calls
it grafts either only the corrected call onto the original reasoning (shallow) or the whole
corrected turn (deep). Reported with GRPO on AIME24/25, GPQA and LiveCodeBench: about +6 /
+3 / +5 points of accuracy over the baseline, at a third of the training steps.

Here, on an `EpisodeBatch` after the rollout (a pure function, `purify`):

  failed call  valid turn t with `tool_call` and `tool_error` (env info extras; the tool
               layer's keys, agent_rl/envs/tools);
  its retry    the first turn t' > t whose call succeeded (any tool); when it is a call of
               the same tool (`tool_kind` extra, if the env emits it), turns t .. t'-1 (the
               failed attempt and whatever lies between: more failures, malformed turns)
               are *removed* and t' stands in their place. A failed call with no successful
               call after it is kept (nothing corrects it).

Removal, and how it departs from the paper:
  - always: the removed turns' tokens leave the loss mask, their rewards are set to 0 and
    their `fatal` flags cleared (the purified trajectory has no failed step); turn structure,
    `valid` and the behaviour log-probs stay, so every credit kernel applies unchanged.
    `extras["purified"] [N, T]` marks them; the batch's N, T, L do not change.
  - `attend="purified"` (concatenated history only): the removed turns' tokens (action,
    tool result, the chat glue before the next action) are also masked as attention keys
    and the positions of the rest renumbered consecutively, so the training forward of
    every later token sees exactly the purified context (a row with masked keys and shifted
    positions equals the compacted sequence). This is the deep replacement (the whole turn
    t' replaces turn t); SAAR's shallow graft (the new call under the old reasoning) is not
    done: it needs re-tokenizing an edited turn, which the compiled rollout never does.
    The behaviour log-probs of t' and later tokens were sampled under the unpurified
    context, so the first PPO ratio on them is an importance ratio between the two contexts
    (clipped like any off-policy token); CLEANER's verl recomputes old log-probs on the
    purified data instead, which our learner (old_logprobs = batch.logprobs) does not.
  - `attend="all"`, and windowed history (each turn its own sample whose window is fixed at
    rollout time): only the loss mask changes; t' keeps the failed attempt in its context.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.rollout.strategies import STRATEGIES, Strategy

ATTEND = ("purified", "all")


def removed_turns(call: jax.Array, error: jax.Array, kind: jax.Array, valid: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """`(removed [N, T] bool, retry [N, T] bool)` by the rule of the module docstring.

  call, error: [N, T] bool (the turn called a tool / the call failed); kind: [N, T] int
  (which tool; equal everywhere when there is one); valid: [N, T] bool.
  """
  n, t = valid.shape
  idx = jnp.arange(t, dtype=jnp.int32)
  failed = valid & call & error
  ok = valid & call & ~error
  # First successful call strictly after each turn: reverse cumulative min of its index.
  at = jnp.where(ok, idx[None, :], t)
  incl = jax.lax.cummin(at, axis=1, reverse=True)
  nxt = jnp.concatenate([incl[:, 1:], jnp.full((n, 1), t, jnp.int32)], axis=1)      # [N, T]
  kind_next = jnp.take_along_axis(kind, jnp.minimum(nxt, t - 1), axis=1)
  fixable = failed & (nxt < t) & (kind_next == kind)
  # removed[s] = some fixable t <= s whose retry comes after s.
  span = (fixable[:, :, None] & (idx[None, :, None] <= idx[None, None, :])
          & (nxt[:, :, None] > idx[None, None, :]))                                  # [N, t, s]
  removed = jnp.any(span, axis=1)
  retry = jnp.any(fixable[:, :, None] & (nxt[:, :, None] == idx[None, None, :]), axis=1)
  return removed, retry


def token_turns(turn_index: jax.Array) -> jax.Array:
  """`[N, L]` the turn whose action last began at or before each token (-1 before the first
  action): in the concatenated layout, action t plus the observation and chat glue after it."""
  return jax.lax.cummax(turn_index, axis=1)


@functools.partial(jax.jit, static_argnames=("call_key", "error_key", "kind_key", "attend"))
def purify(batch: EpisodeBatch, *, call_key: str = "tool_call", error_key: str = "tool_error",
           kind_key: str | None = "tool_kind", attend: str = "purified") -> EpisodeBatch:
  """The purified batch (same shapes); see the module docstring."""
  ex = batch.extras
  for key in (call_key, error_key):
    if key not in ex:
      raise ValueError(f"rollback_purify needs the env info key {key!r} (batch.extras has "
                       f"{sorted(ex)}); envs on agent_rl.envs.tools emit tool_call/tool_error")
  if attend not in ATTEND:
    raise ValueError(f"rollback_purify attend must be one of {ATTEND}, got {attend!r}")
  kind = ex[kind_key] if kind_key and kind_key in ex else jnp.zeros(batch.valid.shape, jnp.int32)
  removed, _ = removed_turns(ex[call_key].astype(bool), ex[error_key].astype(bool),
                             kind.astype(jnp.int32), batch.valid.astype(bool))
  ti = batch.turn_index
  own = ti >= 0
  act_removed = own & jnp.take_along_axis(removed, jnp.maximum(ti, 0), axis=1)
  out = batch.replace(
      loss_mask=jnp.where(act_removed, 0.0, batch.loss_mask).astype(batch.loss_mask.dtype),
      reward=jnp.where(removed, 0.0, batch.reward).astype(batch.reward.dtype),
      fatal=batch.fatal & ~removed, extras=dict(ex, purified=removed))
  if attend == "purified" and not batch.segment_len:
    seg = token_turns(ti)
    gone = (seg >= 0) & jnp.take_along_axis(removed, jnp.maximum(seg, 0), axis=1)
    attn = batch.attention_mask if batch.attention_mask is not None else jnp.ones(ti.shape, bool)
    keep = attn & ~gone
    position = jnp.maximum(jnp.cumsum(keep, axis=1, dtype=jnp.int32) - 1, 0)
    out = out.replace(attention_mask=keep, position=jnp.where(keep, position, 0),
                      loss_mask=jnp.where(gone, 0.0, out.loss_mask).astype(out.loss_mask.dtype))
  return out


def purify_metrics(before: EpisodeBatch, after: EpisodeBatch) -> dict[str, jax.Array]:
  """Removed turns per episode, the fraction of episodes purified, generated tokens dropped."""
  removed = after.extras["purified"]
  dropped = jnp.sum(before.loss_mask) - jnp.sum(after.loss_mask)
  return {"purify/removed_turns": jnp.mean(jnp.sum(removed, axis=1).astype(jnp.float32)),
          "purify/episodes": jnp.mean(jnp.any(removed, axis=1).astype(jnp.float32)),
          "purify/dropped_token_frac": dropped / jnp.maximum(jnp.sum(before.loss_mask), 1.0)}


def rollback_purify(rollout_fn, params, tasks, key, *, call_key: str = "tool_call",
                    error_key: str = "tool_error", kind_key: str = "tool_kind",
                    attend: str = "purified"):
  """Strategy run hook: one rollout, purified (strategy_kwargs name the extras / attend)."""
  batch, metrics = rollout_fn(params, tasks, key)
  out = purify(batch, call_key=call_key, error_key=error_key, kind_key=kind_key or None,
               attend=attend)
  return out, dict(metrics, **purify_metrics(batch, out))


# strategies.py imports this module at its end, so the registry is complete whichever of the
# two modules is imported first.
STRATEGIES.register("rollback_purify", Strategy(run_fn=rollback_purify))
