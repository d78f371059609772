"""Rollout strategies on small hand-computed cases, plus the in-loop gate and TSR."""
import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from agent_rl.rollout import search
from agent_rl.rollout.batch import from_turns
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig, SearchConfig
from agent_rl.rollout.gate import GateConfig, gate_groups, levenshtein
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.rollout.strategies import STRATEGIES, dapo, skill_pairs, starpo_s

from toy import PIECES, STOP, GuessEnv, tasks, tiny_policy

SAMPLER = SamplerConfig(temperature=0.7, top_k=12, max_tokens=6, stop_tokens=STOP)


def py_levenshtein(a, b):
  d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
  for i in range(len(a) + 1):
    for j in range(len(b) + 1):
      if i == 0 or j == 0:
        d[i][j] = i + j
      else:
        d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
  return d[-1][-1]


def test_levenshtein_matches_dp():
  rng = np.random.RandomState(0)
  a = rng.randint(0, 3, (200, 6)).astype(np.uint32)
  b = rng.randint(0, 3, (200, 6)).astype(np.uint32)
  got = np.asarray(jax.jit(jax.vmap(levenshtein))(a, b))
  assert list(got) == [py_levenshtein(list(x), list(y)) for x, y in zip(a, b)]


def test_gate_hand_cases():
  sym = np.array([[1, 2, 3, 9], [1, 2, 3, 9], [1, 2, 3, 9],    # identical -> d=0 -> cut
                  [1, 2, 3, 0], [4, 5, 6, 0], [1, 2, 6, 0],    # d = (3+1+2)/3/3 = 0.667 -> keep
                  [1, 2, 3, 0], [1, 2, 3, 0], [1, 2, 3, 0],    # traj 0 short -> not evaluated
                  [1, 2, 3, 0], [1, 7, 8, 0], [5, 6, 7, 0]],   # 2 of 3 ended before K
                 np.uint32)
  turns = np.array([3, 3, 3, 3, 3, 3, 2, 3, 3, 3, 1, 2])
  cut, d, t = gate_groups(jnp.asarray(sym), jnp.asarray(turns), 3, GateConfig(turn=3))
  np.testing.assert_allclose(np.asarray(d)[:2], [0.0, 6 / 9], atol=1e-6)
  # group 3: prefixes [1,2,3] [1,E,E] [5,6,E]: distances 2, 3, 2 -> 7/9
  np.testing.assert_allclose(float(d[3]), 7 / 9, atol=1e-6)
  np.testing.assert_allclose(np.asarray(t), [0, 0, 1 / 3, 2 / 3], atol=1e-6)
  assert list(np.asarray(cut)) == [True, False, False, False]
  cut, _, _ = gate_groups(jnp.asarray(sym), jnp.asarray(turns), 3,
                          GateConfig(turn=3, ended_frac=0.6))
  assert list(np.asarray(cut)) == [True, False, False, True]


def test_gate_in_loop_cuts_and_masks():
  pol, params = tiny_policy()
  cfg = STRATEGIES.get("selective_gate").configure(
      EpisodeConfig(sampler=SAMPLER, max_turns=4, group_size=3), turn=2, threshold=1.01)
  batch, m = make_rollout(pol, GuessEnv(), cfg, PIECES)(params, tasks(2), jax.random.PRNGKey(3))
  valid, lm = np.asarray(batch.valid), np.asarray(batch.loss_mask)
  n_turns = valid.sum(1).reshape(2, 3)
  expect_cut = np.repeat(n_turns[:, 0] >= 2, 3)  # d <= 1 < 1.01 always: cut iff evaluated
  assert expect_cut.any()
  assert np.all(lm[expect_cut] == 0) and np.all(lm[~expect_cut].sum(1) > 0)
  assert not valid[expect_cut, 2:].any()  # live trajectories stopped at K
  assert float(m["rollout/gate_cut_episodes"]) == expect_cut.sum()


def _turn_batch(rewards, g):
  r = np.asarray(rewards, np.float32)
  return from_turns(r, np.ones(r.shape, bool), np.arange(r.shape[0]) // g)


def test_starpo_s_keeps_top_std_groups():
  # 4 groups of 3, one turn: stds 0, 1, 0.577, 2 -> top half: groups 3, 1
  b = _turn_batch([[0], [0], [0], [0], [1], [2], [0], [0], [1], [0], [2], [4]], 3)
  out, m = starpo_s(lambda *a: (b, {}), None, None, None, ratio=0.5)
  np.testing.assert_array_equal(np.asarray(out.reward)[:, 0], [0, 2, 4, 0, 1, 2])
  np.testing.assert_array_equal(np.asarray(out.group_id), [0, 0, 0, 1, 1, 1])
  out, _ = starpo_s(lambda *a: (b, {}), None, None, None, ratio=0.25, filter_type="std_rev")
  np.testing.assert_array_equal(np.asarray(out.reward)[:, 0], [0, 0, 0])
  with pytest.raises(ValueError, match="ratio"):
    starpo_s(lambda *a: (b, {}), None, None, None, ratio=0.1)


def test_dapo_refills_and_bounds():
  batches = [_turn_batch([[1], [1], [0], [1]], 2),   # group 0 zero spread, group 1 kept
             _turn_batch([[2], [2], [3], [3]], 2),   # both zero spread
             _turn_batch([[5], [6], [7], [7]], 2)]   # group 0 kept
  calls = []

  def fn(params, tasks, key):
    calls.append(key)
    return batches[len(calls) - 1], {"x": 1.0}

  out, m = dapo(fn, None, None, jax.random.PRNGKey(0), max_num_gen_batches=5)
  np.testing.assert_array_equal(np.asarray(out.reward)[:, 0], [0, 1, 5, 6])
  np.testing.assert_array_equal(np.asarray(out.group_id), [0, 0, 1, 1])
  assert float(m["dapo/num_gen_batches"]) == 3 and float(m["dapo/padded_groups"]) == 0
  assert not np.array_equal(np.asarray(calls[0]), np.asarray(calls[1]))  # fresh keys
  calls.clear()
  out, m = dapo(fn, None, None, jax.random.PRNGKey(0), max_num_gen_batches=2)
  np.testing.assert_array_equal(np.asarray(out.reward)[:, 0], [0, 1, 1, 1])  # padded
  assert float(m["dapo/padded_groups"]) == 1
  calls.clear()
  with pytest.raises(ValueError, match="max_num_gen_batches"):
    dapo(fn, None, None, jax.random.PRNGKey(0), max_num_gen_batches=2, on_exhausted="raise")


@struct.dataclass
class _SkillTask:
  task_id: jax.Array
  skill: jax.Array


def test_skill_pairs_groups_both_streams_of_a_task():
  tasks = _SkillTask(task_id=jnp.arange(4), skill=jnp.zeros(4, bool))
  seen = []

  def fn(params, t, key):  # reward = 10 * task id + skill flag, G = 2 members per task
    seen.append(t)
    r = np.repeat(10 * np.asarray(t.task_id) + np.asarray(t.skill), 2)[:, None]
    b = _turn_batch(r, 2)
    return b.replace(success=jnp.asarray(np.asarray(t.skill).repeat(2))[:, None]), {}

  out, m = skill_pairs(fn, None, tasks, None)
  np.testing.assert_array_equal(np.asarray(seen[0].task_id), [0, 1, 0, 1])  # first half, twice
  np.testing.assert_array_equal(np.asarray(seen[0].skill), [1, 1, 0, 0])
  np.testing.assert_array_equal(np.asarray(out.reward)[:, 0], [1, 1, 0, 0, 11, 11, 10, 10])
  np.testing.assert_array_equal(np.asarray(out.group_id), [0, 0, 0, 0, 1, 1, 1, 1])
  assert float(m["skill_pairs/success_injected"]) == 1 and float(m["skill_pairs/success_free"]) == 0
  with pytest.raises(ValueError, match="field"):
    skill_pairs(fn, None, tasks, None, field="hint")
  with pytest.raises(ValueError, match="even"):
    skill_pairs(fn, None, _SkillTask(jnp.arange(3), jnp.zeros(3, bool)), None)


@struct.dataclass
class _Carry:
  """The carry fields search.select reads (cumulative return, env state) plus a payload x."""
  episode_return: jax.Array
  x: jax.Array
  env_state: jax.Array


def test_search_select_hand_cases():
  # 2 episodes (one group of G=2) x 3 candidates
  carry = _Carry(episode_return=jnp.array([0., 1., 0.5, 2., 2., 3.]), x=jnp.arange(6),
                 env_state=jnp.zeros(6))
  turn_r = jnp.array([0., 1., 0.5, 0., 0., 1.])
  alive = jnp.array([True] * 3 + [False] * 3)
  out, rows = search.select(carry, turn_r, alive, 2, 2, SearchConfig("best_of_n", 3))
  assert list(np.asarray(rows)) == [1, 3]  # episode 1 finished: only its candidate 0 competes
  out, rows = search.select(carry, turn_r, alive, 2, 2, SearchConfig("beam", 3))
  assert list(np.asarray(rows)) == [3, 1]  # top-2 cumulative among {0,1,0.5,2}
  assert list(np.asarray(out.x)) == [3, 1]
  heur = SearchConfig("best_of_n", 3, heuristic=lambda s: s)
  carry = carry.replace(env_state=jnp.array([5., 0., 0., 0., 0., 0.]))
  _, rows = search.select(carry, turn_r, alive, 2, 2, heur)
  assert list(np.asarray(rows)) == [0, 3]
  # A named heuristic (settable from a config) resolves against the env's progress(state).
  class _Env:
    progress = staticmethod(lambda s: s)
  named = SearchConfig("best_of_n", 3, heuristic="env_progress")
  _, rows = search.select(carry, turn_r, alive, 2, 2, named, _Env())
  assert list(np.asarray(rows)) == [0, 3]
  with pytest.raises(ValueError, match="progress"):
    search.select(carry, turn_r, alive, 2, 2, named, object())
  with pytest.raises(KeyError, match="heuristic"):
    search.select(carry, turn_r, alive, 2, 2, SearchConfig("best_of_n", 3, heuristic="nope"), _Env())


@pytest.mark.parametrize("mode", ["best_of_n", pytest.param("beam", marks=pytest.mark.slow)])
def test_tsr_rollout_consistent_and_better(mode):
  pol, params = tiny_policy()
  hot = SamplerConfig(temperature=2.0, max_tokens=6, stop_tokens=STOP)  # diverse candidates
  base = EpisodeConfig(sampler=hot, max_turns=3, group_size=2)
  # score = the guessed token (a shaped heuristic on the state): search must raise it
  cfg = STRATEGIES.get("tsr").configure(base, mode=mode, num_candidates=4,
                                        heuristic=lambda s: s["last"].astype(jnp.float32))
  batch, m = make_rollout(pol, GuessEnv(), cfg, PIECES)(params, tasks(3), jax.random.PRNGKey(5))
  plain, mp = make_rollout(pol, GuessEnv(), base, PIECES)(params, tasks(3), jax.random.PRNGKey(5))
  # stored behaviour log-probs are those of the stored (chosen) tokens
  logits, _ = pol.forward(pol.graphdef, params, batch.tokens, batch.position, batch.attention_mask)
  lp = jax.nn.log_softmax(logits[:, :-1], -1)
  lp = np.take_along_axis(np.asarray(lp), np.asarray(batch.tokens)[:, 1:, None], -1)[..., 0]
  mask = np.asarray(batch.loss_mask)[:, 1:] > 0
  np.testing.assert_allclose(np.asarray(batch.logprobs)[:, 1:][mask], lp[mask], atol=1e-5)
  def first_tokens(b):
    tok, ti = np.asarray(b.tokens), np.asarray(b.turn_index)
    return [tok[i][ti[i] == t][0] for i in range(tok.shape[0]) for t in range(3)
            if (ti[i] == t).any()]
  assert np.mean(first_tokens(batch)) > np.mean(first_tokens(plain)) + 3


def test_tsr_windowed_prefills_each_context_once():
  """Windowed TSR: an episode's k candidate clones share one window context, so it is
  prefilled on the n episode rows and repeated (history.WindowedHistory._sample). Reference:
  the same rollout with an identity `route`, which makes the loop treat rows as per-agent and
  prefill every clone (the path before); both must sample the same episodes."""
  pol, params = tiny_policy()
  hot = SamplerConfig(temperature=2.0, max_tokens=6, stop_tokens=STOP)
  base = EpisodeConfig(sampler=hot, max_turns=3, group_size=2, history="windowed",
                       window_turns=1)
  cfg = STRATEGIES.get("tsr").configure(base, mode="best_of_n", num_candidates=4,
                                        heuristic=lambda s: s["last"].astype(jnp.float32))
  rows = []

  def counted(p):
    def prefill(graphdef, prm, tokens, *args, **kwargs):
      rows.append(tokens.shape[0])  # at trace time
      return p.prefill(graphdef, prm, tokens, *args, **kwargs)
    return dataclasses.replace(p, prefill=prefill)

  key = jax.random.PRNGKey(5)
  batch, m = make_rollout(counted(pol), GuessEnv(), cfg, PIECES)(params, tasks(3), key)
  assert set(rows) == {6}  # 3 tasks x 2 episodes, not x 4 candidates
  rows.clear()
  ref_pol = dataclasses.replace(counted(pol), route=lambda prm, agent: prm)
  ref, mr = make_rollout(ref_pol, GuessEnv(), cfg, PIECES)(params, tasks(3), key)
  assert set(rows) == {24}
  np.testing.assert_array_equal(np.asarray(batch.tokens), np.asarray(ref.tokens))
  np.testing.assert_allclose(np.asarray(batch.logprobs), np.asarray(ref.logprobs), atol=1e-5)
  np.testing.assert_array_equal(np.asarray(batch.reward), np.asarray(ref.reward))
  assert int(np.asarray(batch.loss_mask).sum()) > 0
