"""ReMax's greedy baseline rollout (Li et al. 2023, arXiv 2310.10505; ALGORITHMS.md §1.5).

ReMax subtracts from each sampled episode's return the return of the *greedy* response to the
same prompt: A = r(x, y) - r(x, y_greedy). Here the prompt is the task: one greedy episode per
task (argmax decoding, temperature 0), reset with the same key as the sampled rollout so it
starts from the same initial state, and its return is attached to the sampled batch as
`batch.extras["baseline_return"]` `[N, T]` (episode i gets the return of task group_id[i],
repeated over its turns; the `remax` kernel reads turn 0).

In the run (train/run.py), once at start-up and then after `strategy.run` each iteration:

    baseline_fn = make_baseline_rollout(policy, setup.env, ecfg, setup.pieces)
    ...
    batch, bm = attach_baseline_return(batch, baseline_fn, params, tasks, k_roll)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Tuple

import jax
import jax.numpy as jnp

from agent_rl.credit.needs import BASELINE_RETURN
from agent_rl.rollout.batch import EpisodeBatch

RolloutFn = Callable[[Any, Any, jax.Array], Tuple[EpisodeBatch, dict]]


def greedy_config(ecfg):
  """The EpisodeConfig of the baseline: one greedy episode per task, no gate, no search
  (both would change which response is "the greedy one")."""
  return dataclasses.replace(ecfg, group_size=1, gate=None, search=None,
                             sampler=dataclasses.replace(ecfg.sampler, greedy=True))


def make_baseline_rollout(policy, env, ecfg, pieces) -> RolloutFn:
  """A greedy `rollout(params, tasks [n_tasks], key) -> (EpisodeBatch [n_tasks], metrics)` of
  the run's `ecfg` (the EpisodeConfig before strategy.configure): compiled for a JAX env; a
  host env's own loop (`env.runner`: its games' pool, envs/host/text_env.py), whose resets
  are functions of (task, reset key) as a JAX env's are, so the same starts."""
  runner = getattr(env, "runner", None)
  if callable(runner):
    return runner(policy, greedy_config(ecfg), pieces)
  from agent_rl.rollout.compiled import make_rollout  # the rollout room imports the models room
  return make_rollout(policy, env, greedy_config(ecfg), pieces)


def episode_return(batch: EpisodeBatch) -> jax.Array:
  """`[N]` f32 sum of valid turn rewards (ReMax's r(x, y) of a multi-turn episode)."""
  return jnp.sum(jnp.where(batch.valid, batch.reward, 0.0).astype(jnp.float32), axis=1)


@jax.jit
def with_baseline_return(batch: EpisodeBatch, greedy: EpisodeBatch) -> EpisodeBatch:
  """`batch` with `extras["baseline_return"]` `[N, T]` f32 = return of greedy episode
  `batch.group_id[i]` (greedy holds one episode per task, in task order)."""
  b = episode_return(greedy)[batch.group_id]
  col = jnp.broadcast_to(b[:, None], batch.valid.shape)
  return batch.replace(extras={**batch.extras, BASELINE_RETURN: col})


def attach_baseline_return(batch: EpisodeBatch, baseline_rollout: RolloutFn, params: Any, tasks: Any,
                           key: jax.Array) -> Tuple[EpisodeBatch, dict]:
  """Runs the greedy rollout of `tasks` and attaches its per-task return to `batch`.

  batch: the sampled EpisodeBatch of `tasks` (N = n_tasks x G rows, group_id = task index).
  baseline_rollout: from `make_baseline_rollout` (greedy, group_size 1).
  key: the key the sampled rollout used (same reset keys -> same initial states; greedy
    decoding itself does not depend on it).
  Returns (batch with extras["baseline_return"] `[N, T]`, {"remax/baseline_return": mean}).
  """
  greedy, _ = baseline_rollout(params, tasks, key)
  n_tasks = jax.tree.leaves(tasks)[0].shape[0]
  if greedy.num_episodes != n_tasks:
    raise ValueError(f"attach_baseline_return: the baseline rollout gave {greedy.num_episodes} "
                     f"episodes for {n_tasks} tasks; build it with make_baseline_rollout "
                     "(group_size 1)")
  if batch.num_episodes % n_tasks:
    raise ValueError(f"attach_baseline_return: batch has {batch.num_episodes} episodes, not a "
                     f"multiple of the {n_tasks} tasks")
  out = with_baseline_return(batch, greedy)
  return out, {"remax/baseline_return": jnp.mean(episode_return(greedy))}
