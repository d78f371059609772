"""Outcome (one score per episode) advantage estimators with group baselines.

verl's outcome estimators (ALGORITHMS.md §1.2-§1.7) as jittable functions of the per-episode
score s_i and an integer group id:
- GRPO: Shao et al., DeepSeekMath (arXiv 2402.03300); Dr.GRPO (std off): Liu et al. (arXiv
  2503.20783); GRPO pass@k: Chen et al. (arXiv 2503.19595).
- RLOO: Ahmadian et al. (arXiv 2402.14740). REINFORCE++-baseline: Hu (arXiv 2501.03262).
- ReMax: Li et al. (arXiv 2310.10505). OPO: Hao et al. (arXiv 2505.23585). GPG: Chu et al.
  (arXiv 2504.02546).

`*_scores` functions map scores `[R]` to advantages `[R]`; `verl_compat` wraps them with verl's
`[B, L]` signatures and the registered kernels here apply them to an EpisodeBatch (score =
sum of valid turn rewards, groups = batch.group_id, result at turn level). Every group
statistic is a segment op (`segments.group_stats`). Rows with weight 0 are padding: they
join no statistic and get advantage 0. Deviations inside a group whose valid scores are all
equal are set to exactly 0 (a float mean of equal numbers need not equal them, and dividing
that rounding error by a tiny std would give a spurious O(1) advantage).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.gae import masked_whiten
from agent_rl.credit.needs import BASELINE_RETURN, Needs, episode_extra
from agent_rl.credit.segments import group_stats
from agent_rl.rollout.batch import EpisodeBatch


class _Centered(NamedTuple):
  n: jax.Array  # [R] members (weight) of the row's group
  std: jax.Array  # [R] unbiased std of the row's group (0 for n <= 1)
  single: jax.Array  # [R] bool: the row's group has one member (mu := 0 there)
  const: jax.Array  # [R] bool: all valid scores of the row's group are equal
  dev: jax.Array  # [R] s - mu with mu = 0 for singletons and exactly 0 in constant groups


def _weight(scores: jax.Array, weight: Optional[jax.Array]) -> jax.Array:
  return jnp.ones_like(scores, jnp.float32) if weight is None else weight.astype(jnp.float32)


def _centered(scores, group_id, num_groups, weight) -> _Centered:
  s = scores.astype(jnp.float32)
  w = _weight(s, weight)
  st = group_stats(s, group_id, num_groups, w)
  on = w > 0
  gmax = jax.ops.segment_max(jnp.where(on, s, -jnp.inf), group_id, num_segments=num_groups)[group_id]
  gmin = jax.ops.segment_min(jnp.where(on, s, jnp.inf), group_id, num_segments=num_groups)[group_id]
  single = st.count <= 1
  const = gmax == gmin
  dev = jnp.where(single, s, jnp.where(const, 0.0, s - st.mean))
  return _Centered(st.count, st.std, single, const, jnp.where(on, dev, 0.0))


def grpo_scores(scores, group_id, num_groups: int, weight=None, *, norm_by_std: bool = True,
                epsilon: float = 1e-6) -> jax.Array:
  """GRPO (§1.2): A = (s - mu_g) / (sigma_g + eps), or s - mu_g (Dr.GRPO); singletons mu=0, sigma=1."""
  c = _centered(scores, group_id, num_groups, weight)
  if not norm_by_std:
    return c.dev
  return c.dev / (jnp.where(c.single, 1.0, c.std) + epsilon)


def grpo_vectorized_scores(scores, group_id, num_groups: int, weight=None, *, norm_by_std: bool = True,
                           epsilon: float = 1e-6, var_floor: float = 1e-6) -> jax.Array:
  """verl `grpo_vectorized` (§1.2): sigma_g = sqrt(max(var_unbiased, var_floor)); singletons mu=0, sigma=1.

  var_floor=1e-6 (sigma >= 1e-3) follows ALGORITHMS.md (verl @ b178a3c); verl 0.9.1 passes 0.0.
  """
  c = _centered(scores, group_id, num_groups, weight)
  if not norm_by_std:
    return c.dev
  sigma = jnp.where(c.single, 1.0, jnp.sqrt(jnp.maximum(jnp.square(c.std), var_floor)))
  return c.dev / (sigma + epsilon)


def _check_passk(count: jax.Array, weight: jax.Array) -> None:
  if isinstance(count, jax.core.Tracer):
    return
  if bool(jnp.any((count < 2) & (weight > 0))):
    raise ValueError("grpo_passk: every group needs at least 2 samples (group_id has a singleton group)")


def grpo_passk_scores(scores, group_id, num_groups: int, weight=None, *, norm_by_std: bool = True,
                      epsilon: float = 1e-6) -> jax.Array:
  """GRPO pass@k (§1.2): only the group argmax (first index on ties) gets r_max - r_2nd (/ (sigma+eps)).

  Groups need >= 2 members: eager calls raise ValueError; under jit a singleton gets 0.
  """
  s = scores.astype(jnp.float32)
  w = _weight(s, weight)
  on = w > 0
  st = group_stats(s, group_id, num_groups, w)
  _check_passk(st.count, w)
  r = jnp.arange(s.shape[0], dtype=jnp.int32)
  seg = lambda f, x: f(x, group_id, num_segments=num_groups)[group_id]
  smax = seg(jax.ops.segment_max, jnp.where(on, s, -jnp.inf))
  i_max = seg(jax.ops.segment_min, jnp.where(on & (s == smax), r, s.shape[0]))
  is_top = r == i_max
  second = seg(jax.ops.segment_max, jnp.where(on & ~is_top, s, -jnp.inf))
  adv = smax - second
  if norm_by_std:
    adv = adv / (st.std + epsilon)
  return jnp.where(is_top & on & (st.count >= 2), adv, 0.0)


def rloo_scores(scores, group_id, num_groups: int, weight=None, *, singleton: str = "raw") -> jax.Array:
  """RLOO (§1.3): A = n/(n-1) (s - mu_g) = s - mean of the others; n = 1 gives s ("raw", verl
  loop version) or 0 ("zero", verl `rloo_vectorized`)."""
  if singleton not in ("raw", "zero"):
    raise ValueError(f"rloo singleton must be 'raw' or 'zero', got {singleton!r}")
  c = _centered(scores, group_id, num_groups, weight)
  loo = c.n / jnp.maximum(c.n - 1.0, 1.0) * c.dev
  return jnp.where(c.single, c.dev if singleton == "raw" else 0.0, loo)


def reinforce_pp_baseline_scores(scores, group_id, num_groups: int, weight=None) -> jax.Array:
  """REINFORCE++-baseline before whitening (§1.4): a = s - mu_g, mu = 0 for singletons."""
  return _centered(scores, group_id, num_groups, weight).dev


def opo_scores(scores, lengths, group_id, num_groups: int, weight=None) -> jax.Array:
  """OPO (§1.6): A = s - sum_j |y_j| s_j / sum_j |y_j|; singleton baseline 0.

  A group whose lengths sum to 0 gets baseline 0 (verl would divide by zero).
  """
  s = scores.astype(jnp.float32)
  w = _weight(s, weight)
  c = _centered(s, group_id, num_groups, w)
  base = group_stats(s, group_id, num_groups, w * lengths.astype(jnp.float32)).mean
  dev = jnp.where(c.single | c.const, c.dev, s - base)  # exact 0 in constant groups
  return jnp.where(w > 0, dev, 0.0)


def gpg_scores(scores, group_id, num_groups: int, weight=None, *, f_norm: float = 1.0) -> jax.Array:
  """GPG (§1.7): A = alpha (s - mu_g) / f_norm with alpha = B / max(#{s != 0}, 1) over the batch.

  B counts non-padding rows; singletons mu = 0. (verl's `alpha` argument is always overwritten
  by this batch statistic, so it is not a parameter here.)
  """
  s = scores.astype(jnp.float32)
  w = _weight(s, weight)
  on = w > 0
  nonzero = jnp.sum(on & (s != 0)).astype(jnp.float32)
  alpha = jnp.sum(on).astype(jnp.float32) / jnp.maximum(nonzero, 1.0)
  return alpha * _centered(s, group_id, num_groups, w).dev / f_norm


# --- EpisodeBatch kernels (turn-level output) -----------------------------------------------


def episode_scores(batch: EpisodeBatch) -> tuple[jax.Array, jax.Array]:
  """(scores `[N]` = sum of valid turn rewards, weight `[N]` = 1 for episodes with a valid turn)."""
  valid = batch.valid.astype(jnp.float32)
  return jnp.sum(batch.reward.astype(jnp.float32) * valid, axis=1), jnp.any(batch.valid, axis=1)


def token_counts(batch: EpisodeBatch) -> jax.Array:
  """`[N]` f32 number of loss-mask tokens that belong to a valid turn (|y_i|)."""
  t = batch.num_turns
  valid_tok = jnp.take_along_axis(batch.valid, jnp.clip(batch.turn_index, 0, t - 1), axis=1)
  return jnp.sum(batch.loss_mask * (valid_tok & (batch.turn_index >= 0)), axis=1)


def _turn_credit(batch: EpisodeBatch, adv: jax.Array) -> Credit:
  return Credit(turn=adv[:, None] * batch.valid.astype(jnp.float32))


def _apply(fn, batch: EpisodeBatch, **kw) -> Credit:
  s, w = episode_scores(batch)
  return _turn_credit(batch, fn(s, batch.group_id, batch.num_episodes, w, **kw))


_BATCH_DOC = """
  Input: EpisodeBatch with reward/valid `[N, T]` and group_id `[N]` in [0, N); score
  s_i = sum_t reward * valid. Episodes without a valid turn are padding (excluded from group
  statistics, advantage 0); invalid turns get 0. Output: Credit(turn=A_i * valid) `[N, T]`.
"""


@register("grpo")
def grpo(batch: EpisodeBatch, *, norm_by_std: bool = True, epsilon: float = 1e-6) -> Credit:
  """GRPO (ALGORITHMS.md §1.2; DeepSeekMath, arXiv 2402.03300).

  A_i = (s_i - mu_g) / (sigma_g + eps) with unbiased sigma (norm_by_std=False: s_i - mu_g).
  Zero-variance group: A = 0 exactly. Singleton group: mu = 0, sigma = 1, so A = s/(1+eps)
  (the raw score, not 0), as verl.
  """
  return _apply(grpo_scores, batch, norm_by_std=norm_by_std, epsilon=epsilon)


@register("dr_grpo")
def dr_grpo(batch: EpisodeBatch) -> Credit:
  """Dr.GRPO advantages (ALGORITHMS.md §1.2; Liu et al., arXiv 2503.20783): A_i = s_i - mu_g.

  Zero-variance group: 0; singleton: s_i. The rest of Dr.GRPO is the loss side
  (loss_agg_mode=seq-mean-token-sum-norm, no KL loss), set in the config.
  """
  return _apply(grpo_scores, batch, norm_by_std=False)


@register("grpo_vectorized")
def grpo_vectorized(batch: EpisodeBatch, *, norm_by_std: bool = True, epsilon: float = 1e-6,
                    var_floor: float = 1e-6) -> Credit:
  """verl `grpo_vectorized` (ALGORITHMS.md §1.2): sigma = sqrt(max(var_unbiased, var_floor)).

  Zero-variance group: 0. Singleton: mu = 0, sigma = 1 (A = s/(1+eps)).
  """
  return _apply(grpo_vectorized_scores, batch, norm_by_std=norm_by_std, epsilon=epsilon, var_floor=var_floor)


@register("grpo_passk")
def grpo_passk(batch: EpisodeBatch, *, norm_by_std: bool = True, epsilon: float = 1e-6) -> Credit:
  """GRPO pass@k (ALGORITHMS.md §1.2; Chen et al., arXiv 2503.19595).

  Only the first argmax of each group gets (r_max - r_2nd)/(sigma_g + eps). Zero-variance
  group: 0. Singleton groups: ValueError on concrete inputs, 0 under jit.
  """
  return _apply(grpo_passk_scores, batch, norm_by_std=norm_by_std, epsilon=epsilon)


@register("rloo")
def rloo(batch: EpisodeBatch) -> Credit:
  """RLOO, verl loop version (ALGORITHMS.md §1.3; arXiv 2402.14740): A = s_i - mean_{j != i} s_j.

  Zero-variance group: 0. Singleton: A = s_i (verl loop-version edge case).
  """
  return _apply(rloo_scores, batch, singleton="raw")


@register("rloo_vectorized")
def rloo_vectorized(batch: EpisodeBatch) -> Credit:
  """RLOO, verl vectorized version (ALGORITHMS.md §1.3): as `rloo` but a singleton gets 0."""
  return _apply(rloo_scores, batch, singleton="zero")


@register("reinforce_pp_baseline")
def reinforce_pp_baseline(batch: EpisodeBatch) -> Credit:
  """REINFORCE++-baseline (ALGORITHMS.md §1.4; Hu, arXiv 2501.03262).

  a_i = s_i - mu_g (singleton mu = 0; zero-variance group a = 0), then whitened over all
  loss-mask tokens of the batch. Whitening the token broadcast of a_i equals whitening a_i
  with weight |y_i| (its token count), so this stays at turn level. Fewer than 2 tokens:
  ValueError eagerly, zeros under jit.
  """
  s, w = episode_scores(batch)
  a = reinforce_pp_baseline_scores(s, batch.group_id, batch.num_episodes, w)
  return _turn_credit(batch, masked_whiten(a, token_counts(batch) * w))


@register("remax", needs=Needs(baseline_rollout=True))
def remax(batch: EpisodeBatch) -> Credit:
  """ReMax (ALGORITHMS.md §1.5; Li et al., arXiv 2310.10505).

  b_i = `batch.extras["baseline_return"]` `[N, T]` read on turn 0: the return of a greedy
  rollout of each episode's task (`credit.baseline.attach_baseline_return`). At turn
  level, G_t = sum_{t' >= t} reward_t' valid_t' (a turn's tokens see the rewards of their
  own and later turns), A_t = G_t - b_i. No groups; padding turns get 0. Returns
  Credit(turn=A * valid, returns=G * valid).
  """
  valid = batch.valid.astype(jnp.float32)
  r = batch.reward.astype(jnp.float32) * valid
  g = jnp.flip(jnp.cumsum(jnp.flip(r, 1), axis=1), 1)
  b = episode_extra(batch, BASELINE_RETURN, "remax").astype(jnp.float32)
  return Credit(turn=(g - b[:, None]) * valid, returns=g * valid)


@register("opo")
def opo(batch: EpisodeBatch) -> Credit:
  """OPO (ALGORITHMS.md §1.6; Hao et al., arXiv 2505.23585).

  Length-weighted baseline b_g = sum |y_j| s_j / sum |y_j| over the group (|y| = loss-mask
  tokens of valid turns); A_i = s_i - b_g. Zero-variance group: 0. Singleton: b = 0 (A = s).
  """
  s, w = episode_scores(batch)
  return _turn_credit(batch, opo_scores(s, token_counts(batch), batch.group_id, batch.num_episodes, w))


@register("gpg")
def gpg(batch: EpisodeBatch, *, f_norm: float = 1.0) -> Credit:
  """GPG (ALGORITHMS.md §1.7; Chu et al., arXiv 2504.02546).

  A_i = alpha (s_i - mu_g) / f_norm, alpha = N_valid / max(#{s_i != 0}, 1) over the batch.
  Zero-variance group: 0. Singleton: mu = 0 (A = alpha s). Pair with the `gpg` loss.
  """
  return _apply(gpg_scores, batch, f_norm=f_norm)


for _k in (grpo, grpo_vectorized, grpo_passk, dr_grpo, rloo, rloo_vectorized, reinforce_pp_baseline, opo, gpg):
  _k.__doc__ += _BATCH_DOC
