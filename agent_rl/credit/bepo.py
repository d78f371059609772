"""Gated-BEPO: graph mean-backup TD advantages at branching states (a design proposal).

Paper: "Gated-BEPO", arXiv 2608.06861; spec in shared/ALGORITHMS.md §4.6, tagged
[abstract]: no code was found, so this kernel is a design proposal from the abstract, with
the unknown fusion f configurable (sum by default). The backup runs on device
(`graph.mean_backup`, a bounded `lax.while_loop` of segment sums).
"""
from __future__ import annotations

import jax.numpy as jnp

from agent_rl.credit import graph as G
from agent_rl.credit.base import Credit, register
from agent_rl.credit.gigpo import check_norm, discounted_returns, episode_advantage

# f(A^E, A^B) at gated turns; the paper's exact fusion is unknown.
FUSIONS = {
    "sum": lambda a_e, a_b: a_e + a_b,
    "mean": lambda a_e, a_b: 0.5 * (a_e + a_b),
    "replace": lambda a_e, a_b: a_b,
}


@register("gated_bepo")
def gated_bepo(batch, *, gamma: float = 0.95, lam: float = 0.95, fusion: str = "sum",
               norm: str = "mean_norm", cross_steps: bool = True, invalid_penalty: float = 0.1,
               eps: float = 1e-6, tol: float = 1e-6, max_iters: int = 1000) -> Credit:
  """Gated-BEPO turn advantages (ALGORITHMS.md §4.6; design proposal, see module doc).

  Inputs (`[N, T]`): reward, done, valid, valid_action, state_hash, next_hash; group_id `[N]`.
  - V: mean-backup fixed point over the group graph, V(s) = sum_{s->s'} n(s,s')/n(s) *
    (r(s,s') + gamma V(s')), V = 0 after terminal (done) transitions and at states without
    out-edges (`graph.mean_backup`).
  - delta_t = r_t + gamma (1 - done_t) V(s_{t+1}) - V(s_t); A^B_t = sum_l (gamma lam)^l delta_{t+l}
    along the sampled episode.
  - Gate g_t = 1 iff s_t has >= 2 distinct observed successors in its group graph.
  - A_t = g_t f(A^E, A^B) + (1 - g_t) A^E, f from FUSIONS ("sum" | "mean" | "replace");
    A^E is GiGPO's episode term (`gigpo.episode_advantage`).
  Zero-variance groups give A^E = 0; states seen once are never gated (one successor);
  padding turns get 0. Returns Credit(turn=A, returns=A^B + V(s_t) (lambda-returns)).
  """
  check_norm(norm)
  if fusion not in FUSIONS:
    raise ValueError(f"fusion must be one of {sorted(FUSIONS)}, got {fusion!r}")
  n, t = batch.valid.shape
  valid = batch.valid
  graph = G.build(batch.group_id, batch.state_hash, batch.next_hash, valid)
  cont = (~batch.done).reshape(-1).astype(jnp.float32)
  v = G.mean_backup(graph, batch.reward.reshape(-1), cont, gamma, tol=tol, max_iters=max_iters)
  v_src = v[graph.src].reshape(n, t)
  v_dst = v[graph.dst].reshape(n, t)
  delta = batch.reward + gamma * (~batch.done) * v_dst - v_src
  a_b = discounted_returns(delta, valid, gamma * lam)
  gate = (G.distinct_successors(graph)[graph.src] >= 2).reshape(n, t)
  a_e = episode_advantage(batch, norm=norm, cross_steps=cross_steps,
                          invalid_penalty=invalid_penalty, eps=eps)
  adv = jnp.where(gate, FUSIONS[fusion](a_e, a_b), a_e)
  adv = jnp.where(valid, adv, 0.0)
  return Credit(turn=adv, returns=jnp.where(valid, a_b + v_src, 0.0))
