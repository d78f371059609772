"""What the JAX env tests drive their envs with: reset / step / task sampler vmapped over a
batch and jitted (the env static), and turn strings as a batch of action tokens."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text


@functools.partial(jax.jit, static_argnums=0)
def vstep(env, states, actions):
  return jax.vmap(env.step)(states, actions)


@functools.partial(jax.jit, static_argnums=0)
def vreset(env, keys, tasks):
  return jax.vmap(env.reset)(keys, tasks)


@functools.partial(jax.jit, static_argnums=(0, 2))
def vsample(env, key, n):
  return jax.vmap(env.sample_task)(jax.random.split(key, n))


def texts(tok, strs, width: int, *, rows: int | None = None, strict: bool = False) -> Text:
  """`Text [rows, width]` (rows: default len(strs); rows past the strings are empty turns): each
  string's ids, cut to `width` tokens (strict: a longer string fails the test), zero-padded."""
  rows = len(strs) if rows is None else rows
  assert len(strs) <= rows, f"{len(strs)} strings for {rows} rows"
  toks = np.zeros((rows, width), np.int32)
  lens = np.zeros((rows,), np.int32)
  for i, s in enumerate(strs):
    ids = tok.encode(s)
    assert not (strict and len(ids) > width), f"{s!r} needs {len(ids)} > {width} tokens"
    ids = ids[:width]
    toks[i, :len(ids)], lens[i] = ids, len(ids)
  return Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))
