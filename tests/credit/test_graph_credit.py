"""Graph credit kernels (RewardFlow, GraphGPO, Gated-BEPO) and graph primitives vs dict/BFS
references (tests/credit/ref_turns.py)."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ref_turns as ref
from agent_rl import credit
from agent_rl.credit import graph as G
from agent_rl.rollout.batch import from_turns

SIZES = [1, 4, 3, 5, 2]
T = 7


def make(seed, **kw):
  f, gid = ref.random_walk_batch(np.random.default_rng(seed), SIZES, T, copy_group=2, **kw)
  fields = {k: v for k, v in f.items() if k not in ("reward", "valid")}
  return f, gid, from_turns(f["reward"], f["valid"], gid, **fields)


def _call(b, name, kw):
  return credit.get(name)(b, **dict(kw))


_jit = jax.jit(_call, static_argnames=("name", "kw"))


def run(name, b, **kw):
  """One compile per (kernel, hyper-parameters); the batches share shapes across seeds."""
  return _jit(b, name=name, kw=tuple(sorted(kw.items())))


# Default-config kernels wrapped in chex's trace counter: every test calling them with a new
# batch of the same shapes doubles as a no-retrace check.
def _rewardflow_default(b):
  return credit.get("rewardflow")(b)


def _graphgpo_default(b):
  return credit.get("graphgpo")(b)


def _bepo_default(b):
  return credit.get("gated_bepo")(b)


DEFAULT = {
    "rewardflow": jax.jit(chex.assert_max_traces(_rewardflow_default, n=1)),
    "graphgpo": jax.jit(chex.assert_max_traces(_graphgpo_default, n=1)),
    "gated_bepo": jax.jit(chex.assert_max_traces(_bepo_default, n=1)),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_defaults_match_reference_without_retrace(seed):
  f, gid, b = make(seed)
  tol = dict(rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(np.asarray(DEFAULT["rewardflow"](b).turn), ref.rewardflow(f, gid), **tol)
  np.testing.assert_allclose(np.asarray(DEFAULT["graphgpo"](b).turn), ref.graphgpo(f, gid), **tol)
  np.testing.assert_allclose(np.asarray(DEFAULT["gated_bepo"](b).turn), ref.gated_bepo(f, gid), **tol)


@pytest.mark.parametrize("seed", [3, 4])
def test_rewardflow_mean_std_norm(seed):
  f, gid, b = make(seed)
  got = run("rewardflow", b, norm="mean_std_norm", gamma=0.8).turn
  want = ref.rewardflow(f, gid, mode="mean_std_norm", gamma=0.8)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("seed", [3, 4])
def test_graphgpo_normalize_distance(seed):
  f, gid, b = make(seed)
  got = run("graphgpo", b, normalize_distance=True, gamma=0.5, norm="mean_norm").turn
  want = ref.graphgpo(f, gid, normalize_distance=True, gamma=0.5, mode="mean_norm")
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)


def test_gated_bepo_fusion_and_bad_fusion():
  f, gid, b = make(4)
  s = np.asarray(DEFAULT["gated_bepo"](b).turn)  # fusion "sum": A^E + A^B on gated turns
  e = np.asarray(run("gated_bepo", b, fusion="replace").turn)  # A^B on gated turns
  a_e = ref.episode_adv(f, gid, mode="mean_norm", cross_steps=True, penalty=0.1) * f["valid"]
  gated = ~np.isclose(s, a_e, atol=1e-6)
  assert gated.any()
  np.testing.assert_allclose(s[gated], a_e[gated] + e[gated], atol=1e-4)
  np.testing.assert_allclose(e[~gated], a_e[~gated], atol=1e-4)
  with pytest.raises(ValueError, match="fusion"):
    run("gated_bepo", b, fusion="product")


@jax.jit
def _chain_graph(gid, sh, nh, valid, succ):
  g = G.build(gid, sh, nh, valid, sink=True)
  g = G.redirect(g, succ)
  target = jnp.zeros((g.num_nodes,), bool).at[G.sink_id(g)].set(True)
  return g.src, g.dst, G.distance_to(g, target), G.distinct_successors(g)


def test_graph_primitives_on_a_chain():
  # One group, one episode: 1 -> 2 -> 3 -> 4 (success), plus a dead end 2 -> 5 in episode 2.
  sh = np.array([[1, 2, 3], [1, 2, 0]], np.uint32)
  nh = np.array([[2, 3, 4], [2, 5, 0]], np.uint32)
  valid = np.array([[1, 1, 1], [1, 1, 0]], bool)
  gid = np.array([0, 0], np.int32)
  succ = np.zeros(6, bool)
  succ[2] = True
  src, dst, d, nsucc = map(np.asarray, _chain_graph(gid, sh, nh, valid, succ))
  np.testing.assert_array_equal(d[src[[0, 1, 2, 4]]], [3, 2, 1, 2])
  assert np.isinf(d[dst[4]])  # state 5 cannot reach success
  nsucc = nsucc[src]
  np.testing.assert_array_equal(nsucc[[0, 1, 2, 3, 4]], [1, 2, 1, 1, 2])


@jax.jit
def _hash_ids(g, k, v):
  return G.hash_ids(g, k, v)[0]


@pytest.mark.parametrize("distinct", [3, 5000])
def test_hash_ids_equal_iff_same_key(distinct):
  rng = np.random.default_rng(distinct)
  r = 4096
  g = rng.integers(0, 7, r).astype(np.int32)
  k = rng.integers(0, distinct, r).astype(np.uint32)
  v = rng.random(r) < 0.9
  ids = np.asarray(_hash_ids(g, k, v))
  _, inv = np.unique(np.stack([g, k], 1)[v], axis=0, return_inverse=True)
  inv = inv.reshape(-1)
  same_key = inv[:, None] == inv[None, :]
  same_id = ids[v][:, None] == ids[v][None, :]
  np.testing.assert_array_equal(same_id, same_key)
