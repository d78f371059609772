"""Host bridge: a JAX env driven from Python gives the compiled loop's batch (same key)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.envs.base import Text
from agent_rl.rollout.bridge import HostRollout, JaxHostEnv
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.sampler import SamplerConfig

from toy import PIECES, STOP, GuessEnv, tasks, tiny_policy

SAMPLER = SamplerConfig(temperature=0.7, top_k=12, max_tokens=6, stop_tokens=STOP)


def _compare(history, slow_ok=True):
  pol, params = tiny_policy()
  cfg = EpisodeConfig(sampler=SAMPLER, max_turns=4, group_size=3, history=history, window_turns=1)
  key = jax.random.PRNGKey(11)
  ref, mref = make_rollout(pol, GuessEnv(), cfg, PIECES)(params, tasks(2), key)
  runner = HostRollout(pol, JaxHostEnv(GuessEnv()), cfg, PIECES)
  got, mgot = runner(params, tasks(2), key)
  for name in ("tokens", "loss_mask", "turn_index", "position", "attention_mask", "valid", "done",
               "success", "valid_action", "state_hash", "next_hash", "group_id", "episode_key"):
    assert np.array_equal(np.asarray(getattr(ref, name)), np.asarray(getattr(got, name))), name
  for name in ("reward", "logprobs", "sample_logprobs"):
    np.testing.assert_allclose(np.asarray(getattr(got, name)), np.asarray(getattr(ref, name)),
                               atol=1e-6, err_msg=name)
  assert got.segment_len == ref.segment_len
  assert set(got.extras) == set(ref.extras) == {"reward_terms/0", "reward_terms/1"}
  for name in ref.extras:
    assert np.array_equal(np.asarray(got.extras[name]), np.asarray(ref.extras[name])), name
  for k in mref:
    np.testing.assert_allclose(float(mgot[k]), float(mref[k]), atol=1e-5, err_msg=k)
  assert set(runner.timings) == {"reset", "act", "env", "observe", "other"}
  assert np.asarray(ref.loss_mask).sum() > 10


def test_host_bridge_matches_compiled_concat():
  _compare("concatenated")


@pytest.mark.slow
def test_host_bridge_matches_compiled_window():
  _compare("windowed")


def test_host_bridge_rejects_search():
  from agent_rl.rollout.episode import SearchConfig
  pol, _ = tiny_policy()
  with pytest.raises(ValueError, match="search"):
    HostRollout(pol, JaxHostEnv(GuessEnv()), EpisodeConfig(search=SearchConfig()), PIECES)


class _PathEnv(GuessEnv):
  """GuessEnv whose state remembers the path: `total` sums the valid guesses, and the
  observation and state hash read it, so a branched copy that kept its own state (not its
  root's) shows in its next observation."""

  def reset(self, key, task):
    state, obs = super().reset(key, task)
    return {**state, "total": jnp.int32(0)}, obs

  def state_hash(self, state):
    return super().state_hash(state) ^ state.get("total", jnp.int32(0)).astype(jnp.uint32)

  def step(self, state, action):
    new, obs, reward, done, info = super().step(
        {k: v for k, v in state.items() if k != "total"}, action)
    total = state["total"] + jnp.where(action.length >= 1, action.tokens[0], 0)
    new = {**new, "total": total}
    obs = Text(jnp.where(obs.tokens > 0, 19 + (obs.tokens + total) % 5, 0), obs.length)
    return new, obs, reward, done, {**info, "state_hash": self.state_hash(new)}


@pytest.mark.parametrize("turns", [(1, 1), (1, 2)])
def test_host_bridge_branches_as_the_compiled_rollout(turns):
  """Branched groups (branch.py) through the host loop: the env copies the root's state
  (JaxHostEnv.clone_rows) and the carry its rows at the same turn as the compiled loop."""
  from agent_rl.rollout.branch import BranchConfig
  pol, params = tiny_policy()
  cfg = EpisodeConfig(sampler=SamplerConfig(temperature=1.5, max_tokens=6, stop_tokens=STOP),
                      max_turns=4, group_size=3,
                      branch=BranchConfig(min_turn=turns[0], max_turn=turns[1]))
  key = jax.random.PRNGKey(5)
  ref, mref = make_rollout(pol, _PathEnv(), cfg, PIECES)(params, tasks(3), key)
  got, mgot = HostRollout(pol, JaxHostEnv(_PathEnv()), cfg, PIECES)(params, tasks(3), key)
  for name in ("tokens", "loss_mask", "turn_index", "done", "success", "state_hash", "reward"):
    assert np.array_equal(np.asarray(getattr(ref, name)), np.asarray(getattr(got, name))), name
  np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(ref.logprobs), atol=1e-6)
  assert float(mgot["rollout/branched_episodes"]) == float(mref["rollout/branched_episodes"]) > 0
