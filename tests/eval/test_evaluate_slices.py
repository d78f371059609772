"""`eval.slice_tasks`: a held-out panel rolled out a slice of tasks at a time scores as the
whole panel at once (greedy episodes equal; the k samples drawn per slice), and a slice size
that does not divide the panel is refused."""
import dataclasses

import jax
import numpy as np
import pytest

from agent_rl.eval.evaluate import evaluate, rollout_in_slices
from tests.rollout.sokoban_policy import sokoban_setup


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return sokoban_setup(str(tmp_path_factory.mktemp("tok")), 4, 1)


def test_greedy_slices_equal_the_whole_panel(setup):
  _, env, policy, params, cfg, tasks, pieces = setup
  cfg = dataclasses.replace(cfg, sampler=dataclasses.replace(cfg.sampler, greedy=True))
  key = jax.random.key(3)
  whole = rollout_in_slices(policy, params, env, tasks, key, cfg, pieces)
  sliced = rollout_in_slices(policy, params, env, tasks, key, cfg, pieces, slice_tasks=2)
  for f in ("tokens", "reward", "success", "valid", "logprobs"):
    np.testing.assert_allclose(np.asarray(getattr(sliced, f)), np.asarray(getattr(whole, f)),
                               atol=1e-6, err_msg=f)
  a = evaluate(policy, params, env, pieces, cfg, num_tasks=4, seed=7, k=2)
  b = evaluate(policy, params, env, pieces, cfg, num_tasks=4, seed=7, k=2, slice_tasks=1)
  assert a["eval/success"] == b["eval/success"] and a["eval/reward"] == b["eval/reward"]
  assert set(a) == set(b) and 0.0 <= float(b["eval/avg@2"]) <= float(b["eval/pass@2"]) <= 1.0


def test_rendered_episodes_roll_out_the_first_slices_only(setup):
  tok, env, policy, params, cfg, tasks, pieces = setup
  from agent_rl.eval.episodes import held_out_episodes
  kw = dict(num_tasks=4, seed=3, num=2)
  whole = held_out_episodes(policy, params, env, pieces, cfg, tok, **kw)
  assert held_out_episodes(policy, params, env, pieces, cfg, tok, slice_tasks=2, **kw) == whole
  assert len(whole) == 2


def test_a_slice_that_does_not_divide_the_panel_is_refused(setup):
  _, env, policy, params, cfg, tasks, pieces = setup
  with pytest.raises(ValueError, match="slice_tasks=3"):
    rollout_in_slices(policy, params, env, tasks, jax.random.key(0), cfg, pieces, slice_tasks=3)
