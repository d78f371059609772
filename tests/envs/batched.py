"""An env's reset / step / task sampler vmapped over a batch and jitted (the env static): what
the JAX env tests drive their envs with."""
import functools

import jax


@functools.partial(jax.jit, static_argnums=0)
def vstep(env, states, actions):
  return jax.vmap(env.step)(states, actions)


@functools.partial(jax.jit, static_argnums=0)
def vreset(env, keys, tasks):
  return jax.vmap(env.reset)(keys, tasks)


@functools.partial(jax.jit, static_argnums=(0, 2))
def vsample(env, key, n):
  return jax.vmap(env.sample_task)(jax.random.split(key, n))
