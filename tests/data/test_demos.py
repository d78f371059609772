"""Solver demonstrations round-trip through the TFDS (array_record) builder."""
import jax
import numpy as np

from agent_rl import envs
from agent_rl.data.demos import DemoBuilder, load_demos, prepare
from agent_rl.envs.tasks import sample_tasks
from agent_rl.tokenizers import ByteTokenizer


def test_demos_roundtrip_and_reuse(tmp_path):
  env = envs.make("sokoban", tokenizer=ByteTokenizer())
  seeds = [5, 3, 9, 1]
  b = DemoBuilder(env=env, env_name="sokoban", seeds=seeds, data_dir=str(tmp_path))
  prepare(b)
  demos = load_demos(b)
  assert [s for s, _ in demos] == sorted(seeds)
  tasks = sample_tasks(env, sorted(seeds))
  for i, (seed, plan) in enumerate(demos):
    assert plan == env.solve(jax.tree.map(lambda x: x[i], tasks))
  # Same settings reuse the files; other settings get another dataset name.
  again = DemoBuilder(env=env, env_name="sokoban", seeds=seeds, data_dir=str(tmp_path))
  prepare(again)
  assert load_demos(again) == demos
  other = DemoBuilder(env=env, env_name="sokoban", seeds=[5], data_dir=str(tmp_path))
  assert other.name != b.name


def test_sample_tasks_matches_single_sampling():
  env = envs.make("frozenlake", tokenizer=ByteTokenizer())
  batch = sample_tasks(env, [7, 8])
  one = env.sample_task(jax.random.key(8))
  for a, b in zip(jax.tree.leaves(batch), jax.tree.leaves(one)):
    np.testing.assert_array_equal(a[1], np.asarray(b))
