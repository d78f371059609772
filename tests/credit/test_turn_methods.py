"""BEACON, Dr. MAS, per-agent, UMA, PiCA, fatal-aware, SkillC, Skill-R1 vs the dict references
(tests/credit/ref_turns.py)."""
import chex
import jax
import numpy as np
import pytest

import ref_turns as ref
from agent_rl import credit
from agent_rl.credit import fatal, milestone
from agent_rl.rollout.batch import from_turns

SIZES = [1, 4, 3, 5, 2]
T = 7
TOL = dict(rtol=1e-3, atol=1e-3)


def make(seed, **kw):
  f, gid = ref.random_walk_batch(np.random.default_rng(seed), SIZES, T, copy_group=2, **kw)
  fields = {k: v for k, v in f.items() if k not in ("reward", "valid")}
  return f, gid, from_turns(f["reward"], f["valid"], gid, **fields)


def turn(name, b, **kw):
  return np.asarray(credit.get(name)(b, **kw).turn)


def with_extras(b, **extras):
  """The batch with turn-level extras; `[N]` episode values are broadcast to `[N, T]`, as an
  env emitting the same value on every turn would give."""
  n, t = b.valid.shape
  ex = {k: np.broadcast_to(np.asarray(v)[:, None], (n, t)) if np.ndim(v) == 1 else np.asarray(v)
        for k, v in extras.items()}
  return b.replace(extras={**b.extras, **{k: jax.numpy.asarray(v) for k, v in ex.items()}})


@pytest.mark.parametrize("seed,norm", [(0, "mean_norm"), (1, "mean_std_norm")])
def test_beacon_flags(seed, norm):
  f, gid, b = make(seed)
  np.testing.assert_allclose(turn("beacon", b, norm=norm, gamma_m=0.9),
                             ref.beacon(f, gid, mode=norm, gamma_m=0.9), **TOL)


def test_beacon_ordered_list_matching():
  acts = [["go to desk", "take mug", "look", "go to sink", "clean mug"], ["look", "take mug"], ["x"]]
  ms = [["go to desk", "take mug", "clean mug"], ["go to desk", "take mug"], None]
  rew, seg = milestone.milestone_segments(acts, ms, 6, threshold=0.9, gamma_m=0.5, scale=10.0)
  # Episode 0: all matched at 0, 1, 4 -> rewards 10, 10, 2.5, 5, 10; (no step after the last match here).
  np.testing.assert_allclose(rew[0], [10, 10, 2.5, 5, 10, 0])
  np.testing.assert_array_equal(seg[0][:5], [0, 1, 2, 2, 2])
  # Episode 1: first milestone unmatched -> all steps segment 0, reward 0.
  np.testing.assert_array_equal(rew[1], 0)
  np.testing.assert_array_equal(seg[1][:2], [0, 0])
  np.testing.assert_array_equal(seg[2], 0)
  valid = np.zeros((3, 6), bool)
  for i, a in enumerate(acts):
    valid[i, :len(a)] = True
  b = from_turns(np.zeros((3, 6)), valid, np.zeros(3, np.int32))
  a = turn("beacon", with_extras(b, segment_reward=rew, segment_id=seg))
  keys = {}
  for i, t in ref.rows_of(valid):
    keys.setdefault(int(seg[i, t]), []).append(rew[i, t])
  for i, t in ref.rows_of(valid):  # A^E = 0 (all returns 0), A^seg = r - mean of its segment group
    vals = keys[int(seg[i, t])]
    want = 0.0 if len(vals) == 1 else rew[i, t] - np.mean(vals)
    np.testing.assert_allclose(a[i, t], want, atol=1e-5)
  with pytest.raises(ValueError, match="segment_reward"):
    credit.get("beacon")(with_extras(b, segment_reward=rew))


@pytest.mark.parametrize("group_by_agent", [True, False])
@pytest.mark.parametrize("use_std", [True, False])
def test_drmas(group_by_agent, use_std):
  f, gid, b = make(2)
  np.testing.assert_allclose(turn("drmas", b, group_by_agent=group_by_agent, norm_by_std=use_std),
                             ref.drmas(f, gid, group_by_agent=group_by_agent, use_std=use_std), **TOL)


@pytest.mark.parametrize("seed", [0, 3])
def test_per_agent(seed):
  f, gid, b = make(seed, num_agents=3)
  np.testing.assert_allclose(turn("per_agent", b), ref.per_agent(f, gid), **TOL)


def test_uma():
  f, gid, b = make(4)
  rng = np.random.default_rng(9)
  q = np.where(rng.random(f["valid"].shape) < 0.5, rng.integers(1, 4, f["valid"].shape), 0).astype(np.int32)
  np.testing.assert_allclose(turn("uma", with_extras(b, question_index=q)), ref.uma(f, gid, q), **TOL)
  with pytest.raises(ValueError, match="question_index"):
    credit.get("uma")(b)  # the extra is missing
  with pytest.raises(ValueError, match="question_index"):
    credit.get("uma")(b.replace(extras={"question_index": jax.numpy.asarray(q[:, :2])}))


@pytest.mark.parametrize("joint", [False, True])
def test_pica(joint):
  f, gid, b = make(5)
  prm = np.random.default_rng(3).random(f["valid"].shape).astype(np.float32)
  np.testing.assert_allclose(turn("pica", with_extras(b, prm_score=prm), joint=joint, gamma=0.9),
                             ref.pica(f, gid, prm, joint=joint, gamma=0.9), **TOL)


@pytest.mark.parametrize("estimator", ["rloo", "grpo"])
def test_fatal_aware(estimator):
  f, gid = ref.random_walk_batch(np.random.default_rng(6), SIZES, T, p_invalid=0.0, copy_group=2)
  f["reward"] = np.random.default_rng(2).random(f["reward"].shape).astype(np.float32)
  f["fatal"] = np.random.default_rng(3).random(f["fatal"].shape) < 0.6
  f["fatal"][3, :3] = True  # a cascade from turn 0: dropped episode (if it has 3 turns)
  b = from_turns(f["reward"], f["valid"], gid, **{k: v for k, v in f.items() if k not in ("reward", "valid")})
  abnormal = np.random.default_rng(1).random(len(gid)) < 0.3
  # The env raises `abnormal` on the episode's last valid turn only (reduce="any" reads it).
  last = f["valid"] & (np.cumsum(f["valid"], 1) == f["valid"].sum(1, keepdims=True))
  c = credit.get("fatal_aware")(with_extras(b, abnormal=abnormal[:, None] & last), estimator=estimator)
  want, mask = ref.fatal_aware(f, gid, estimator=estimator, abnormal=abnormal)
  np.testing.assert_allclose(np.asarray(c.turn), want, **TOL)
  np.testing.assert_array_equal(np.asarray(c.mask), mask)
  f_idx = np.asarray(fatal.fatal_index(b.fatal, b.valid))
  assert (f_idx < T).any() and (f_idx == T).any()  # the data exercises both cases


def test_skillc():
  f, gid, b = make(7)
  inj = np.random.default_rng(2).random(len(gid)) < 0.5
  np.testing.assert_allclose(turn("skillc", with_extras(b, skill_injected=inj), lam=0.7),
                             ref.skillc(f, gid, inj, 0.7), **TOL)


def test_skill_r1():
  f, gid, b = make(8)
  n = len(gid)
  rng = np.random.default_rng(4)
  gen = rng.integers(0, 3, n).astype(np.int32)
  rr = rng.random((n, 5)).astype(np.float32)
  np.testing.assert_allclose(turn("skill_r1", with_extras(b, generation=gen, skill_return=rr.mean(1)), beta=0.5),
                             ref.skill_r1(f, gid, gen, beta=0.5, rollout_rewards=rr), **TOL)
  parent = np.where(rng.random(n) < 0.5, rng.integers(0, n, n), -1).astype(np.int32)
  np.testing.assert_allclose(turn("skill_r1", with_extras(b, generation=gen, parent=parent)),
                             ref.skill_r1(f, gid, gen, parent=parent), **TOL)


def _skillc_traced(b, lam):
  return credit.get("skillc")(b, lam=lam).turn


def test_no_retrace_when_curriculum_lambda_changes():
  fn = jax.jit(chex.assert_max_traces(_skillc_traced, n=1))
  for seed, lam in [(0, 0.1), (1, 0.5)]:
    f, gid, b = make(seed)
    inj = np.arange(len(gid)) % 2 == 0
    np.testing.assert_allclose(np.asarray(fn(with_extras(b, skill_injected=inj), lam)),
                               ref.skillc(f, gid, inj, lam), **TOL)
