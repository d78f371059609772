"""SFT demonstrations of a host text game (envs/host): each game's expert plan
(`TextGame.expert`: the package's walkthrough, gold path or planner; the toy's shortest plan)
replayed through the host rollout by the scripted policy (data/scripted.py), so the SFT rows
have exactly the RL layout, as data/demos.py + train/sft.py do for the JAX envs' solvers.

Demo task i is the training panel's `env.sample_task(key(seed_base + i))`. The demos are
replayed in chunks of at most the pool's size (a host rollout steps one game per episode);
chunk j's rollout key is fold_in(key(0), j), and each plan is computed by the game from the
start that key's reset gives it (the same (task_id, seed)), so the replay follows the plan.
A game without a plan (its adapter raised or has no `expert`; with world-model turns or early
experience, also one whose trace failed) is left out and counted, and the chunk's other games
are planned again from the starts of their new rows (a reset key depends on the row). Plans
are recomputed on each start-up (no dataset on disk): a host package's planner is the source
of truth, and the SFT rows are a pure function of the run config. With `iwm_alternatives` the
kept games' early experience (data/early_experience.py: other admissible commands at each
expert state, and the observations they lead to) comes from the same starts.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.data.early_experience import game_transitions
from agent_rl.data.scripted import scripted_policy
from agent_rl.data.world_model import encode_demo_turns, game_state_text
from agent_rl.envs.tasks import sample_tasks
from agent_rl.rollout.bridge import HostRollout
from agent_rl.rollout.compiled import episode_keys


def host_demo_batches(env, tokenizer, ecfg, pieces, vocab_size: int, num_demos: int,
                      seed_base: int, *, world_model: bool = False, iwm_alternatives: int = 0,
                      replay_alternatives: bool = True):
  """(EpisodeBatches of the replayed demos, {demos, skipped, replayed_success, iwm_failed,
  plans: each batch's plans, row-aligned}, early-experience transitions: [] unless
  `iwm_alternatives` > 0).

  world_model: each turn is SPA's `<think><observation>s_t</observation><prediction>s_{t+1}
  </prediction></think><answer>a_t</answer>` (data/world_model.py), s_t the game's
  observation text before command t of the plan (pool op "trace", the same starts), so the
  SFT loss also fits the next observation; the env reads the command out of <answer>.
  iwm_alternatives: that many other admissible commands at each expert state within the
  first `max_turns`, replayed (`early_experience.game_transitions`); with
  `replay_alternatives=False` the games are traced and kept as with it (the same demos) and
  nothing is replayed (no transitions).
  """
  tasks = np.asarray(sample_tasks(env, [seed_base + i for i in range(num_demos)]))
  chunk = env.pool.num_games
  g_cfg = dataclasses.replace(ecfg, group_size=1, gate=None, search=None,
                              sampler=dataclasses.replace(ecfg.sampler, greedy=True))
  traced = world_model or iwm_alternatives > 0
  batches, batch_plans, transitions, skipped, iwm_failed, wins, n = [], [], [], 0, 0, 0.0, 0
  for j, lo in enumerate(range(0, num_demos, chunk)):
    t = tasks[lo:lo + chunk]
    key = jax.random.fold_in(jax.random.key(0), j)
    # Reset key i of a rollout depends on its row, not its task: dropping a row without a plan
    # moves the later games to other starts, so they are planned again (each round drops a
    # row or stops) until the plans are those of the starts the replay gives.
    while len(t):
      reset_keys = np.asarray(episode_keys(key, len(t), 1)[0])
      plans, traces = _plans(env, t, reset_keys, traced, g_cfg.max_turns)
      keep = [i for i, p in enumerate(plans) if p and (traces is None or traces[i] is not None)]
      if len(keep) == len(t):
        break
      skipped += len(t) - len(keep)
      t = t[keep]
    if not len(t):
      continue
    states = ([[game_state_text(o.text) for o in tr] for tr in traces] if world_model
              else None)
    if iwm_alternatives > 0 and replay_alternatives:
      got, failed = game_transitions(env, env.starts(t, reset_keys), plans, traces,
                                     iwm_alternatives, g_cfg.max_turns, j)
      transitions += got
      iwm_failed += failed
    forced = encode_demo_turns(tokenizer, plans, g_cfg.max_turns, g_cfg.sampler.max_tokens,
                               fmt=env.plan_format, states=states)
    # The plain host loop: the scripted policy's "params" are per-row scripts, which the
    # overlapped loop's half-batches would not slice.
    batch, _ = HostRollout(scripted_policy(vocab_size), env, g_cfg, pieces)(
        jnp.asarray(forced), jnp.asarray(t), key)
    batches.append(batch)
    batch_plans.append(plans)
    wins += float(jnp.sum(jnp.any(batch.success, axis=1)))
    n += len(t)
  if not batches:
    raise ValueError(f"config.sft.steps: none of the {num_demos} host demo games has an expert "
                     "plan (TextGame.expert); set sft.steps=0")
  return batches, dict(demos=n, skipped=skipped, replayed_success=wins / max(n, 1),
                       iwm_failed=iwm_failed, plans=batch_plans), transitions


def _plans(env, tasks, reset_keys, traced: bool, max_turns: int) -> tuple[list, list | None]:
  """The expert plans of `tasks` from the starts of `reset_keys` (a rollout's), and (traced)
  the observations (GameObs) along their first `max_turns` commands (None where a trace
  failed; None when off)."""
  plans = env.expert_plans(tasks, reset_keys)
  if not traced:
    return plans, None
  return plans, env.observation_traces(tasks, reset_keys,
                                       [None if p is None else p[:max_turns] for p in plans])
