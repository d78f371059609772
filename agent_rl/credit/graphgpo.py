"""GraphGPO: distance-to-success step returns on the group's state graph, on device.

Paper: GraphGPO (official recipe floatingstarZ/verl-agent `recipe/GraphGPO/`; the core
source was not available, details follow the "Relax" reproduction `graph_credit.py`);
spec in shared/ALGORITHMS.md §4.5. Shortest paths to a SUCCESS sink are Bellman-Ford
sweeps (`graph.distance_to`) over all groups at once.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit import graph as G
from agent_rl.credit.base import Credit, register
from agent_rl.credit.gigpo import check_norm, episode_advantage, row_groups, step_advantage


def success_distances(batch):
  """`(d_src, d_dst)` `[N, T]` f32: unit-cost distance to SUCCESS of each turn's state and
  next state. Successful transitions (valid & success) point at the SUCCESS sink (d = 0).
  States that cannot reach SUCCESS get d = (largest finite d in their group) + 1; in a group
  without any success every state is unreachable (d = 1), so its step returns are constant.
  """
  n, t = batch.valid.shape
  graph = G.build(batch.group_id, batch.state_hash, batch.next_hash, batch.valid, sink=True)
  graph = G.redirect(graph, (batch.valid & batch.success).reshape(-1))
  target = jnp.zeros((graph.num_nodes,), bool).at[G.sink_id(graph)].set(True)
  d = G.distance_to(graph, target)
  d_src, d_dst = d[graph.src].reshape(n, t), d[graph.dst].reshape(n, t)
  fin = lambda x: jnp.where(batch.valid & jnp.isfinite(x), x, -jnp.inf)
  row_max = jnp.maximum(fin(d_src), fin(d_dst)).reshape(-1)
  gid = row_groups(batch.group_id, t).reshape(-1)
  gmax = jax.ops.segment_max(row_max, gid, num_segments=n)
  unreach = (jnp.where(jnp.isfinite(gmax), gmax, 0.0) + 1.0)[gid].reshape(n, t)
  return jnp.where(jnp.isfinite(d_src), d_src, unreach), jnp.where(jnp.isfinite(d_dst), d_dst, unreach)


@register("graphgpo")
def graphgpo(batch, *, gamma: float = 0.1, reward_scale: float = 10.0,
             normalize_distance: bool = False, episode_weight: float = 1.0,
             step_weight: float = 1.0, norm: str = "mean_std_norm", cross_steps: bool = True,
             invalid_penalty: float = 0.1, eps: float = 1e-6) -> Credit:
  """GraphGPO turn advantages A = episode_weight * A^E + step_weight * A^S (§4.5).

  Inputs (`[N, T]`): reward, valid, valid_action, success, state_hash, next_hash;
  group_id `[N]`.
  - d(s): shortest unit-cost path to SUCCESS within the group graph (`success_distances`).
  - Step return of the transition s -> s': R = reward_scale * gamma^d(s'), or with
    normalize_distance R = reward_scale * gamma^(d(s') - d(s) + 1).
  - A^S: R normalised within same-source-state clusters (group_id, state_hash), default
    "mean_std_norm" (Bessel std, eps 1e-6); singleton clusters and groups with no success
    give 0. A^E: GiGPO's episode term with the same norm (`gigpo.episode_advantage`).
  Zero-variance groups/clusters give 0 at that level; padding turns get 0.
  """
  check_norm(norm)
  d_src, d_dst = success_distances(batch)
  expo = d_dst - d_src + 1.0 if normalize_distance else d_dst
  ret = reward_scale * jnp.power(jnp.float32(gamma), expo)
  a_e = episode_advantage(batch, norm=norm, cross_steps=cross_steps,
                          invalid_penalty=invalid_penalty, eps=eps)
  a_s = step_advantage(ret, batch, norm=norm, eps=eps)
  adv = jnp.where(batch.valid, episode_weight * a_e + step_weight * a_s, 0.0)
  return Credit(turn=adv, returns=adv)
