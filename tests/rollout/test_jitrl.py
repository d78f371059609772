"""JitRL (rollout/jitrl.py): the library's Q^ against a plain-Python table, the resampling
draw against softmax(q / beta), and test-time rounds on GuessEnv raising success over the
frozen policy with no gradient step."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.eval.jitrl import test_time_rounds as time_rounds
from agent_rl.rollout import jitrl
from agent_rl.rollout.batch import from_turns
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig, SearchConfig
from agent_rl.rollout.sampler import SamplerConfig

from tests.rollout.toy import PIECES, STOP, GuessEnv, tasks, tiny_policy


def _batch(rng, n=6, t=5, n_states=4):
  valid = np.arange(t)[None, :] < rng.integers(1, t + 1, (n, 1))
  reward = np.where(valid, rng.normal(size=(n, t)), 0.0).astype(np.float32)
  b = from_turns(reward, valid, np.zeros(n, np.int32))
  s = rng.integers(0, n_states, (n, t)).astype(np.uint32)
  s2 = rng.integers(0, n_states, (n, t)).astype(np.uint32)
  return b.replace(state_hash=jnp.asarray(s), next_hash=jnp.asarray(s2)), s, s2, reward, valid


def _reference(batches, gamma):
  """Plain-Python Q^ / V^ tables: mean discounted return-to-go per (s, s') and per s."""
  tq, ts = {}, {}
  for _, s, s2, r, v in batches:
    for i in range(r.shape[0]):
      for t in range(r.shape[1]):
        if not v[i, t]:
          continue
        g = sum(gamma ** (j - t) * r[i, j] for j in range(t, r.shape[1]) if v[i, j])
        tq.setdefault((int(s[i, t]), int(s2[i, t])), []).append(g)
        ts.setdefault(int(s[i, t]), []).append(g)
  return ({k: np.mean(x) for k, x in tq.items()}, {k: np.mean(x) for k, x in ts.items()})


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_library_q_matches_a_python_table(gamma):
  rng = np.random.default_rng(0)
  batches = [_batch(rng) for _ in range(3)]
  b = jitrl.LibraryBuilder(capacity=64, gamma=gamma)
  for x in batches:
    b.add(x[0])
  lib = b.library()
  tq, ts = _reference(batches, gamma)
  assert int(lib.num_transitions) == sum(int(x[4].sum()) for x in batches)
  for s in range(6):  # states 4, 5 never seen
    for s2 in range(6):
      want = tq.get((s, s2), ts.get(s, 0.0))
      got = float(jitrl.q_values(lib, jnp.uint32(s), jnp.uint32(s2)))
      assert got == pytest.approx(want, abs=1e-5), (s, s2)
  # over capacity: the most visited keys stay, the rest are counted as dropped
  small = jitrl.LibraryBuilder(capacity=3, gamma=gamma)
  small.add(batches[0][0])
  small.library()
  assert small.dropped > 0
  with pytest.raises(ValueError, match="capacity"):
    jitrl.LibraryBuilder(capacity=0)


def test_select_draws_softmax_over_live_candidates():
  q = jnp.asarray([[0.0, 1.0, -1.0, 0.5], [2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
  live = jnp.asarray([[True] * 4, [False, True, True, True], [False] * 4])
  beta = 0.7
  m = 20000
  keys = jax.random.split(jax.random.key(0), m)
  picks = np.asarray(jax.vmap(lambda k: jitrl.select(
      q, live, jax.random.split(k, 3), beta))(keys))  # [m, 3]
  w = np.where(np.asarray(live), np.exp(np.asarray(q) / beta), 0.0)
  for row in range(2):
    want = w[row] / w[row].sum()
    freq = np.bincount(picks[:, row], minlength=4) / m
    np.testing.assert_allclose(freq, want, atol=0.015)  # ~4.5 sigma at m = 20000
  assert (picks[:, 2] == 0).all()  # no live candidate: candidate 0 (the row is finished)
  assert (picks[:, 1] != 0).all()


def test_empty_library_picks_uniformly():
  """No experience: every Q^ is 0, so the kept candidate is uniform over i.i.d. draws of pi
  (the frozen policy's own law)."""
  lib = jitrl.Library.empty(8)
  q = jitrl.q_values(lib, jnp.arange(5, dtype=jnp.uint32), jnp.arange(5, dtype=jnp.uint32))
  assert float(jnp.abs(q).max()) == 0.0
  picks = np.asarray(jitrl.select(jnp.zeros((8000, 4)), jnp.ones((8000, 4), bool),
                                  jax.random.split(jax.random.key(1), 8000), 2.0))
  np.testing.assert_allclose(np.bincount(picks, minlength=4) / 8000, 0.25, atol=0.02)


def test_test_time_rounds_raise_success_over_the_frozen_policy():
  """GuessEnv, a random tiny policy: round 1 finds the secret in some episodes; later rounds
  replay the same initial states and keep the candidates whose transition the library knows
  pays, so success rises; the frozen arm (empty library) does not learn. No gradient step."""
  pol, params = tiny_policy()
  hot = SamplerConfig(temperature=2.0, max_tokens=6, stop_tokens=STOP)
  cfg = EpisodeConfig(sampler=hot, max_turns=5, group_size=8,
                      search=SearchConfig(mode="jitrl", num_candidates=6, beta=0.05))
  fn = make_rollout(pol, GuessEnv(), cfg, PIECES)
  t, key = tasks(16), jax.random.PRNGKey(3)
  learn = time_rounds(fn, params, t, key, rounds=3, builder=jitrl.LibraryBuilder(capacity=2048))
  frozen = time_rounds(fn, params, t, key, rounds=3, learn=False,
                       builder=jitrl.LibraryBuilder(capacity=2048))
  assert len(frozen) == 3
  assert learn[0] == frozen[0] and frozen[0]["success"] > 0  # round 1: nothing learned yet
  # measured: 0.039 (round 1) -> 0.102 -> 0.109 of 128 episodes
  assert learn[-1]["success"] >= 2 * frozen[-1]["success"]
  assert learn[-1]["library_transitions"] > 0
  with pytest.raises(ValueError, match="SearchConfig.beta"):
    SearchConfig(mode="jitrl", beta=0.0)
