"""Branched rollouts (agent_rl/rollout/branch.py) against a plain loop: the same episode loop
without branching, where each member of a branched group samples its first b turns with its
root's key (so it plays the root's prefix) and its own key after. Tokens, behaviour
log-probs, turn records and loss masks must match, the copies' prefix out of the loss."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.rollout import branch
from agent_rl.rollout.compiled import episode_keys, info_spec, make_rollout, reset_groups
from agent_rl.rollout.episode import EpisodeConfig, EpisodeLoop, action_length
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.rollout.strategies import STRATEGIES

from toy import PIECES, STOP, GuessEnv, tasks, tiny_policy

SAMPLER = SamplerConfig(temperature=1.5, max_tokens=6, stop_tokens=STOP)


def plain_loop(pol, params, env, cfg, tks, key, prefix_turns):
  """The episode loop, turn by turn in Python, without branching: row i samples turns
  t < prefix_turns[i] with its group root's key (0: always its own)."""
  n_tasks, g = jax.tree.leaves(tks)[0].shape[0], cfg.group_size
  reset_keys, ep_keys, group_id = episode_keys(key, n_tasks, g)
  state, obs = reset_groups(env, tks, reset_keys, g)
  n = n_tasks * g
  step = jax.vmap(env.step)
  loop = EpisodeLoop(pol, env, cfg, PIECES, n, obs.tokens.shape[-1],
                     info_spec=info_spec(step, state, n, action_length(env, cfg)))
  root_keys = jnp.repeat(ep_keys[::g], g, axis=0)
  c = loop.start(params, state, obs, ep_keys)
  for t in range(cfg.max_turns):
    use_root = jnp.asarray(t < np.asarray(prefix_turns))[:, None]
    c = c.replace(sample_keys=jnp.where(use_root, root_keys, ep_keys))
    if bool(jnp.any(c.alive)):
      c, action, active = loop.act(params, c, t)
      c = loop.record(c, t, active, step(c.env_state, action))
      if t < cfg.max_turns - 1:
        c = loop.observe(params, c, t)
  return loop.finish(c, group_id, ep_keys)


@pytest.mark.parametrize("history", [
    "concatenated", pytest.param("windowed", marks=pytest.mark.slow)])
def test_branched_rollout_equals_the_plain_loop(history):
  pol, params = tiny_policy()
  env, g, n_tasks = GuessEnv(), 3, 4
  base = EpisodeConfig(sampler=SAMPLER, max_turns=4, group_size=g, history=history,
                       window_turns=1)
  cfg = STRATEGIES.get("branch").configure(base, min_turn=1, max_turn=2)
  key, tks = jax.random.PRNGKey(7), tasks(n_tasks, key=3)
  got, m = make_rollout(pol, env, cfg, PIECES)(params, tks, key)
  plain, _ = make_rollout(pol, env, base, PIECES)(params, tks, key)
  _, ep_keys, _ = episode_keys(key, n_tasks, g)
  b = np.asarray(branch.branch_turns(ep_keys, g, cfg.branch))
  assert set(b) <= {1, 2} and np.all(b.reshape(n_tasks, g) == b[::g, None])
  # a group branches iff its root (the same episode in both rollouts) plays turn b
  root = np.arange(n_tasks * g) - np.arange(n_tasks * g) % g
  pv = np.asarray(plain.valid)
  copy = pv[root, b] & (np.arange(n_tasks * g) != root)
  assert copy.any() and (~copy[root != np.arange(n_tasks * g)]).any(), "both kinds of group"
  want, _ = plain_loop(pol, params, env, base, tks, key, np.where(copy | (root == np.arange(
      n_tasks * g)) & pv[root, b], b, 0))
  for f in ("tokens", "turn_index", "reward", "done", "valid", "success", "state_hash"):
    np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(want, f)), f)
  np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), atol=1e-6)
  # the copies' first b turns leave the loss; everything else is the plain loop's mask
  ti, lm = np.asarray(want.turn_index), np.asarray(want.loss_mask)
  shared = copy[:, None] & (ti >= 0) & (ti < b[:, None])
  assert shared.any()
  np.testing.assert_array_equal(np.asarray(got.loss_mask), np.where(shared, 0.0, lm))
  assert float(m["rollout/branched_episodes"]) == copy.sum()
  # roots are the plain rollout's episodes, untouched
  is_root = root == np.arange(n_tasks * g)
  np.testing.assert_array_equal(np.asarray(got.tokens)[is_root], np.asarray(plain.tokens)[is_root])
  again, _ = make_rollout(pol, env, cfg, PIECES)(params, tks, key)
  np.testing.assert_array_equal(np.asarray(again.tokens), np.asarray(got.tokens))


def test_bad_settings_name_the_field():
  with pytest.raises(ValueError, match="min_turn <= max_turn"):
    branch.BranchConfig(min_turn=0, max_turn=2)
  with pytest.raises(ValueError, match="branch.max_turn"):
    EpisodeConfig(max_turns=3, branch=branch.BranchConfig(1, 3))
  from agent_rl.rollout.bridge import HostRollout
  with pytest.raises(ValueError, match="EpisodeConfig.branch: host env NoneType has no clone_rows"):
    HostRollout(None, None, EpisodeConfig(max_turns=3, branch=branch.BranchConfig()), PIECES)
  from agent_rl.train.config import validate
  from tests.train.tiny import tiny_config
  c = tiny_config()
  c.rollout.strategy, c.rollout.strategy_kwargs = "branch", {"max_turn": 2}
  with pytest.raises(ValueError, match=r"config.rollout.strategy_kwargs: branch: .*max_turn"):
    validate(c)


@pytest.mark.slow  # CI runs branching in a run through tests/train/test_distill.py
def test_a_run_trains_on_branched_groups(tmp_path):
  """GRPO on branched groups end to end (credit, loss, metrics): 2 iterations."""
  from agent_rl.metrics.sinks import read_jsonl
  from agent_rl.train.run import run
  from tests.train.tiny import tiny_config
  c = tiny_config(iterations=2)
  c.rollout.max_turns, c.rollout.group_size = 3, 3
  c.rollout.strategy, c.rollout.strategy_kwargs = "branch", {"min_turn": 1, "max_turn": 2}
  run(c, str(tmp_path))
  recs = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "rollout/branched_episodes" in r]
  assert len(recs) == 2 and all(np.isfinite(r["loss/total"]) for r in recs)
