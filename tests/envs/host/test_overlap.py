"""Overlapped host rollout (two pipelined halves) = the plain host loop, same key."""
import jax
import numpy as np
import pytest

from agent_rl.envs.host.text_rules import ACTION_FORMATS
from agent_rl.rollout.bridge import HostRollout
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.overlap import OverlapRollout, make_host_rollout

from tests.envs.host.helpers import TOK, _cfg, _env, _policy, _same, plain_and_overlapped
from tests.envs.host.hostgames import FaultyGame

# Any action text is the command "look", so every turn steps the games (exercises the pool).
ACTION_FORMATS.register("look", lambda text, max_answer_bytes=256: "look")


@pytest.mark.parametrize("n_tasks,history", [(3, "concatenated"),
                                              pytest.param(2, "windowed", marks=pytest.mark.slow)])
def test_overlap_gives_the_plain_loops_batch(n_tasks, history):
  pol, params = _policy()
  env = _env()
  cfg = _cfg(history)
  pieces = chat_pieces(TOK, env.instruction, "sys")
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(0), n_tasks))
  key = jax.random.key(3)
  ref, mref = HostRollout(pol, env, cfg, pieces)(params, tasks, key)
  runner = OverlapRollout(pol, env, cfg, pieces)
  got, mgot = runner(params, tasks, key)
  _same(ref, got)
  assert np.asarray(ref.valid_action).any() and np.asarray(ref.loss_mask).sum() > 10
  for k in mref:
    if k != "rollout/decode_steps":  # summed over both halves' decode loops
      np.testing.assert_allclose(float(mgot[k]), float(mref[k]), rtol=1e-6, err_msg=k)
  assert set(runner.timings) == {"reset", "act", "env", "observe", "other"}
  shapes, _ = runner.eval_shape(params, tasks, key)
  assert jax.tree.map(lambda s: s.shape, shapes) == jax.tree.map(np.shape, got)


def test_overlap_with_worker_pool_and_a_worker_killed_mid_rollout():
  """Workers step the halves; a worker whose game kills its process at the 2nd step is
  restarted, its episodes end `fatal` at turn 1, the others play on; the run continues."""
  cfg = _cfg(turns=3, group=1)
  ref_env, env = _env(n=4, fmt="look"), _env(FaultyGame, n=4, workers=2, fmt="look")
  key = jax.random.key(5)
  try:
    (ref, _), (got, _) = plain_and_overlapped(cfg, ref_env, env, key)
    _same(ref, got)  # no failure yet: FaultyGame only dies when asked to
  finally:
    env.close()
  import functools
  pol, params = _policy()
  tasks = np.arange(4, dtype=np.int32)
  env = _env(functools.partial(FaultyGame, die_at=2), n=4, workers=2, fmt="look")
  try:
    got, m = make_host_rollout(pol, env, cfg, chat_pieces(TOK, env.instruction, "sys"))(
        params, tasks, key)
    fatal, done, valid = (np.asarray(x) for x in (got.fatal, got.done, got.valid))
    # every game dies at its 2nd step: turn 0 plays, turn 1 ends every episode as failed
    assert not fatal[:, 0].any() and fatal[:, 1].all() and done[:, 1].all()
    assert not valid[:, 2].any() and env.pool.restarts >= 2
    assert float(m["rollout/success"]) == 0.0
  finally:
    env.close()


@pytest.mark.slow
def test_one_task_falls_back_to_the_plain_loop():
  pol, params = _policy()
  env = _env(n=2)
  cfg = _cfg()
  pieces = chat_pieces(TOK, env.instruction, "sys")
  tasks = np.asarray([4], np.int32)
  a, _ = HostRollout(pol, env, cfg, pieces)(params, tasks, jax.random.key(1))
  b, _ = OverlapRollout(pol, env, cfg, pieces)(params, tasks, jax.random.key(1))
  _same(a, b)
  with pytest.raises(ValueError, match="step_async"):
    OverlapRollout(pol, object(), cfg, pieces)
