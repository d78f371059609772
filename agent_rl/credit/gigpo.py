"""GiGPO: group-in-group advantages (episode level + anchor-state step level), on device.

Paper: Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training" (GiGPO,
verl-agent `gigpo/core_gigpo.py`); spec in shared/ALGORITHMS.md §2.

verl-agent stores one row per (trajectory, step); our EpisodeBatch has those rows as the
valid turns of `[N, T]`. "Row-weighted" statistics (`compute_mean_std_cross_steps=True`)
become weights over valid turns, trajectory-once statistics weight each episode's first
valid turn. Anchor-state groups are exact (group_id, state_hash) ids from a scatter hash
table (`graph.hash_ids`), never a Python dict. The building blocks here (`normalize`,
`episode_advantage`, `discounted_returns`, `anchor_ids`) are shared by the other
turn-aware kernels.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.graph import hash_ids
from agent_rl.credit.segments import group_stats

NORM_MODES = ("mean_norm", "mean_std_norm")
SINGLETON_MODES = ("raw", "zero")


def check_norm(norm: str) -> None:
  if norm not in NORM_MODES:
    raise ValueError(f"norm must be one of {NORM_MODES}, got {norm!r}")


def normalize(x: jax.Array, gid: jax.Array, num_groups: int, weight: jax.Array, *,
              norm: str = "mean_norm", eps: float = 1e-6, singleton: str = "raw",
              std: str = "bessel") -> jax.Array:
  """Group-relative values of `x` (shape kept): `x - mu_g` or `(x - mu_g) / (sigma_g + eps)`.

  Args:
    x: `[...]` f32 row values; gid: `[...]` i32 group of each row in `[0, num_groups)`.
    weight: `[...]` row weights (0 = not counted; a row is still normalised with its group's
      statistics, as verl-agent normalises every row with the stats of its uid).
    norm: "mean_norm" (no std, the verl-agent default) or "mean_std_norm" (Bessel std).
    singleton: groups with count == 1 use mu = 0, sigma = 1 ("raw": the row keeps its value,
      verl's GRPO convention) or mu = x, sigma = 1 ("zero": A = 0, GiGPO's step level).
    std: "bessel" (torch.std, ddof 1) or "pop" (sqrt(population var + 1e-8), PiCA's GRPO).

  Zero-variance groups (all counted members equal) give exactly 0: the centred value is
  forced to 0 there, so float rounding of the mean cannot leak through the 1/eps scale.
  """
  check_norm(norm)
  if singleton not in SINGLETON_MODES:
    raise ValueError(f"singleton must be one of {SINGLETON_MODES}, got {singleton!r}")
  x = x.astype(jnp.float32)
  w = weight.astype(jnp.float32)
  st = group_stats(x, gid, num_groups, w)
  flat_g, flat_x, flat_w = gid.reshape(-1), x.reshape(-1), w.reshape(-1)
  hi = jax.ops.segment_max(jnp.where(flat_w > 0, flat_x, -jnp.inf), flat_g, num_segments=num_groups)
  lo = jax.ops.segment_min(jnp.where(flat_w > 0, flat_x, jnp.inf), flat_g, num_segments=num_groups)
  # A row equal to its group's constant value (rows with weight 0 may differ from it).
  at_const = ((hi == lo)[flat_g] & (flat_x == hi[flat_g])).reshape(x.shape)
  single = st.count == 1
  mean = st.mean if singleton == "zero" else jnp.where(single, 0.0, st.mean)
  keep_raw = single if singleton == "raw" else jnp.zeros_like(single)
  centred = jnp.where(at_const & ~keep_raw, 0.0, x - mean)
  if norm == "mean_norm":
    return centred
  if std not in ("bessel", "pop"):
    raise ValueError(f"std must be 'bessel' or 'pop', got {std!r}")
  sd = st.std if std == "bessel" else jnp.sqrt(st.pop_std ** 2 + 1e-8)
  sd = jnp.where(st.count <= 1, 1.0, sd)
  return centred / (sd + eps)


def discounted_returns(reward: jax.Array, valid: jax.Array, gamma) -> jax.Array:
  """`G_t = r_t + gamma * G_{t+1}` along turns (reverse scan); rewards of invalid turns are 0.

  reward, valid: `[N, T]`. Returns `[N, T]` f32 (0 on turns after the last valid one).
  """
  r = jnp.where(valid, reward, 0.0).astype(jnp.float32)

  def step(carry, r_t):
    g = r_t + gamma * carry
    return g, g

  _, g = jax.lax.scan(step, jnp.zeros(r.shape[0], jnp.float32), r.T, reverse=True)
  return g.T


def row_groups(group_id: jax.Array, num_turns: int) -> jax.Array:
  """`[N]` group ids broadcast to the `[N, T]` turn rows."""
  return jnp.broadcast_to(group_id.astype(jnp.int32)[:, None], (group_id.shape[0], num_turns))


def first_valid(valid: jax.Array) -> jax.Array:
  """`[N, T]` bool: the first valid turn of each episode (its trajectory-once row)."""
  return valid & (jnp.cumsum(valid, axis=1) == 1)


def episode_scores(batch, invalid_penalty: float = 0.1) -> jax.Array:
  """verl-agent's row score `[N, T]`: episode return R = sum of valid-turn rewards, minus
  `invalid_penalty` on the row's own invalid-action turn (0 on padding)."""
  valid = batch.valid
  ret = jnp.sum(jnp.where(valid, batch.reward, 0.0), axis=1, keepdims=True)
  invalid = valid & ~batch.valid_action
  return jnp.where(valid, ret - invalid_penalty * invalid, 0.0)


def episode_advantage(batch, *, norm: str = "mean_norm", cross_steps: bool = True,
                      invalid_penalty: float = 0.1, eps: float = 1e-6,
                      group_key: jax.Array | None = None) -> jax.Array:
  """GiGPO's episode-relative A^E `[N, T]` (`episode_norm_reward`, §2).

  cross_steps=True counts every valid turn (row-weighted); False counts each episode once
  (its first valid turn's score, as verl-agent keeps the first row of each traj_uid).
  Singleton groups: mu = 0, sigma = 1 (A^E = raw score). `group_key` `[N, T]` i32 in
  `[0, N*T)` overrides the (group_id) key (Dr. MAS's (uid, agent) key).
  """
  n, t = batch.valid.shape
  s = episode_scores(batch, invalid_penalty)
  w = batch.valid if cross_steps else first_valid(batch.valid)
  gid = row_groups(batch.group_id, t) if group_key is None else group_key
  a = normalize(s, gid, n * t, w, norm=norm, eps=eps, singleton="raw")
  return jnp.where(batch.valid, a, 0.0)


def anchor_ids(group_id: jax.Array, state_hash: jax.Array, valid: jax.Array) -> tuple[jax.Array, int]:
  """`([N, T] i32 ids, M)`: anchor-state cluster ids in `[0, M)`; equal (group_id, state_hash)
  <-> equal id among valid turns (exact equality, `build_step_group` without similarity).
  Built by `graph.hash_ids` (sort-free; XLA's sort dominated the kernel's time)."""
  n, t = valid.shape
  g = row_groups(group_id, t).reshape(-1)
  ids, m = hash_ids(g, state_hash.reshape(-1), valid.reshape(-1))
  return ids.reshape(n, t), m


def step_advantage(values: jax.Array, batch, *, norm: str, eps: float = 1e-6,
                   key: jax.Array | None = None) -> jax.Array:
  """Step-relative A^S `[N, T]`: `values` normalised within anchor clusters (or `key`
  `[N, T]` ids in `[0, N*T)`); singleton clusters give 0 (`step_norm_reward`)."""
  n, t = batch.valid.shape
  if key is None:
    ids, m = anchor_ids(batch.group_id, batch.state_hash, batch.valid)
  else:
    ids, m = key, n * t
  a = normalize(values, ids, m, batch.valid, norm=norm, eps=eps, singleton="zero")
  return jnp.where(batch.valid, a, 0.0)


@register("gigpo")
def gigpo(batch, *, gamma: float = 0.95, step_weight: float = 1.0, norm: str = "mean_norm",
          cross_steps: bool = True, invalid_penalty: float = 0.1, eps: float = 1e-6) -> Credit:
  """GiGPO turn advantages A = A^E + step_weight * A^S (ALGORITHMS.md §2).

  Inputs (EpisodeBatch, `[N, T]` turn level): reward, valid, valid_action, state_hash (the
  anchor state before the turn's action), group_id `[N]`.
  - A^E: row score s = R_episode - invalid_penalty * [invalid action on this turn],
    normalised within group_id (row-weighted if cross_steps, else one row per episode).
    Singleton group (count 1): A^E = s.
  - A^S: step return G_k = r_k + gamma G_{k+1} (before the penalty), then
    G_k -= invalid_penalty * [invalid], normalised within anchor clusters keyed by exact
    (group_id, state_hash) equality — at any time step. Singleton cluster: A^S = 0.
  - norm ("mean_norm" default | "mean_std_norm", Bessel std, eps 1e-6) applies to both.
  Zero-variance groups/clusters give exactly 0 at that level; padding turns get 0.
  verl-agent's optional difflib-similarity clustering works on observation text only and is
  out of scope on device (hash near-duplicate states to one state_hash on the host instead).

  Returns Credit(turn=A [N, T], returns=A [N, T]) (verl-agent returns = advantages).
  """
  check_norm(norm)
  valid = batch.valid
  a_e = episode_advantage(batch, norm=norm, cross_steps=cross_steps,
                          invalid_penalty=invalid_penalty, eps=eps)
  g = discounted_returns(batch.reward, valid, gamma)
  g = g - invalid_penalty * (valid & ~batch.valid_action)
  a_s = step_advantage(g, batch, norm=norm, eps=eps)
  adv = jnp.where(valid, a_e + step_weight * a_s, 0.0)
  return Credit(turn=adv, returns=adv)
