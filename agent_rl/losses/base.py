"""The loss contract: the policy-loss registry, `agg_loss`, and per-token helpers.

Every policy loss is a pure, jittable function registered by name (shared/ALGORITHMS.md §1.9):

    loss, metrics = fn(logprobs, old_logprobs, advantages, mask, *,
                       loss_agg_mode="token-mean", key=None, turn_index=None, weights=None,
                       num_tokens=None, num_seqs=None, scale=None, **hparams)

with `logprobs, old_logprobs, advantages, mask, weights, turn_index: [B, L]`. `weights` are the
rollout importance-sampling weights that multiply the per-token loss before aggregation; `key`
is used only by losses with random selection (clip_cov); `turn_index` only by turn-level losses
(sorl, reinforce). Losses that do not use an argument accept and ignore it, so a learner can call
every loss the same way. An unknown hparam fails with Python's "unexpected keyword argument".
`metrics` always holds the scalars `clipfrac, clipfrac_lower, ppo_kl, approx_kl` (0 where a
loss has no such notion) plus loss-specific extras, so the metrics pytree is uniform.

Positions with mask 0 may hold any finite value (padding, prompt, observation tokens).
"""
from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp

# Token log-probs / entropies from logits have one implementation, shared with the learner's
# chunked hidden-state path (`agent_rl.models.logprobs`); the losses keep their public names.
from agent_rl.models.logprobs import token_entropy as entropy_from_logits  # noqa: F401
from agent_rl.models.logprobs import token_logprobs  # noqa: F401
from agent_rl.registry import Registry

LOSSES = Registry("policy loss")
register = LOSSES.register
get = LOSSES.get
names = LOSSES.names

Metrics = Dict[str, jax.Array]


def _nonzero(n: jax.Array) -> jax.Array:
  # A zero count only occurs when every summand is zero too, so dividing by 1 yields 0.
  return jnp.where(n > 0, n, 1)


def _token_mean(lm, m, *, num_tokens, num_seqs, scale):
  del num_seqs, scale
  n = jnp.sum(m) if num_tokens is None else num_tokens
  return jnp.sum(lm) / _nonzero(n)


def _seq_mean_token_sum(lm, m, *, num_tokens, num_seqs, scale):
  del num_tokens, scale
  b = jnp.sum(jnp.sum(m, axis=-1) > 0) if num_seqs is None else num_seqs
  return jnp.sum(lm) / _nonzero(b)


def _seq_mean_token_mean(lm, m, *, num_tokens, num_seqs, scale):
  del num_tokens, scale
  n_i = jnp.sum(m, axis=-1)
  seq = jnp.sum(lm, axis=-1) / (n_i + 1e-8)
  b = jnp.sum(n_i > 0) if num_seqs is None else num_seqs
  return jnp.sum(seq) / _nonzero(b)


def _seq_mean_token_sum_norm(lm, m, *, num_tokens, num_seqs, scale):
  # verl 0.9.1: a mean over non-empty sequences, then / C (releases <= 0.4 summed over them).
  del num_tokens
  c = lm.shape[-1] if scale is None else scale
  b = jnp.sum(jnp.sum(m, axis=-1) > 0) if num_seqs is None else num_seqs
  return jnp.sum(lm) / _nonzero(b) / c


AGG_MODES: Dict[str, Callable[..., jax.Array]] = {
    "token-mean": _token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def check_mode(mode: str) -> None:
  if mode not in AGG_MODES:
    raise ValueError(f"unknown loss_agg_mode {mode!r}; known: {', '.join(AGG_MODES)}")


def masked(x: jax.Array, m: jax.Array) -> jax.Array:
  """`m * x` with masked positions forced to exactly 0 (even if `x` is inf/nan there)."""
  return jnp.where(m != 0, x * m, jnp.zeros((), x.dtype))


def agg_loss(loss_mat: jax.Array, mask: jax.Array, mode: str = "token-mean", *,
             num_tokens: Optional[jax.Array] = None, num_seqs: Optional[jax.Array] = None,
             scale: Optional[float] = None) -> jax.Array:
  """Aggregates a `[B, L]` per-token loss to a scalar (ALGORITHMS.md §1.10, verl `agg_loss`).

  Modes (m = mask, ℓ = loss_mat, N_tok / B_eff = global counts when given, else local):
    token-mean:              Σ m·ℓ / N_tok,  N_tok = Σ m
    seq-mean-token-sum:      Σ_i Σ_t m·ℓ / B_eff,  B_eff = #{i : Σ_t m > 0}
    seq-mean-token-mean:     Σ_i [Σ_t m·ℓ / (Σ_t m + 1e-8)] / B_eff
    seq-mean-token-sum-norm: Σ_i Σ_t m·ℓ / B_eff / C,  C = `scale` or the padded length L
                             (verl 0.9.1; Dr.GRPO's 1/G Σ_t / MAX_TOKENS sets C = max length).
  An all-masked batch gives 0.

  verl multiplies by `dp_size` because each data-parallel rank divides its *local* sum by the
  *global* count and the gradients are then averaged over ranks. Here the loss is one program
  over the globally sharded mini-batch (XLA inserts the reductions), so the sums are already
  global and no dp factor exists. `num_tokens`/`num_seqs` are for callers that split a
  mini-batch into micro-batches (gradient accumulation) and sum their losses: pass the
  mini-batch counts so the result equals the whole-mini-batch loss.

  Args:
    loss_mat: `[B, L]` per-token loss.
    mask: `[B, L]` bool/float loss mask (a float mask acts as per-token weights).
    mode: one of `AGG_MODES`.
    num_tokens, num_seqs: optional global counts (scalars) replacing Σm and B_eff (verl's
      `batch_num_tokens`, `global_batch_size`).
    scale: C of `seq-mean-token-sum-norm` (verl's `loss_scale_factor`).
  """
  check_mode(mode)
  m = mask.astype(loss_mat.dtype)
  return AGG_MODES[mode](masked(loss_mat, m), m, num_tokens=num_tokens, num_seqs=num_seqs,
                         scale=scale)


def local_counts(unit: str) -> Callable[[Callable], Callable]:
  """Marks a policy loss that aggregates with its own batch's counts and ignores `num_tokens`
  / `num_seqs`; `unit` says what it averages over: "rows" (every row, empty ones too) or
  "turns" (the non-empty (row, turn) items of `turn_index`; the non-empty rows without one).
  A micro-batch's value is then weighted by its share of the minibatch's units
  (`objective.terms.policy_term`), verl's micro-batch convention: exact for geo_mean (rows),
  for reinforce (turns) and for sorl (turns) unless its clip-fraction norm triggers, which is
  a slice's own statistic."""
  if unit not in ("rows", "turns"):
    raise ValueError(f"local_counts: unit must be 'rows' or 'turns', got {unit!r}")

  def mark(fn: Callable) -> Callable:
    fn.local_counts = unit
    return fn
  return mark


class Counts(NamedTuple):
  """A whole minibatch's aggregation counts (scalars), for a loss computed a micro-batch at a
  time (`train.step`, gradient accumulation): `agg_loss(..., **counts.agg())` over a slice
  then sums, over the slices, to the whole minibatch's loss (ALGORITHMS.md §1.10's global
  `batch_num_tokens` / `global_batch_size`). num_rows: the minibatch's rows, for terms that
  average over rows (DPO's pairs). num_turns: its non-empty (row, turn) items, for the losses
  that average over turns (reinforce, sorl); None where no turn index was counted."""
  num_tokens: jax.Array
  num_seqs: jax.Array
  num_rows: int
  num_turns: Optional[jax.Array] = None

  def agg(self) -> dict:
    """`agg_loss`'s / a policy loss's count kwargs."""
    return {"num_tokens": self.num_tokens, "num_seqs": self.num_seqs}


def mask_counts(mask: jax.Array, turn_index: Optional[jax.Array] = None) -> Counts:
  """Counts of a `[B, L]` loss mask: Σm (a float mask's weights summed), the number of rows
  with Σ_t m > 0 (exactly what `agg_loss` counts locally) and the number of (row, turn)
  items with a loss token at `turn_index >= 0` (reinforce / sorl's items; without a turn
  index, the non-empty rows)."""
  m = mask.astype(jnp.float32)
  num_seqs = jnp.sum(jnp.sum(m, axis=-1) > 0)
  if turn_index is None:
    num_turns = num_seqs
  else:
    num_turns = jnp.sum(turn_items(m, turn_index)[2] > 0)
  return Counts(num_tokens=jnp.sum(m), num_seqs=num_seqs, num_rows=int(mask.shape[0]),
                num_turns=num_turns)


def masked_mean(x: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
  """Σ m·x / Σ m over `axis` (0 where the mask is empty)."""
  m = mask.astype(x.dtype)
  return jnp.sum(masked(x, m), axis=axis) / _nonzero(jnp.sum(m, axis=axis))


def float_dtype(x: jax.Array):
  """At least float32 (bf16 log-probs are upcast; float64 stays float64 under x64)."""
  return jnp.promote_types(x.dtype, jnp.float32)


def check_policy_inputs(name: str, logprobs, old_logprobs, advantages, mask, weights=None,
                        turn_index=None, loss_agg_mode: str = "token-mean"):
  """Validates shapes / mode and returns `(logprobs, old, adv, mask, weights)` as floats."""
  check_mode(loss_agg_mode)
  shape = jnp.shape(logprobs)
  if len(shape) != 2:
    raise ValueError(f"{name}: logprobs must be [B, L], got shape {shape}")
  fields = dict(old_logprobs=old_logprobs, advantages=advantages, mask=mask, weights=weights,
                turn_index=turn_index)
  for field, value in fields.items():
    if value is not None and jnp.shape(value) != shape:
      raise ValueError(f"{name}: {field} has shape {jnp.shape(value)}, expected {shape} "
                       "(same as logprobs)")
  dt = float_dtype(logprobs)
  cast = lambda v: None if v is None else jnp.asarray(v).astype(dt)
  return (cast(logprobs), cast(old_logprobs), cast(advantages), cast(mask), cast(weights))


def resolve_clip(clip_ratio, clip_ratio_low, clip_ratio_high):
  """(ε_low, ε_high), each defaulting to ε = clip_ratio (verl's clip-higher convention)."""
  low = clip_ratio if clip_ratio_low is None else clip_ratio_low
  high = clip_ratio if clip_ratio_high is None else clip_ratio_high
  return low, high


def ratio_metrics(delta: jax.Array, m: jax.Array, clipfrac=0.0, clipfrac_lower=0.0) -> Metrics:
  """The uniform metric set.

  ppo_kl = mean(−Δ) (verl's); approx_kl = mean(ρ − 1 − Δ), Schulman's low-variance k3 estimate
  of KL(π_old ‖ πθ) on the behaviour samples (Δ clamped to ±20 so it stays finite).
  """
  delta = jax.lax.stop_gradient(delta)
  dc = jnp.clip(delta, -20.0, 20.0)
  zero = jnp.zeros((), delta.dtype)
  return {
      "clipfrac": zero + clipfrac,
      "clipfrac_lower": zero + clipfrac_lower,
      "ppo_kl": masked_mean(-delta, m),
      "approx_kl": masked_mean(jnp.expm1(dc) - dc, m),
  }


def turn_segments(turn_index: jax.Array) -> jax.Array:
  """Flat segment ids `[B, L]` int32 in `[0, B·L)`: one id per distinct (row, turn_index).

  Tokens of one turn need not be contiguous: ids come from sorting each row's turn indices,
  so any integer labels work without a static number of turns. Callers exclude
  `turn_index < 0` (prompt) through the mask.
  """
  b, l = turn_index.shape
  order = jnp.argsort(turn_index, axis=1, stable=True)
  st = jnp.take_along_axis(turn_index, order, axis=1)
  new = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), (st[:, 1:] != st[:, :-1]).astype(jnp.int32)],
                        axis=1)
  dense_sorted = jnp.cumsum(new, axis=1)
  rows = jnp.arange(b)[:, None]
  dense = jnp.zeros((b, l), jnp.int32).at[rows, order].set(dense_sorted)
  return dense + rows.astype(jnp.int32) * l


def segment_sum(x: jax.Array, seg: jax.Array) -> jax.Array:
  """Sums `[B, L]` values into the `B·L` segments of `turn_segments`."""
  return jax.ops.segment_sum(x.reshape(-1), seg.reshape(-1), num_segments=seg.size)


def turn_items(m: jax.Array, turn_index: jax.Array):
  """The (row, turn) items of a `[B, L]` float loss mask: `(tm, seg, n_k)` with tm the mask
  less the prompt (`turn_index < 0`), seg `turn_segments(turn_index)` and n_k `[B·L]` each
  item's loss tokens (an item exists where n_k > 0): reinforce's and sorl's items, and the
  turns `mask_counts` counts."""
  tm = m * (turn_index >= 0)
  seg = turn_segments(turn_index)
  return tm, seg, segment_sum(tm, seg)


def entropy_loss(logits: jax.Array, mask: jax.Array, loss_agg_mode: str = "token-mean",
                 **agg) -> jax.Array:
  """Entropy of `[B, L, V]` logits aggregated with `loss_agg_mode` (verl `compute_entropy_loss`)."""
  return agg_loss(entropy_from_logits(logits), mask, loss_agg_mode, **agg)
