"""Task drawing (envs/tasks.py): `draw_tasks` draws a fixed chunk a call (one compilation of
the env's generator per run, whatever the panel sizes) and gives each key the task that
`env.sample_task` gives it alone, for sizes within one chunk and over two."""
import jax
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.tasks import CHUNK, batched_sampler, draw_tasks, eval_tasks, sample_tasks
from agent_rl.tokenizers import ByteTokenizer


@pytest.mark.parametrize("name", ["sokoban", "countdown"])
def test_drawn_tasks_are_each_keys_own_task(name):
  env = envs.make(name, tokenizer=ByteTokenizer())
  one = jax.jit(env.sample_task)
  for n in (5, CHUNK + 3):  # within one chunk, and over two (the last padded)
    keys = jax.random.split(jax.random.key(n), n)
    got = draw_tasks(env, keys)
    for i in (0, n // 2, n - 1):  # first, middle, last (the last chunk is padded)
      jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[i], got),
                   one(keys[i]))
    # the same tasks as one vmapped call at exactly n rows (what drawing did before)
    jax.tree.map(np.testing.assert_array_equal, got, batched_sampler(env)(keys))
  seeds = [7, 3, 11]
  jax.tree.map(np.testing.assert_array_equal, sample_tasks(env, seeds),
               jax.tree.map(lambda *x: np.stack(x), *[one(jax.random.key(s)) for s in seeds]))
  assert jax.tree.leaves(eval_tasks(env, 5, 0))[0].shape[0] == 5


def test_panels_of_several_sizes_compile_the_generator_once():
  env = envs.make("sokoban", tokenizer=ByteTokenizer())
  sampler = batched_sampler(env)
  before = sampler._cache_size()
  for n in (2, 4, 8, 40):
    draw_tasks(env, jax.random.split(jax.random.key(0), n))
  assert sampler._cache_size() - before <= 1
