"""Distillation to a teacher's log-probs, and hindsight log-prob-gap credit reweighting.

Two data regimes:

* Only the sampled tokens' teacher log-probs are known (`teacher_logprobs [B, L]`, e.g. from a
  teacher server scoring the student's rollout). On-policy distillation (Agarwal et al. 2024,
  GKD, arXiv 2306.13649; Thinking Machines "On-Policy Distillation", 2025) uses the per-token
  reverse-KL estimate on student samples, d_t = logπθ(y_t) − logπT(y_t), either as a loss
  (`sampled_kl_loss(direction="reverse")`) or as a per-token advantage −d_t fed to any policy
  loss (`reverse_kl_advantage`). On teacher samples (SFT-style data) the forward KL estimate is
  logπT(y_t) − logπθ(y_t) (`direction="forward"`), whose gradient is the NLL's.
* Full teacher logits (`teacher_logits [B, L, V]`): the exact per-token forward KL(πT ‖ πθ) or
  reverse KL(πθ ‖ πT) over the vocabulary (`logits_kl`, `logits_kl_loss`), with GKD's
  temperature.

`hindsight_gap_advantages` is a design proposal (TRIAL / StepOPSD style, no reference code):
a teacher that sees hindsight information (the outcome, the solution, a later state) scores the
student's tokens; the gap g_t = logπT(y_t) − logπθ(y_t) says which tokens the informed teacher
endorses. It reweights or augments the outcome advantages; its form is in the docstring.

Entropy (`entropy_from_logits`, `entropy_loss`) lives in `losses.base`; the combined actor loss
pg − c_ent·H + c_kl·KL is `losses.kl.actor_loss`.
"""
from __future__ import annotations

from typing import Callable, Dict

import jax
import jax.numpy as jnp

from agent_rl.losses.base import agg_loss, check_mode, float_dtype, masked, masked_mean

sg = jax.lax.stop_gradient


def _check(name, ref, **fields):
  for field, x in fields.items():
    if jnp.shape(x) != jnp.shape(ref):
      raise ValueError(f"{name}: {field} has shape {jnp.shape(x)}, expected {jnp.shape(ref)}")


def reverse_kl_advantage(logprobs, teacher_logprobs, mask) -> jax.Array:
  """On-policy distillation's per-token advantage −d_t = sg(logπT − logπθ)·m, `[B, L]`.

  Plug into any policy loss (with old = behaviour log-probs) to minimise the reverse KL with
  importance sampling and clipping; add it to task advantages for a dense teacher signal.
  """
  _check("reverse_kl_advantage", logprobs, teacher_logprobs=teacher_logprobs, mask=mask)
  dt = float_dtype(logprobs)
  gap = teacher_logprobs.astype(dt) - logprobs.astype(dt)
  return masked(sg(gap), mask.astype(dt))


def _reverse_sampled(lp, tlp):
  # Value d; gradient sg(d)·∇logπθ, the score-function gradient of E_{y~πθ}[logπθ − logπT]
  # per token (E[∇logπθ] = 0 removes the other term).
  d = sg(lp - tlp)
  return d + d * (lp - sg(lp))


def _forward_sampled(lp, tlp):
  return tlp - lp


SAMPLED_KL: Dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    "reverse": _reverse_sampled, "forward": _forward_sampled}


def sampled_kl_loss(logprobs, teacher_logprobs, mask, *, direction="reverse",
                    loss_agg_mode="token-mean", num_tokens=None, num_seqs=None, scale=None):
  """Distillation loss from sampled-token log-probs only.

    reverse (tokens sampled from the student): value agg(logπθ − logπT), gradient
        agg(sg(logπθ − logπT)·∇logπθ) — on-policy distillation with discount 0.
    forward (tokens sampled from the teacher): agg(logπT − logπθ) — teacher-weighted NLL.
  Returns (loss, {"kl": the aggregated estimate}).
  """
  check_mode(loss_agg_mode)
  if direction not in SAMPLED_KL:
    raise ValueError(f"sampled_kl_loss: unknown direction {direction!r}; known: "
                     f"{', '.join(SAMPLED_KL)}")
  _check("sampled_kl_loss", logprobs, teacher_logprobs=teacher_logprobs, mask=mask)
  dt = float_dtype(logprobs)
  lp, tlp = logprobs.astype(dt), teacher_logprobs.astype(dt)
  agg = dict(num_tokens=num_tokens, num_seqs=num_seqs, scale=scale)
  loss = agg_loss(SAMPLED_KL[direction](lp, tlp), mask, loss_agg_mode, **agg)
  return loss, {"kl": sg(loss)}


def logits_kl(logits, teacher_logits, *, direction="forward", temperature=1.0) -> jax.Array:
  """Exact per-token KL over the vocabulary: `[B, L, V]` x2 -> `[B, L]`.

    forward: KL(πT ‖ πθ) = Σ_v pT·(log pT − log pθ)   (mode covering, SFT-like)
    reverse: KL(πθ ‖ πT) = Σ_v pθ·(log pθ − log pT)   (mode seeking, on-policy distillation)
  Both distributions are softmax(z / temperature). The teacher is treated as constant.
  """
  if direction not in ("forward", "reverse"):
    raise ValueError(f"logits_kl: unknown direction {direction!r}; known: forward, reverse")
  _check("logits_kl", logits, teacher_logits=teacher_logits)
  dt = float_dtype(logits)
  ls = jax.nn.log_softmax(logits.astype(dt) / temperature, axis=-1)
  lt = sg(jax.nn.log_softmax(teacher_logits.astype(dt) / temperature, axis=-1))
  if direction == "forward":
    return jnp.sum(jnp.exp(lt) * (lt - ls), axis=-1)
  return jnp.sum(jnp.exp(ls) * (ls - lt), axis=-1)


def logits_kl_loss(logits, teacher_logits, mask, *, direction="forward", temperature=1.0,
                   loss_agg_mode="token-mean", num_tokens=None, num_seqs=None, scale=None):
  """agg(`logits_kl`) with the usual modes. Returns (loss, {"kl": loss})."""
  check_mode(loss_agg_mode)
  kl = logits_kl(logits, teacher_logits, direction=direction, temperature=temperature)
  loss = agg_loss(kl, mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, scale=scale)
  return loss, {"kl": sg(loss)}


def hindsight_gap_advantages(advantages, logprobs, teacher_logprobs, mask, *, mode="weight",
                             beta=1.0, gap_clip=2.0, normalize=True) -> jax.Array:
  """Hindsight log-prob-gap advantage reweighting — design proposal (TRIAL / StepOPSD style).

  With the clipped gap g̃_t = clip(sg(logπT(y_t) − logπθ(y_t)), −gap_clip, gap_clip):

    mode="weight": A′_t = A_t·u_t,  u_t = exp(β·sgn(A_t)·g̃_t)
        In a successful trajectory (A > 0) credit concentrates on tokens the hindsight teacher
        endorses (g > 0); in a failed one (A < 0) blame concentrates on tokens it rejects
        (g < 0). u ∈ [e^{−β·gap_clip}, e^{β·gap_clip}]. With `normalize`, u is divided by its
        masked mean over the row so each row's total credit is unchanged (only redistributed).
    mode="bonus": A′_t = A_t + β·g̃_t
        A dense teacher bonus; with β = 1 and no clip it is the on-policy distillation
        advantage added to the task advantage.

  Args:
    advantages, logprobs, teacher_logprobs, mask: `[B, L]`; logprobs are the student's
      (behaviour) log-probs of the sampled tokens.
  Returns:
    `[B, L]` advantages (0 off the mask), no gradient.
  """
  if mode not in ("weight", "bonus"):
    raise ValueError(f"hindsight_gap_advantages: unknown mode {mode!r}; known: weight, bonus")
  _check("hindsight_gap_advantages", advantages, logprobs=logprobs,
         teacher_logprobs=teacher_logprobs, mask=mask)
  dt = float_dtype(advantages)
  adv = advantages.astype(dt)
  m = mask.astype(dt)
  gap = jnp.clip(sg(teacher_logprobs.astype(dt) - logprobs.astype(dt)), -gap_clip, gap_clip)
  if mode == "bonus":
    return sg(masked(adv + beta * gap, m))
  u = jnp.exp(beta * jnp.sign(adv) * gap)
  if normalize:
    row_mean = masked_mean(u, m, axis=-1)
    u = u / jnp.where(row_mean > 0, row_mean, 1.0)[:, None]
  return sg(masked(adv * u, m))
