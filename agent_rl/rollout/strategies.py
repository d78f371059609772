"""Rollout strategies, a registry composable with any credit method (`STRATEGIES.get(name)`).

A strategy has two hooks, either may be the identity:
  configure(cfg: EpisodeConfig, **hp) -> EpisodeConfig   in-loop strategies (gate, TSR)
  run(rollout_fn, params, tasks, key, **hp) -> (EpisodeBatch, metrics)
      batch-level strategies around any `rollout_fn(params, tasks, key)` (compiled or host)
and says the key of its first rollout call, `first_key(key)` (the run starts a host env's
resets of the next iteration ahead, envs/host/pool.py, and needs to know them).

Both hooks get the same `config.rollout.strategy_kwargs`; `Strategy` hands each hook only the
keywords it declares and rejects one neither declares (no `**_` swallowing typos).

    strat = STRATEGIES.get("dapo")
    fn = make_rollout(policy, env, strat.configure(cfg, **hp), pieces)
    batch, metrics = strat.run(fn, params, tasks, key, **hp)

The output is an ordinary EpisodeBatch, so every credit kernel and loss applies unchanged.

  plain           one rollout.
  starpo_s        RAGEN StarPO-S (ALGORITHMS.md §3): keep the top floor(p * n_groups) groups
                  by the Bessel std of episode returns ("std"; "std_rev" keeps the lowest).
  dapo            DAPO dynamic sampling (§1.12; Yu et al. 2025, arXiv:2503.14476): drop groups
                  whose metric has zero spread, roll out again until the batch has as many
                  groups as one rollout, at most `max_num_gen_batches` rollouts. If still short,
                  `on_exhausted="pad"` fills with dropped groups (zero GRPO advantage; counted
                  in `dapo/padded_groups`), "raise" raises as verl does.
  selective_gate  §4.9 gate inside the loop (gate.py); cut groups get a zero loss mask.
  tsr             §4.10 trajectory search inside the loop (search.py).
  branch          each group's members copy its root's first b turns, b ~ U[min_turn,
                  max_turn], then continue on their own keys (branch.py; FutureBridge-OPD).
  skill_pairs     SkillC's paired streams (§4.13): the first half of the tasks, each played
                  by G rollouts with its skill text injected (task field `field` True) and G
                  without; the 2G episodes of a task form one group (skill-injected first), so
                  the `skillc` kernel compares the streams of the same task. N is unchanged
                  (half as many distinct tasks per batch, each seen twice as often).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.registry import Registry, keyword_params
from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.rollout.branch import BranchConfig
from agent_rl.rollout.episode import EpisodeConfig, SearchConfig
from agent_rl.rollout.gate import GateConfig

STRATEGIES = Registry("rollout strategy")


def _same(cfg: EpisodeConfig) -> EpisodeConfig:
  return cfg


def _once(rollout_fn, params, tasks, key):
  return rollout_fn(params, tasks, key)


def _key(key):
  return key


@dataclasses.dataclass(frozen=True)
class Strategy:
  """A strategy's two hooks; `configure`/`run` pass each hook the keywords it takes.
  first_key: key -> the key `run_fn` passes its first `rollout_fn` call (with `tasks` as
  given; a strategy that changes the tasks, skill_pairs, runs on JAX envs only)."""
  configure_fn: Callable[..., EpisodeConfig] = _same
  run_fn: Callable[..., Any] = _once
  first_key: Callable[[Any], Any] = _key

  def keyword_params(self) -> list[str] | None:
    """The keywords of either hook (what `config.rollout.strategy_kwargs` may set); None if a
    hook takes `**kwargs`."""
    own = [keyword_params(f) for f in (self.configure_fn, self.run_fn)]
    return None if None in own else sorted(set(own[0]) | set(own[1]))

  def _own(self, fn: Callable, hp: dict) -> dict:
    takes = self.keyword_params()
    bad = [] if takes is None else sorted(set(hp) - set(takes))
    if bad:
      raise TypeError(f"rollout strategy takes no keyword {', '.join(map(repr, bad))}; it takes: "
                      f"{', '.join(takes) or '(none)'}")
    mine = keyword_params(fn)
    return dict(hp) if mine is None else {k: v for k, v in hp.items() if k in mine}

  def configure(self, cfg: EpisodeConfig, **hp) -> EpisodeConfig:
    return self.configure_fn(cfg, **self._own(self.configure_fn, hp))

  def run(self, rollout_fn, params, tasks, key, **hp):
    return self.run_fn(rollout_fn, params, tasks, key, **self._own(self.run_fn, hp))


def episode_returns(batch: EpisodeBatch) -> jax.Array:
  """`[N]` sum of turn rewards over valid turns."""
  return jnp.sum(jnp.where(batch.valid, batch.reward, 0.0), axis=1)


def _group_size(batch: EpisodeBatch) -> int:
  gid = np.asarray(batch.group_id)
  g = int(np.sum(gid == gid[0]))
  if gid.shape[0] % g or not np.array_equal(gid, np.repeat(np.arange(gid.shape[0] // g), g)):
    raise ValueError("batch.group_id must be contiguous equal-size groups (0,0,..,1,1,..)")
  return g


def select_groups(batch: EpisodeBatch, groups: jax.Array, group_size: int) -> EpisodeBatch:
  """The episodes of `groups [K]` (in that order), renumbered 0..K-1."""
  rows = (jnp.asarray(groups)[:, None] * group_size + jnp.arange(group_size)).reshape(-1)
  n = batch.num_episodes
  out = jax.tree.map(lambda x: jnp.take(x, rows, axis=0) if x.ndim and x.shape[0] == n else x, batch)
  return out.replace(group_id=jnp.repeat(jnp.arange(len(groups), dtype=jnp.int32), group_size))


def group_std(values: jax.Array, group_size: int) -> jax.Array:
  """Bessel-corrected std per group of contiguous `[N]` values (0 for singleton groups)."""
  v = values.reshape(-1, group_size)
  if group_size < 2:
    return jnp.zeros((v.shape[0],), v.dtype)
  return jnp.std(v, axis=1, ddof=1)


def starpo_s(rollout_fn, params, tasks, key, *, ratio: float = 0.25, filter_type: str = "std"):
  batch, metrics = rollout_fn(params, tasks, key)
  g = _group_size(batch)
  n_groups = batch.num_episodes // g
  keep = math.floor(ratio * n_groups)
  if filter_type not in ("std", "std_rev"):
    raise ValueError(f"starpo_s filter_type must be 'std' or 'std_rev', got {filter_type!r}")
  if keep < 1:
    raise ValueError(f"starpo_s ratio={ratio} keeps floor({ratio}*{n_groups}) = 0 groups")
  std = group_std(episode_returns(batch), g)
  _, idx = jax.lax.top_k(std if filter_type == "std" else -std, keep)
  metrics = dict(metrics, **{"starpo_s/kept_groups": jnp.float32(keep),
                             "starpo_s/kept_std_mean": jnp.mean(std[idx]),
                             "starpo_s/std_mean": jnp.mean(std)})
  return select_groups(batch, idx, g), metrics


def _spread_metric(batch: EpisodeBatch, metric: str) -> jax.Array:
  if metric == "return":
    return episode_returns(batch)
  if metric == "success":
    return jnp.any(batch.success & batch.valid, axis=1).astype(jnp.float32)
  raise ValueError(f"dapo metric must be 'return' or 'success', got {metric!r}")


def concat_batches(batches: list[EpisodeBatch]) -> EpisodeBatch:
  """Episodes of several batches (same T, L) one after another."""
  return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0) if xs[0].ndim else xs[0], *batches)


def _dapo_key(key, i: int = 0):
  """The key of DAPO's i-th rollout of an iteration."""
  return jax.random.fold_in(key, i)


def dapo(rollout_fn, params, tasks, key, *, max_num_gen_batches: int = 10, metric: str = "return",
         on_exhausted: str = "pad"):
  if on_exhausted not in ("pad", "raise"):
    raise ValueError(f"dapo on_exhausted must be 'pad' or 'raise', got {on_exhausted!r}")
  kept, dropped, metrics0, g, target, i = [], [], None, 1, None, 0
  while max_num_gen_batches <= 0 or i < max_num_gen_batches:
    batch, metrics = rollout_fn(params, tasks, _dapo_key(key, i))
    i += 1
    if metrics0 is None:
      metrics0, g = metrics, _group_size(batch)
      target = batch.num_episodes // g
    v = np.asarray(_spread_metric(batch, metric)).reshape(-1, g)
    spread = v.max(axis=1) > v.min(axis=1)
    kept += [select_groups(batch, np.array([j]), g) for j in np.nonzero(spread)[0]]
    dropped += [select_groups(batch, np.array([j]), g) for j in np.nonzero(~spread)[0]]
    if len(kept) >= target:
      break
  padded = max(0, target - len(kept))
  if padded and on_exhausted == "raise":
    raise ValueError(f"dapo: {i} rollouts (max_num_gen_batches={max_num_gen_batches}) gave only "
                     f"{len(kept)} of {target} groups with a nonzero {metric} spread")
  out = concat_batches((kept + dropped)[:target])
  out = out.replace(group_id=jnp.repeat(jnp.arange(target, dtype=jnp.int32), g))
  metrics = dict(metrics0, **{"dapo/num_gen_batches": jnp.float32(i),
                              "dapo/kept_groups": jnp.float32(min(len(kept), target)),
                              "dapo/padded_groups": jnp.float32(padded)})
  return out, metrics


def skill_pairs(rollout_fn, params, tasks, key, *, field: str = "skill"):
  if not hasattr(tasks, field):
    raise ValueError(f"skill_pairs: the env's tasks have no field {field!r} "
                     "(config.rollout.strategy_kwargs.field)")
  n = jax.tree.leaves(tasks)[0].shape[0]
  if n % 2:
    raise ValueError(f"skill_pairs needs an even rollout.num_tasks, got {n}")
  half = n // 2
  base = jax.tree.map(lambda x: x[:half], tasks)
  flag = getattr(base, field)
  streams = [base.replace(**{field: jnp.ones_like(flag)}),
             base.replace(**{field: jnp.zeros_like(flag)})]
  batch, metrics = rollout_fn(params, jax.tree.map(lambda a, b: jnp.concatenate([a, b]), *streams),
                              key)
  g = _group_size(batch)
  # Group j = the G injected episodes of task j, then its G skill-free ones.
  rows = (jnp.arange(half)[:, None, None] * g + jnp.array([0, half * g])[None, :, None]
          + jnp.arange(g)[None, None, :]).reshape(-1)
  out = jax.tree.map(lambda x: jnp.take(x, rows, axis=0)
                     if x.ndim and x.shape[0] == batch.num_episodes else x, batch)
  out = out.replace(group_id=jnp.repeat(jnp.arange(half, dtype=jnp.int32), 2 * g))
  succ = jnp.any(batch.success & batch.valid, axis=1).astype(jnp.float32).reshape(2, -1)
  metrics = dict(metrics, **{"skill_pairs/success_injected": jnp.mean(succ[0]),
                             "skill_pairs/success_free": jnp.mean(succ[1])})
  return out, metrics


def _with_gate(cfg: EpisodeConfig, *, turn: int = 10, threshold: float = 0.12,
               ended_frac: float = 0.9) -> EpisodeConfig:
  return dataclasses.replace(cfg, gate=GateConfig(turn=turn, threshold=threshold,
                                                  ended_frac=ended_frac))


def _with_branch(cfg: EpisodeConfig, *, min_turn: int = 1, max_turn: int = 1) -> EpisodeConfig:
  return dataclasses.replace(cfg, branch=BranchConfig(min_turn=min_turn, max_turn=max_turn))


def _with_search(cfg: EpisodeConfig, *, mode: str = "best_of_n", num_candidates: int = 4,
                 heuristic=None) -> EpisodeConfig:
  return dataclasses.replace(cfg, search=SearchConfig(mode=mode, num_candidates=num_candidates,
                                                      heuristic=heuristic))


STRATEGIES.register("plain", Strategy())
STRATEGIES.register("starpo_s", Strategy(run_fn=starpo_s))
STRATEGIES.register("dapo", Strategy(run_fn=dapo, first_key=_dapo_key))
STRATEGIES.register("selective_gate", Strategy(configure_fn=_with_gate))
STRATEGIES.register("tsr", Strategy(configure_fn=_with_search))
STRATEGIES.register("branch", Strategy(configure_fn=_with_branch))
STRATEGIES.register("skill_pairs", Strategy(run_fn=skill_pairs))
from agent_rl.rollout import purify  # noqa: E402,F401  (registers "rollback_purify")
