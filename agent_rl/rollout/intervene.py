"""Teacher interventions in the rollout (FutureBridge-OPD): the teacher takes over a turn
whose student action it finds unlikely.

On-policy distillation (distill.teacher, losses/distill.py) scores the student's own tokens
with a stronger teacher. Its weakness on long episodes: once the student has gone off course,
every later turn is spent in states a good policy never visits. FutureBridge-OPD's answer is
to let the teacher step in: at turn t the student samples its action a as usual, the teacher
scores it in the same context (one teacher-forced forward over the turn's window sample), and
when the mean per-token gap

    gap = (1 / |a|) sum_j [log pi_S(a_j | ctx, a_<j) - log pi_T(a_j | ctx, a_<j)]

exceeds `threshold`, the teacher samples the turn's action instead (same context, its own
fresh cache, the sampler's settings, its own key stream). The env reads the taken-over action,
so the episode continues from where the teacher brought it; the student's later turns are
scored and trained as usual. The teacher's turns stay in the batch (tokens, returns, credit)
but leave the loss (`EpisodeCarry.teacher_turns`): they are not the student's samples, so
neither the policy-gradient ratio nor the sampled reverse-KL estimator applies to them.

Windowed history only: each turn is its own sample, so the teacher needs no KV cache of the
whole transcript; one network (no per-agent weights); the compiled rollout (pure-JAX envs).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

_SALT = 0x7EAC4E  # the teacher's sampling keys, apart from the student's


@dataclasses.dataclass(frozen=True)
class InterveneConfig:
  threshold: float = 1.0  # nats per token

  def __post_init__(self):
    if not self.threshold > 0:
      raise ValueError(f"InterveneConfig.threshold must be > 0 (nats per token), got "
                       f"{self.threshold}")


def sample_tokens(ctx, clen, gen, segment_len: int, pad: int):
  """The turn's sample `[N, segment_len]`: context `[N, C]` (valid up to clen) then the action
  (gen.tokens `[N, A]`, gen.length), pad after; and its attention mask."""
  s = jnp.arange(segment_len)[None, :]
  a = gen.tokens.shape[1]
  ctx_full = jnp.pad(ctx, ((0, 0), (0, segment_len - ctx.shape[1])), constant_values=pad)
  in_act = (s >= clen[:, None]) & (s < (clen + gen.length)[:, None])
  act = jnp.take_along_axis(gen.tokens, jnp.clip(s - clen[:, None], 0, a - 1), axis=1)
  tokens = jnp.where(s < clen[:, None], ctx_full, jnp.where(in_act, act, pad))
  return tokens.astype(jnp.int32), s < (clen + gen.length)[:, None]


def action_logprobs(policy, params, ctx, clen, gen, segment_len: int, pad: int):
  """`[N, A]` log pi(a_j | ctx, a_<j) of the generated tokens under `policy` (0 off valid),
  by one teacher-forced forward over the sample."""
  tokens, attn = sample_tokens(ctx, clen, gen, segment_len, pad)
  pos = jnp.broadcast_to(jnp.arange(segment_len, dtype=jnp.int32), tokens.shape)
  logits, _ = policy.forward(policy.graphdef, params, tokens, pos, attn)
  lp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
  nxt = jnp.take_along_axis(lp, tokens[:, 1:, None], axis=2)[..., 0]  # [N, L-1]: of token s+1
  at = clen[:, None] - 1 + jnp.arange(gen.tokens.shape[1])[None, :]  # action token j's
  got = jnp.take_along_axis(nxt, jnp.clip(at, 0, segment_len - 2), axis=1)
  return jnp.where(gen.valid, got, 0.0)


def gap(student_logp, teacher_logp, valid, length):
  """Mean per-token log pi_S - log pi_T over each row's action `[N]` (0 for an empty one)."""
  d = jnp.where(valid, student_logp - teacher_logp, 0.0).sum(axis=1)
  return d / jnp.maximum(length, 1).astype(jnp.float32)


def take_over(take, teacher_gen, student_gen):
  """Per row, the teacher's generation where `take [N]`, the student's elsewhere; decode steps
  of both."""
  pick = lambda a, b: jnp.where(take.reshape(take.shape + (1,) * (a.ndim - 1)), a, b)
  fields = {f.name: pick(getattr(teacher_gen, f.name), getattr(student_gen, f.name))
            for f in dataclasses.fields(student_gen) if f.name != "steps"}
  return student_gen.replace(**fields, steps=student_gen.steps + teacher_gen.steps)


def teacher_keys(keys):
  return jax.vmap(jax.random.fold_in, (0, None))(keys, _SALT)
