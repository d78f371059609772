"""RewardFlow: reward propagation over the group's state graph, then GiGPO-style advantages.

Paper: "RewardFlow" (tmlr-group/RewardFlow, `rewardflow/{core_rewardflow,propagation}.py`);
spec in shared/ALGORITHMS.md §4.4. The graph is built and solved on device
(`agent_rl.credit.graph`): node table from `dense_ids((group_id, hash))`, decay
propagation as a bounded `lax.while_loop` of segment_max.
"""
from __future__ import annotations

import jax.numpy as jnp

from agent_rl.credit import graph as G
from agent_rl.credit.base import Credit, register
from agent_rl.credit.gigpo import check_norm, episode_advantage, step_advantage


def node_potential(batch, gamma, *, max_iters: int = 1000):
  """`(graph, V [num_nodes])`: RewardFlow's propagated state values.

  r(s) = max of the env rewards received on arriving at s (0 for states never arrived at,
  e.g. the initial state); V = fixed point of V(s) <- max(V(s), gamma * max_{succ} V(s')).
  Self-loop transitions (s -> s) are dropped from the graph, as RewardFlow's
  `clean_trajectory` does.
  """
  graph = G.build(batch.group_id, batch.state_hash, batch.next_hash, batch.valid)
  r_node = G.node_max(graph, batch.reward.reshape(-1), at="dst", fill=0.0)
  no_loops = graph._replace(edge_valid=graph.edge_valid & (graph.src != graph.dst))
  return graph, G.max_propagate(no_loops, r_node, gamma, max_iters=max_iters)


@register("rewardflow")
def rewardflow(batch, *, gamma: float = 0.9, step_weight: float = 1.0, norm: str = "mean_norm",
               cross_steps: bool = True, invalid_penalty: float = 0.1, eps: float = 1e-6,
               max_iters: int = 1000) -> Credit:
  """RewardFlow turn advantages A = A^E + step_weight * A^S (ALGORITHMS.md §4.4).

  Inputs (`[N, T]`): reward, valid, valid_action, state_hash, next_hash; group_id `[N]`.
  - Graph per group: nodes = distinct (group_id, hash) states, edges state_hash -> next_hash
    of valid turns; V from `node_potential` (gamma 0.9 as RewardFlow's ALFWorld script).
  - Step reward of turn t: R_t = V(next_hash_t) - V(state_hash_t) (a potential difference),
    minus invalid_penalty on invalid-action turns (the verl-agent pipeline's penalty on step
    rewards). Every valid turn records its next state here, so RewardFlow's fallback to the
    env reward for uncovered transitions never arises.
  - A^S: R normalised within anchor clusters (group_id, state_hash) with no further
    discounting; singleton cluster -> 0. A^E: GiGPO's episode term (`gigpo.episode_advantage`).
  - Deviation: RewardFlow takes r(s) from the first arrival it sees (order dependent); we take
    the max over arrivals so the result does not depend on episode order.
  Zero-variance groups/clusters give 0 at that level; padding turns get 0.
  """
  check_norm(norm)
  n, t = batch.valid.shape
  graph, v = node_potential(batch, gamma, max_iters=max_iters)
  step_r = (v[graph.dst] - v[graph.src]).reshape(n, t)
  step_r = step_r - invalid_penalty * (batch.valid & ~batch.valid_action)
  a_e = episode_advantage(batch, norm=norm, cross_steps=cross_steps,
                          invalid_penalty=invalid_penalty, eps=eps)
  a_s = step_advantage(step_r, batch, norm=norm, eps=eps)
  adv = jnp.where(batch.valid, a_e + step_weight * a_s, 0.0)
  return Credit(turn=adv, returns=adv)
