"""Overlapped host rollout (two pipelined halves) = the plain host loop, same key."""
import jax
import numpy as np
import pytest
from flax import nnx

from agent_rl.envs.host.pool import GamePool
from agent_rl.envs.host.text_env import ACTION_FORMATS, TextHostEnv
from agent_rl.envs.host.toy import KeyRoomGame
from agent_rl.rollout.bridge import HostRollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.overlap import OverlapRollout, make_host_rollout
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.tokenizers import ByteTokenizer
from agent_rl.tokenizers.chat import stop_ids

from tests.envs.host.hostgames import FaultyGame

TOK = ByteTokenizer()
EXACT = ("tokens", "loss_mask", "turn_index", "position", "attention_mask", "valid", "done",
         "success", "valid_action", "state_hash", "next_hash", "group_id", "episode_key",
         "reward", "fatal")
# Any action text is the command "look", so every turn steps the games (exercises the pool).
ACTION_FORMATS.register("look", lambda text, max_answer_bytes=256: "look")


def _policy():
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  cfg = get_preset("tiny", vocab_size=TOK.vocab_size, hidden=32, num_layers=1, num_heads=2,
                   num_kv_heads=1, head_dim=16, intermediate=64)
  graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
  return Policy.from_model(cfg, graphdef), params


def _cfg(history="concatenated", turns=3, group=2):
  return EpisodeConfig(sampler=SamplerConfig(temperature=1.0, max_tokens=6,
                                             stop_tokens=stop_ids(TOK)),
                       max_turns=turns, group_size=group, history=history, window_turns=1)


def _env(game=KeyRoomGame, n=6, workers=0, fmt="raw"):
  return TextHostEnv(GamePool(game, n, workers=workers), TOK, obs_len=24, action_format=fmt,
                     extras=("steps",))


def _same(a, b):
  for name in EXACT:
    assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name
  # log-probs: the same sampled tokens, scored in a half-size batch (XLA's CPU reductions
  # may order a matmul differently at another batch size): equal to float32 rounding.
  for name in ("logprobs", "sample_logprobs"):
    np.testing.assert_allclose(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)),
                               atol=1e-5, err_msg=name)
  assert a.extras.keys() == b.extras.keys()
  for k in a.extras:
    assert np.array_equal(np.asarray(a.extras[k]), np.asarray(b.extras[k])), k


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
  assert set(runner.timings) == {"act", "env", "observe", "other"}
  shapes, _ = runner.eval_shape(params, tasks, key)
  assert jax.tree.map(lambda s: s.shape, shapes) == jax.tree.map(np.shape, got)


def test_overlap_with_worker_pool_and_a_worker_killed_mid_rollout():
  """Workers step the halves; a worker whose game kills its process at the 2nd step is
  restarted, its episodes end `fatal` at turn 1, the others play on; the run continues."""
  pol, params = _policy()
  cfg = _cfg(turns=3, group=1)
  ref_env, env = _env(n=4, fmt="look"), _env(FaultyGame, n=4, workers=2, fmt="look")
  try:
    pieces = chat_pieces(TOK, env.instruction, "sys")
    tasks = np.asarray([0, 1, 2, 3], np.int32)
    key = jax.random.key(5)
    ref, _ = HostRollout(pol, ref_env, cfg, pieces)(params, tasks, key)
    got, _ = OverlapRollout(pol, env, cfg, pieces)(params, tasks, key)
    _same(ref, got)  # no failure yet: FaultyGame only dies when asked to
  finally:
    env.close()
  import functools
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
