"""CARL: a segment-level critic, segments at tool boundaries (GAE over turns, not tokens).

Paper: Kumar, Wu, Suley, "Knowing When to Ask: Segment-Level Credit Assignment for LLM Tool
Use" (CARL, Competence-Aware RL; arXiv 2605.27788, Microsoft AI, May 2026). What the abstract
says (read, verified): each rollout is decomposed at natural tool-use boundaries; a critic
trained on the policy's own rollouts assigns each segment its own credit from one binary
outcome, with no external judge or step labels, so that erroneous calls, wrong extractions
and unnecessary calls get appropriately signed advantages; the critic separates
parametrically solvable from tool-dependent questions (AUC 0.93 at 7B).

What is NOT verified (the method section was not reachable from here): the exact estimator.
This module implements the reading the abstract supports, as GAE whose time step is a
segment (Schulman et al. arXiv 1506.02438 with t -> segment k):

  V_k     = critic value at the segment's first generated token (the state at the boundary,
            after the tool result was read); 0 for a segment without generated tokens.
  delta_k = r_k + gamma * V_{k+1} - V_k           (V_{K} = 0 after the last valid segment)
  A_k     = delta_k + gamma * lam * A_{k+1}
  G_k     = A_k + V_k                             (the critic's target for every token of k)

lam = 0 (the default) gives each segment its own TD credit V_{k+1} - V_k (+ r_k): a search
that brings the missing fact raises V and is credited, an unnecessary or failed one leaves V
unchanged or lowers it. That is the reading of "erroneous tool calls ... and unnecessary calls
each receive appropriately signed advantages" inside a *successful* episode: with lam = 1,
A_k = sum_{j>=k} gamma^(j-k) r_j - V_k >= 0 on every segment of a success (V <= 1), so an
erroneous call there would be reinforced. Here a segment is a turn: in this codebase's
rollout every turn ends at a tool call or the final answer, and the observation (the tool
result, never in the loss mask) starts the next one.

Why the first generated token: `values[:, p]` is V of the prefix through token p
(train/policy.py), so the exact boundary state is the observation token just before the
segment; but the value loss trains only on loss-mask tokens (objective/terms.py), so a value
read there would never be fitted. The first action token's prefix holds the same
information plus one generated token. The targets G_k go on all loss-mask tokens of the
segment, so the critic learns one value per segment.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.gae import _values, masked_whiten
from agent_rl.credit.needs import Needs
from agent_rl.rollout.batch import EpisodeBatch


def segment_values(values: jax.Array, loss_mask: jax.Array, turn_index: jax.Array,
                   num_turns: int) -> tuple[jax.Array, jax.Array]:
  """The critic's value of each segment and the token count of each segment.

  values, loss_mask: `[N, L]` f32; turn_index: `[N, L]` i32 (-1 = prompt/padding).
  Returns (v_seg `[N, T]` f32: values at each turn's first loss-mask token, 0 where the turn
  has none; n_tok `[N, T]` f32: loss-mask tokens per turn).
  """
  n, ln = values.shape
  tok_ok = (loss_mask > 0) & (turn_index >= 0)
  ti = jnp.clip(turn_index, 0, num_turns - 1)
  rows = jnp.arange(n)[:, None]
  pos = jnp.where(tok_ok, jnp.arange(ln, dtype=jnp.int32)[None, :], ln)
  first = jnp.full((n, num_turns), ln, jnp.int32).at[rows, ti].min(pos)
  has = first < ln
  v_seg = jnp.where(has, jnp.take_along_axis(values.astype(jnp.float32), jnp.minimum(first, ln - 1), 1), 0.0)
  n_tok = jnp.zeros((n, num_turns), jnp.float32).at[rows, ti].add(tok_ok.astype(jnp.float32))
  return v_seg, n_tok


def segment_gae(reward: jax.Array, v_seg: jax.Array, valid: jax.Array, gamma: float = 1.0,
                lam: float = 1.0) -> tuple[jax.Array, jax.Array]:
  """GAE over segments. reward, v_seg `[N, T]` f32, valid `[N, T]` bool (a valid prefix per
  row). Returns (A `[N, T]`, G = A + V `[N, T]`), both 0 on padding turns. After the last
  valid segment V = 0 (no bootstrap past the episode's end, as the token-level `gae`)."""
  ok = valid.astype(jnp.float32)
  r = reward.astype(jnp.float32) * ok
  v = v_seg.astype(jnp.float32) * ok

  def step(carry, x):
    nv, a = carry
    rt, vt, mt = x
    a_new = (rt + gamma * nv - vt) + gamma * lam * a
    return (vt * mt, a_new * mt), a_new * mt

  zero = jnp.zeros(r.shape[:1], jnp.float32)
  _, adv = jax.lax.scan(step, (zero, zero), (r.T, v.T, ok.T), reverse=True)
  adv = adv.T
  return adv, (adv + v) * ok


@register("carl", needs=Needs(critic=True))
def carl(batch: EpisodeBatch, *, gamma: float = 1.0, lam: float = 0.0, whiten: bool = True) -> Credit:
  """CARL segment-critic advantages (arXiv 2605.27788; see the module docstring).

  Inputs: batch.reward/valid `[N, T]` (r_k = the env reward after segment k: the outcome on
  the answer turn, any shaping terms on theirs), batch.values/loss_mask/turn_index `[N, L]`.
  gamma, lam: the segment-level discount and GAE lambda. whiten: whiten A over the batch's
  loss-mask tokens like the token-level `gae` (each segment weighted by its token count,
  which equals whitening the token broadcast); groups play no role.
  Returns Credit(turn=A `[N, T]` (0 on padding), returns=G broadcast to the segment's
  loss-mask tokens `[N, L]` (0 elsewhere), the critic's targets).
  """
  n, t = batch.valid.shape
  v_seg, n_tok = segment_values(_values(batch, "carl"), batch.loss_mask, batch.turn_index, t)
  adv, ret = segment_gae(batch.reward, v_seg, batch.valid, gamma, lam)
  if whiten:
    w = n_tok * batch.valid.astype(jnp.float32)
    adv = masked_whiten(adv, w) * batch.valid.astype(jnp.float32)
  idx = jnp.clip(batch.turn_index, 0, t - 1)
  on = (batch.turn_index >= 0) & (batch.loss_mask > 0)
  ret_tok = jnp.where(on, jnp.take_along_axis(ret, idx, 1), 0.0)
  return Credit(turn=adv, returns=ret_tok)
