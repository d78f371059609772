"""Token-level return estimators: GAE, REINFORCE++ discounted returns, RAGEN bi-level GAE.

- GAE: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
  Estimation" (arXiv 1506.02438), as verl `compute_gae_advantage_return` (ALGORITHMS.md §1.1).
- REINFORCE++: Hu, "REINFORCE++" (arXiv 2501.03262), verl `reinforce_plus_plus` (§1.4).
- Bi-level GAE: RAGEN / StarPO, Wang et al. (arXiv 2504.20073), `compute_bi_level_gae_advantage_return`
  (§3): a turn-level GAE over reward positions, whose results seed a token-level GAE per turn.

Every backward recursion is one `jax.lax.scan(reverse=True)` over the token axis carrying `[B]`
vectors, so the whole batch advances together. The array-level functions here take verl's
`[B, L]` tensors; `verl_compat` exposes them under verl's names. The registered kernels read an
EpisodeBatch and put each valid turn's reward on the last loss-mask token of that turn.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from agent_rl.credit.needs import Needs
from agent_rl.credit.base import Credit, register
from agent_rl.rollout.batch import EpisodeBatch

_WHITEN_EPS = 1e-8  # verl torch_functional.masked_mean / masked_whiten


def _check_count(n: jax.Array, where: str) -> None:
  # verl's masked_var raises when the mask selects <= 1 element. A traced count cannot raise,
  # so the check runs only on concrete inputs (eager calls); under jit see masked_whiten.
  if not isinstance(n, jax.core.Tracer) and float(n) <= 1.0:
    raise ValueError(f"{where}: the mask selects {float(n):g} elements; whitening needs more than 1 "
                     "(verl masked_var raises here too; use a larger batch)")


def masked_whiten(values: jax.Array, mask: jax.Array, *, shift_mean: bool = True) -> jax.Array:
  """verl `masked_whiten` (ALGORITHMS.md §0): whitens `values` with stats over the whole mask.

  mu = sum(m x) / (sum m + 1e-8); var = sum(m (x - mu)^2) / (sum m + 1e-8) * sum m / (sum m - 1);
  out = (x - mu) / sqrt(var + 1e-8) at every position (masked ones included, as in verl).
  `mask` may be a real weight (e.g. a token count per row: whitening per-row values with
  weights |y_i| equals whitening their token broadcast).

  Sum of the mask <= 1: eager (concrete) calls raise ValueError like verl; under jit, where it
  cannot raise, the result is all zeros (no update signal) rather than NaN/inf.
  """
  m = mask.astype(jnp.float32)
  x = values.astype(jnp.float32)
  n = jnp.sum(m)
  _check_count(n, "masked_whiten")
  mean = jnp.sum(x * m) / (n + _WHITEN_EPS)
  var = jnp.sum(jnp.square(x - mean) * m) / (n + _WHITEN_EPS)
  var = var * n / jnp.where(n > 1, n - 1.0, 1.0)
  out = (x - mean) * jax.lax.rsqrt(var + _WHITEN_EPS)
  if not shift_mean:
    out = out + mean
  return jnp.where(n > 1, out, 0.0)


def _scan_tokens(step, carry, xs, unroll):
  """Reverse scan over the token axis of `[B, L]` arrays; returns stacked `[B, L]` outputs."""
  xs_t = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), xs)
  _, ys = jax.lax.scan(step, carry, xs_t, reverse=True, unroll=unroll)
  return jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), ys)


def gae_advantage_return(token_level_rewards: jax.Array, values: jax.Array, response_mask: jax.Array,
                         gamma: float = 1.0, lam: float = 1.0, *, unroll: int = 4):
  """GAE with verl's masked-token skipping (§1.1). All inputs `[B, L]`; returns (adv, ret) `[B, L]`.

  Masked tokens (m = 0) carry the next valid value and the running advantage unchanged, so
  values and advantages bootstrap across observation tokens; a reward on a masked token is
  dropped. Ret = A + V before whitening; A is then masked_whiten-ed over the whole batch.
  """
  r = token_level_rewards.astype(jnp.float32)
  v = values.astype(jnp.float32)
  m = response_mask.astype(jnp.float32)

  def step(carry, x):
    nv, g = carry
    rt, vt, mt = x
    delta = rt + gamma * nv - vt
    g_new = delta + gamma * lam * g
    nv = mt * vt + (1.0 - mt) * nv
    g = mt * g_new + (1.0 - mt) * g
    return (nv, g), g

  zero = jnp.zeros(r.shape[:1], jnp.float32)
  adv = _scan_tokens(step, (zero, zero), (r, v, m), unroll)
  returns = adv + v
  return masked_whiten(adv, m), returns


def reinforce_pp_returns(token_level_rewards: jax.Array, response_mask: jax.Array, gamma: float = 1.0,
                         *, reset_at_mask: bool = True, unroll: int = 4) -> jax.Array:
  """REINFORCE++ discounted returns G `[B, L]` (§1.4).

  reset_at_mask=True (ALGORITHMS.md, verl @ b178a3c): run <- r_t + gamma run; G_t <- run;
    run <- run m_t, so returns never flow across a masked token.
  reset_at_mask=False (verl 0.9.1): masked tokens are skipped: G_t = (r_t + gamma run) m_t and
    run carries through masked tokens unchanged, so later-turn rewards reach earlier turns.
  """
  r = token_level_rewards.astype(jnp.float32)
  m = response_mask.astype(jnp.float32)

  def step(run, x):
    rt, mt = x
    new = rt + gamma * run
    if reset_at_mask:
      return new * mt, new
    return new * mt + run * (1.0 - mt), new * mt

  return _scan_tokens(step, jnp.zeros(r.shape[:1], jnp.float32), (r, m), unroll)


def reinforce_pp_advantage_return(token_level_rewards, response_mask, gamma: float = 1.0, *,
                                  reset_at_mask: bool = True):
  """REINFORCE++ (§1.4): A = masked_whiten(G, m) m, returns = G. Inputs `[B, L]`."""
  g = reinforce_pp_returns(token_level_rewards, response_mask, gamma, reset_at_mask=reset_at_mask)
  m = response_mask.astype(jnp.float32)
  return masked_whiten(g, m) * m, g


def bilevel_gae_advantage_return(token_level_rewards: jax.Array, values: jax.Array, loss_mask: jax.Array,
                                 gamma: float = 1.0, lam: float = 1.0, high_level_gamma: float = 0.95,
                                 *, turn_ends: Optional[jax.Array] = None, unroll: int = 1):
  """RAGEN bi-level GAE (§3). Inputs `[B, L]`; returns (adv whitened over loss_mask, returns).

  Turn ends E are the positions with r != 0 (RAGEN: *a turn whose reward is exactly 0 is not a
  boundary*), unless `turn_ends` `[B, L]` bool gives them explicitly. High level, backwards over
  E: delta = r_e + gh V_next_end - V_e, g = delta + gh lam g, r~_e = g + V_e. Low level, backwards
  over loss-mask tokens: at an end V_next = 0 and g resets to 0, else V_next = V at the next
  loss-mask token (0 after the last one, where RAGEN would index out of range); delta_t =
  r~_t + gamma V_next - V_t, A_t = g = delta + gamma lam g, R_t = g + V_t. Ends on masked tokens
  keep their high-level A (and R = A + V) there, as in RAGEN; other masked tokens get 0.
  """
  r = token_level_rewards.astype(jnp.float32)
  v = values.astype(jnp.float32)
  m = loss_mask.astype(jnp.float32)
  ends = (r != 0) if turn_ends is None else turn_ends.astype(bool)
  zero = jnp.zeros(r.shape[:1], jnp.float32)

  def high(carry, x):
    nv, g = carry
    rt, vt, et = x
    g_new = (rt + high_level_gamma * nv - vt) + high_level_gamma * lam * g
    return (jnp.where(et, vt, nv), jnp.where(et, g_new, g)), jnp.where(et, g_new, 0.0)

  a_hi = _scan_tokens(high, (zero, zero), (r, v, ends), unroll)
  r_tilde = jnp.where(ends, a_hi + v, r)

  def low(carry, x):
    nv, g = carry
    rt, vt, mt, et, ah = x
    nv_used = jnp.where(et, 0.0, nv)
    g_prev = jnp.where(et, 0.0, g)
    g_new = (rt + gamma * nv_used - vt) + gamma * lam * g_prev
    valid = mt > 0
    adv = jnp.where(valid, g_new, jnp.where(et, ah, 0.0))
    ret = jnp.where(valid, g_new + vt, jnp.where(et, ah + vt, 0.0))
    return (jnp.where(valid, vt, nv), jnp.where(valid, g_new, g)), (adv, ret)

  adv, ret = _scan_tokens(low, (zero, zero), (r_tilde, v, m, ends, a_hi), unroll)
  return masked_whiten(adv, m), ret


# --- EpisodeBatch kernels -------------------------------------------------------------------


def _turn_end_tokens(batch: EpisodeBatch) -> tuple[jax.Array, jax.Array]:
  """(is_end `[N, L]` bool, turn reward gathered per token `[N, L]`).

  is_end marks the last loss-mask token of each turn (tokens with turn_index == t). A valid
  turn without any loss-mask token has no end, so its reward never reaches a token.
  """
  n, t = batch.reward.shape
  ln = batch.num_tokens
  tok_ok = (batch.loss_mask > 0) & (batch.turn_index >= 0)
  ti = jnp.clip(batch.turn_index, 0, t - 1)
  pos = jnp.where(tok_ok, jnp.arange(ln, dtype=jnp.int32)[None, :], -1)
  last = jnp.full((n, t), -1, jnp.int32).at[jnp.arange(n)[:, None], ti].max(pos)
  is_end = tok_ok & (jnp.take_along_axis(last, ti, axis=1) == jnp.arange(ln)[None, :])
  r_turn = batch.reward.astype(jnp.float32) * batch.valid.astype(jnp.float32)
  return is_end, jnp.take_along_axis(r_turn, ti, axis=1)


def token_rewards(batch: EpisodeBatch) -> jax.Array:
  """`[N, L]` f32: each valid turn's reward on the last loss-mask token of that turn, else 0."""
  is_end, r = _turn_end_tokens(batch)
  return jnp.where(is_end, r, 0.0)


def _values(batch: EpisodeBatch, kernel: str) -> jax.Array:
  if batch.values is None:
    raise ValueError(f"credit kernel {kernel!r} needs batch.values ([N, L] critic values); it is None")
  return batch.values


@register("gae", needs=Needs(critic=True))
def gae(batch: EpisodeBatch, *, gamma: float = 1.0, lam: float = 1.0) -> Credit:
  """GAE over an EpisodeBatch (ALGORITHMS.md §1.1; Schulman et al. arXiv 1506.02438).

  Inputs: batch.reward/valid `[N, T]`, batch.values/loss_mask/turn_index `[N, L]`. Turn rewards
  sit on the last loss-mask token of their turn; observation tokens and padding (m = 0) are
  skipped (values and advantages bootstrap across them). Groups play no role, so zero-variance
  groups and singletons need no special case. Returns token-level Credit: token = whitened
  A * loss_mask `[N, L]`, returns = A + V `[N, L]` (before whitening). Whitening over fewer
  than 2 mask tokens: ValueError eagerly, zeros under jit (see masked_whiten).
  """
  adv, ret = gae_advantage_return(token_rewards(batch), _values(batch, "gae"), batch.loss_mask, gamma, lam)
  return Credit(token=adv * batch.loss_mask, returns=ret)


@register("reinforce_pp")
def reinforce_pp(batch: EpisodeBatch, *, gamma: float = 1.0, reset_at_mask: bool = True) -> Credit:
  """REINFORCE++ over an EpisodeBatch (ALGORITHMS.md §1.4; Hu, arXiv 2501.03262).

  Inputs as `gae` (no values). G is the discounted return over tokens; with the default
  reset_at_mask=True it resets at every masked token, so in a multi-turn row a turn only sees
  its own reward (verl @ b178a3c); reset_at_mask=False carries returns across observation
  tokens (verl 0.9.1). No groups (zero-variance groups/singletons are not special). Returns
  token-level Credit: token = masked_whiten(G) * loss_mask, returns = G `[N, L]`.
  """
  adv, ret = reinforce_pp_advantage_return(token_rewards(batch), batch.loss_mask, gamma,
                                           reset_at_mask=reset_at_mask)
  return Credit(token=adv, returns=ret)


@register("bilevel_gae", needs=Needs(critic=True))
def bilevel_gae(batch: EpisodeBatch, *, gamma: float = 1.0, lam: float = 1.0, high_level_gamma: float = 0.95,
                every_turn_is_boundary: bool = False) -> Credit:
  """RAGEN bi-level GAE over an EpisodeBatch (ALGORITHMS.md §3; RAGEN arXiv 2504.20073).

  Inputs as `gae` (needs batch.values). Turn rewards sit on the last loss-mask token of their
  turn. By default (RAGEN parity) a turn end is a token with nonzero reward, so a turn whose
  reward is exactly 0 is not a boundary and its tokens continue the next turn's token-level
  GAE; every_turn_is_boundary=True uses every valid turn's last loss-mask token instead (the
  documented intent). No groups. Returns token-level Credit: token = whitened A * loss_mask,
  returns = R `[N, L]`.
  """
  is_end, r_turn = _turn_end_tokens(batch)
  r_tok = jnp.where(is_end, r_turn, 0.0)
  ends = is_end if every_turn_is_boundary else None
  adv, ret = bilevel_gae_advantage_return(r_tok, _values(batch, "bilevel_gae"), batch.loss_mask, gamma, lam,
                                          high_level_gamma, turn_ends=ends)
  return Credit(token=adv * batch.loss_mask, returns=ret)
