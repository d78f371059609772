"""Task sampling for RL, evaluation and demonstrations: tasks are pure functions of a key.

`batched_sampler(env)` is `jit(vmap(env.sample_task))`, compiled once per env (envs are
hashable) and batch size; `draw_tasks(env, keys)` calls it `CHUNK` keys at a time, so a run
compiles the generator once, not once per panel size; `sample_tasks(env, seeds)` draws task
i from `key(seeds[i])` as host arrays;
`eval_tasks(env, n, seed)` are the held-out tasks of `config.eval.seed` (disjoint from the
training stream, which draws from the run seed), so every evaluation scores the same tasks.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache(maxsize=16)
def batched_sampler(env: Any):
  """`jit(vmap(env.sample_task))`: keys `[n]` -> a task pytree with n leading rows."""
  return jax.jit(jax.vmap(env.sample_task))


CHUNK = 64


def draw_tasks(env: Any, keys: jax.Array) -> Any:
  """Tasks of `keys` `[n]` (row i from keys[i]), drawn `CHUNK` rows a call.

  A run draws tasks at several sizes (its training panel, the held-out panel, SFT demos, the
  tokenizer corpus) and each size was a compilation of the env's generator (Sokoban's reverse
  play: ~2 s each on the 2-core CPU, four in a tiny run); at one size it compiles once. Rows
  are independent (vmap; the last chunk is padded with copies of the first key and cut), so
  this changes no task."""
  n = keys.shape[0]
  pad = -n % CHUNK
  if pad:
    keys = jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (pad,) + keys.shape[1:])])
  sampler = batched_sampler(env)
  parts = [sampler(keys[i:i + CHUNK]) for i in range(0, n + pad, CHUNK)]
  tasks = parts[0] if len(parts) == 1 else jax.tree.map(lambda *x: jnp.concatenate(x), *parts)
  return tasks if not pad else jax.tree.map(lambda x: x[:n], tasks)


def sample_tasks(env: Any, seeds: Sequence[int]) -> Any:
  """Tasks for `seeds` (task i = `env.sample_task(key(seeds[i]))`), as host numpy arrays.

  One jitted, vmapped call: generating tasks one by one eagerly re-dispatches every op.
  """
  keys = jax.vmap(jax.random.key)(np.asarray(list(seeds), np.uint32))
  return jax.tree.map(np.asarray, draw_tasks(env, keys))


def eval_tasks(env: Any, num_tasks: int, seed: int) -> Any:
  """The held-out tasks: task i from fold_in(key(seed), i)."""
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(num_tasks))
  return draw_tasks(env, keys)


ANSWER_FORMAT = "<answer>{}</answer>"


def plan_format(env: Any) -> str:
  """How a solver plan's action string becomes the turn an expert writes: `env.plan_format`
  where the env declares it (tool envs' plans are whole turns, e.g. `<calc>..</calc>`: "{}"),
  else `<answer>{action}</answer>`, the word-action envs' format."""
  return getattr(env, "plan_format", ANSWER_FORMAT)


@functools.partial(jax.jit, static_argnums=0)
def _reset(env: Any, task: Any):
  return env.reset(jax.random.key(0), task)


@functools.partial(jax.jit, static_argnums=0)
def _step(env: Any, state: Any, action: Any):
  return env.step(state, action)


def plan_observations(env: Any, task: Any, plan: Sequence[str], action_len: int = 128) -> list[str]:
  """The decoded observations along `plan` (reset, then one per `plan_format(env)` turn):
  host-side text for tokenizer corpora, so step feedback is in the corpus, not just resets."""
  from agent_rl.envs.base import Text
  state, obs = _reset(env, task)
  decode = lambda o: env.tokenizer.decode([int(t) for t in np.asarray(o.tokens)[:int(o.length)]])
  texts = [decode(obs)]
  for a in plan:
    ids = list(env.tokenizer.encode(plan_format(env).format(a)))[:action_len]
    toks = np.full((action_len,), env.tokenizer.pad_id, np.int32)
    toks[:len(ids)] = ids
    state, obs, _, _, _ = _step(env, state, Text(tokens=jnp.asarray(toks),
                                                 length=jnp.int32(len(ids))))
    texts.append(decode(obs))
  return texts
