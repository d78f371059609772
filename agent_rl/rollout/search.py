"""TSR, trajectory-search rollouts (ALGORITHMS.md §4.10; arXiv 2602.11767) — a design proposal.

No reference code exists (the spec is derived from the abstract), so this is kept
configurable (`SearchConfig`). Each turn, every episode row is cloned into n candidates
(env states are pytrees, so cloning is free; the KV cache and history are cloned too),
each candidate samples its own action (per-candidate keys), the clones are stepped, and:

  best_of_n  per episode keep the candidate with the highest score
             (env reward of the turn + optional heuristic(state after the step));
  beam       per group (the G members are the beams) keep the G highest cumulative
             scores among the G * n expansions (+ heuristic of the new state).
  jitrl      keep candidate i with probability softmax(Q^(s, a_i) / beta), Q^ from an
             experience library (jitrl.py): JitRL's test-time policy, by resampling.

Only the chosen candidates' tokens and behaviour log-probs survive (the whole carry is
gathered by the chosen rows), so the EpisodeBatch looks like an ordinary rollout and any
optimizer / credit method applies unchanged. Finished rows expand to one live candidate
(their other clones score -inf) so a finished beam is never duplicated.

The heuristic is settable from a config: `SearchConfig.heuristic` is a callable or the name
of a registered factory `env -> (env_state -> f32)` in `HEURISTICS`:
  env_progress  the env's own `progress(state) -> f32` (the fraction of the task done, e.g.
                TextHouse's subgoals reached, MiniShop's match score of the current item and
                options); an env without `progress` is an error naming the env.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from agent_rl.registry import Registry
from agent_rl.rollout.carry import map_rows
from agent_rl.rollout.episode import SearchConfig

HEURISTICS = Registry("search heuristic")


@HEURISTICS.register("env_progress")
def _env_progress(env):
  if not callable(getattr(env, "progress", None)):
    raise ValueError(f"search heuristic 'env_progress': {type(env).__name__} has no "
                     "progress(state) method (config.rollout.strategy_kwargs.heuristic)")
  return env.progress


def heuristic_fn(heuristic, env):
  """`env_state -> f32` of `SearchConfig.heuristic` (None, a callable or a registered name)."""
  if heuristic is None or callable(heuristic):
    return heuristic
  if heuristic == "":  # a config's "no heuristic"
    return None
  return HEURISTICS.get(heuristic)(env)


def expand(carry: Any, n: int, k: int):
  """Clones each of the n rows k times: row i*k + c is candidate c of row i."""
  return map_rows(carry, n, lambda x: jnp.repeat(x, k, axis=0)), jnp.tile(jnp.arange(k), n)


def select(carry: Any, turn_reward: jax.Array, was_alive: jax.Array, n: int, group_size: int,
           cfg: SearchConfig, env: Any = None, library: Any = None, keys: Any = None,
           t: Any = None):
  """Chooses n of the n*k expanded rows; returns the gathered carry and the chosen rows [n].

  carry: the expanded EpisodeCarry (any pytree with `episode_return [n*k]`, the cumulative
  returns, and `env_state`, the states after the step); turn_reward: `[n*k]` reward of
  this turn per candidate; was_alive: `[n*k]` the row was alive before the turn (its
  clones compete); env: resolves a named heuristic. jitrl: `library` (jitrl.Library, None =
  empty), the rows' sample keys `[n, 2]` and the turn t (the resampling draw).
  """
  k = cfg.num_candidates
  cand = jnp.tile(jnp.arange(k), n)
  if cfg.mode == "jitrl":
    from agent_rl.rollout import jitrl
    lib = library if library is not None else jitrl.Library.empty(1)
    q = jitrl.q_values(lib, carry.turns.state_hash[:, t], carry.turns.next_hash[:, t])
    draw = jax.vmap(jax.random.fold_in)(
        jax.vmap(jax.random.fold_in, (0, None))(keys, t), jnp.full((n,), 0x5E1EC7, jnp.uint32))
    pick = jitrl.select(q.reshape(n, k), was_alive.reshape(n, k), draw, cfg.beta)
    rows = jnp.arange(n) * k + pick
    return map_rows(carry, n * k, lambda x: jnp.take(x, rows, axis=0)), rows
  bonus = 0.0
  heuristic = heuristic_fn(cfg.heuristic, env)
  if heuristic is not None:
    bonus = jax.vmap(heuristic)(carry.env_state).astype(jnp.float32)
  if cfg.mode == "best_of_n":
    score = turn_reward + bonus
  else:
    score = carry.episode_return + bonus
  score = jnp.where(was_alive | (cand == 0), score, -jnp.inf)
  if cfg.mode == "best_of_n":
    pick = jnp.argmax(score.reshape(n, k), axis=1)
    rows = jnp.arange(n) * k + pick
  else:
    g = group_size
    per_group = score.reshape(n // g, g * k)
    _, idx = jax.lax.top_k(per_group, g)  # ties -> lower index (stable)
    rows = (jnp.arange(n // g)[:, None] * g * k + idx).reshape(n)
  return map_rows(carry, n * k, lambda x: jnp.take(x, rows, axis=0)), rows
