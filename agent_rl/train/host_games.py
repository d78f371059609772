"""What an RL iteration does for a host env (envs/host/) beyond a JAX env's path: the next
iteration's resets started ahead in the workers, and the rollout's time split."""
from __future__ import annotations

import numpy as np

from agent_rl.rollout.compiled import episode_keys


def can_reset_ahead(c, env) -> bool:
  """`config.env.host.prefetch_resets` on and an env that can prefetch (a TextHostEnv)."""
  return bool(c.env.host.prefetch_resets) and callable(getattr(env, "prefetch_reset", None))


def rollout_reset_keys(c, strategy, k_roll):
  """`[num_tasks, 2]`: the reset keys of an iteration's rollout of rollout key `k_roll` (the
  strategy's `first_key` is the key its first rollout call uses): where its games start."""
  return episode_keys(strategy.first_key(k_roll), c.rollout.num_tasks, c.rollout.group_size)[0]


def reset_ahead(c, env, strategy, tasks, k_roll) -> None:
  """Starts the resets of the rollout of `tasks [num_tasks]` and rollout key `k_roll` in the
  env's workers (GamePool.prefetch), so they run beside what the main process does until
  that rollout (the update, an evaluation); its reset collects them, the same observations
  as a reset then (a reset is a function of task and seed)."""
  env.prefetch_reset(np.asarray(tasks), np.asarray(rollout_reset_keys(c, strategy, k_roll)),
                     c.rollout.group_size)


def time_metrics(roll_fn, before: dict) -> dict:
  """A host rollout's (rollout/bridge.py, overlap.py) seconds this iteration: the games'
  resets, the waits for their steps and the policy's turns (decode and observation prefill),
  from the runner's `totals` now against `before`; {} for a compiled rollout."""
  now = getattr(roll_fn, "totals", None)
  if not now:
    return {}
  d = lambda k: now.get(k, 0.0) - before.get(k, 0.0)  # noqa: E731
  return {"time/env_reset_s": d("reset"), "time/env_step_s": d("env"),
          "time/policy_s": d("act") + d("observe")}
