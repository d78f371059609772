"""Per-agent rewards and the multi-agent credit options against plain NumPy loops."""
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.agents.rewards import agent_metrics, attach_agent_return
from agent_rl.credit.multiagent import drmas, per_agent
from agent_rl.rollout.batch import from_turns

N, T, K = 8, 5, 2


class _Env:
  roles = ("alice", "bob")
  reward_names = ("r/a", "r/b", "x")
  role_reward_terms = ("r/a", "r/b")


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  valid = np.arange(T)[None, :] < rng.integers(1, T + 1, (N, 1))
  agent = (np.arange(T)[None, :] + rng.integers(0, 2, (N, 1))) % K
  terms = {f"reward_terms/{n}": jnp.asarray(np.where(valid, rng.normal(size=(N, T)), 0.0),
                                             jnp.float32) for n in _Env.reward_names}
  reward = sum(terms.values())
  return dict(valid=valid, agent=agent, terms=terms, reward=np.asarray(reward),
              group=np.arange(N) // 4)


def _episode_batch(d):
  return from_turns(d["reward"], d["valid"], d["group"], agent_id=d["agent"], extras=d["terms"])


def _ref_returns(d):
  ret = np.zeros((N, K))
  for i in range(N):
    for k, name in enumerate(_Env.role_reward_terms):
      ret[i, k] = sum(float(d["terms"][f"reward_terms/{name}"][i, t]) for t in range(T)
                      if d["valid"][i, t])
  return ret


def _norm(vals):
  vals = np.asarray(vals, np.float64)
  if len(vals) == 1:
    return vals  # singleton: raw
  sd = vals.std(ddof=1)
  return np.zeros_like(vals) if np.allclose(vals, vals[0]) else (vals - vals.mean()) / (sd + 1e-6)


def test_agent_return_is_each_acting_agents_episode_return():
  d = _batch()
  b = attach_agent_return(_episode_batch(d), _Env())
  ret = _ref_returns(d)
  got = np.asarray(b.extras["agent_return"])
  for i in range(N):
    for t in range(T):
      want = ret[i, d["agent"][i, t]] if d["valid"][i, t] else 0.0
      assert got[i, t] == pytest.approx(want, abs=1e-5)
  m = agent_metrics(b, K, _Env.role_reward_terms)
  for k in range(K):
    assert float(m[f"rollout/agent{k}/return"]) == pytest.approx(ret[:, k].mean(), abs=1e-5)
    mine = d["valid"] & (d["agent"] == k)
    assert float(m[f"rollout/agent{k}/turns"]) == pytest.approx(mine.sum() / N)


@pytest.mark.parametrize("mode", ["by_agent", "pooled_rows"])
def test_drmas_scores_agents_by_their_own_return(mode):
  d = _batch(1)
  b = attach_agent_return(_episode_batch(d), _Env())
  kw = dict(group_by_agent=True) if mode == "by_agent" else dict(group_by_agent=False,
                                                                  pooled_rows=True)
  got = np.asarray(drmas(b, **kw).turn)
  ret = _ref_returns(d)
  want = np.zeros((N, T))
  keys = {}
  for i in range(N):
    for t in range(T):
      if d["valid"][i, t]:
        key = (d["group"][i], d["agent"][i, t]) if mode == "by_agent" else d["group"][i]
        keys.setdefault(key, []).append((i, t))
  for rows in keys.values():
    vals = _norm([ret[i, d["agent"][i, t]] for i, t in rows])
    for (i, t), v in zip(rows, vals):
      want[i, t] = v
  np.testing.assert_allclose(got, want, atol=2e-4)


def test_per_agent_uses_agent_return_once_per_episode_and_agent():
  d = _batch(2)
  b = attach_agent_return(_episode_batch(d), _Env())
  got = np.asarray(per_agent(b).turn)
  ret = _ref_returns(d)
  want = np.zeros((N, T))
  for g in set(d["group"]):
    for k in range(K):
      eps = [i for i in range(N) if d["group"][i] == g and (d["valid"][i] & (d["agent"][i] == k)).any()]
      vals = _norm([ret[i, k] for i in eps])
      for i, v in zip(eps, vals):
        want[i][d["valid"][i] & (d["agent"][i] == k)] = v
  np.testing.assert_allclose(got, want, atol=2e-4)
