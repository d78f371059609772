"""Env info -> EpisodeBatch: extra info keys and reward terms become turn-level extras
`[N, T]` (dtype kept, 0 on padded turns), agent_id / milestone / fatal come from info, in
the compiled rollout and, bit for bit, through the host bridge (with and without an
`info_spec`). The reference recomputes every column from the stored tokens in NumPy."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.envs.base import Text
from agent_rl.rollout.batch import from_turns
from agent_rl.rollout.bridge import HostRollout, JaxHostEnv
from agent_rl.rollout.carry import EpisodeCarry, extra_columns
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.sampler import SamplerConfig

from toy import PIECES, STOP, GuessEnv, tasks, tiny_policy

SAMPLER = SamplerConfig(temperature=0.7, top_k=12, max_tokens=6, stop_tokens=STOP)
CFG = EpisodeConfig(sampler=SAMPLER, max_turns=3, group_size=2)
EXTRAS = {"guess": np.int32, "close": np.bool_, "score": np.float32,
          "reward_terms/success": np.float32, "reward_terms/format": np.float32}


@dataclasses.dataclass(frozen=True)
class SignalEnv(GuessEnv):
  """GuessEnv whose info also carries extras of three dtypes and the optional fixed fields."""
  reward_names = ("success", "format")

  def step(self, state, action: Text):
    new, obs, reward, done, info = super().step(state, action)
    first, valid = action.tokens[0], action.length >= 1
    info = dict(info, guess=jnp.where(valid, first, -1).astype(jnp.int32),
                close=jnp.abs(first - state["secret"]) <= 2,
                score=0.5 * new["step"].astype(jnp.float32),
                agent_id=new["step"] % 2, milestone=first > 30, fatal=~valid)
    return new, obs, reward, done, info


class NoSpecHostEnv:
  """A host env that cannot describe its info up front (extras learned at the first step)."""

  def __init__(self, env):
    self._inner = JaxHostEnv(env)
    self.action_len, self.reward_names = self._inner.action_len, self._inner.reward_names

  @property
  def obs_len(self):
    return self._inner.obs_len

  def reset(self, *a):
    return self._inner.reset(*a)

  def step(self, *a):
    return self._inner.step(*a)


def _reference(batch, secrets):
  """Every extra and optional fixed field, from the stored tokens and turn validity."""
  tok, ti, lm = (np.asarray(x) for x in (batch.tokens, batch.turn_index, batch.loss_mask))
  valid = np.asarray(batch.valid)
  n, t = valid.shape
  ref = {k: np.zeros((n, t), d) for k, d in EXTRAS.items()}
  ref.update(agent_id=np.zeros((n, t), np.int32), milestone=np.zeros((n, t), bool),
             fatal=np.zeros((n, t), bool))
  for i in range(n):
    for j in range(t):
      if not valid[i, j]:
        continue
      g = tok[i][(ti[i] == j) & (lm[i] > 0)][0]          # first generated token of turn j
      ok = g not in STOP                                 # the env reads the action sans stop
      first = g if ok else PIECES.pad_id
      success = ok and first == secrets[i]
      ref["guess"][i, j] = first if ok else -1
      ref["close"][i, j] = abs(int(first) - int(secrets[i])) <= 2
      ref["score"][i, j] = 0.5 * (j + 1)
      ref["reward_terms/success"][i, j] = float(success)
      ref["reward_terms/format"][i, j] = -0.1 * (not ok)
      ref["agent_id"][i, j] = (j + 1) % 2
      ref["milestone"][i, j], ref["fatal"][i, j] = first > 30, not ok
  return ref


@pytest.fixture(scope="module")
def compiled():
  pol, params = tiny_policy()
  batch, m = make_rollout(pol, SignalEnv(), CFG, PIECES)(params, tasks(2), jax.random.PRNGKey(4))
  return pol, params, batch, m


def test_compiled_rollout_carries_extras(compiled):
  _, _, batch, _ = compiled
  assert set(batch.extras) == set(EXTRAS)
  for k, d in EXTRAS.items():
    assert batch.extras[k].shape == batch.reward.shape and batch.extras[k].dtype == d, k
  secrets = np.repeat(np.asarray(tasks(2)["secret"]), CFG.group_size)
  ref = _reference(batch, secrets)
  valid = np.asarray(batch.valid)
  assert valid.sum() > valid.shape[0]  # several multi-turn episodes
  for k in EXTRAS:
    np.testing.assert_array_equal(np.asarray(batch.extras[k]), ref[k], err_msg=k)
  for k in ("agent_id", "milestone", "fatal"):
    np.testing.assert_array_equal(np.asarray(getattr(batch, k)), ref[k], err_msg=k)
  terms = sum(np.asarray(batch.extras[f"reward_terms/{k}"]) for k in SignalEnv.reward_names)
  np.testing.assert_allclose(terms, np.asarray(batch.reward), atol=1e-6)


@pytest.mark.parametrize("host", ["info_spec", pytest.param("learned", marks=pytest.mark.slow)])
def test_host_bridge_extras_bit_for_bit(compiled, host):
  pol, params, ref, mref = compiled
  env = JaxHostEnv(SignalEnv()) if host == "info_spec" else NoSpecHostEnv(SignalEnv())
  got, mgot = HostRollout(pol, env, CFG, PIECES)(params, tasks(2), jax.random.PRNGKey(4))
  assert set(got.extras) == set(ref.extras)
  for k in ref.extras:
    assert got.extras[k].dtype == ref.extras[k].dtype, k
    np.testing.assert_array_equal(np.asarray(got.extras[k]), np.asarray(ref.extras[k]), err_msg=k)
  for k in ("agent_id", "milestone", "fatal", "tokens", "valid"):
    np.testing.assert_array_equal(np.asarray(getattr(got, k)), np.asarray(getattr(ref, k)), k)
  for k in mref:
    np.testing.assert_allclose(float(mgot[k]), float(mref[k]), atol=1e-5, err_msg=k)


def test_bridge_carry_is_typed(compiled):
  pol, params, _, _ = compiled
  runner = HostRollout(pol, JaxHostEnv(SignalEnv()), CFG, PIECES)
  loop, start, *_ = runner.steps(4, GuessEnv().obs_len, None)
  obs = Text(jnp.zeros((4, GuessEnv().obs_len), jnp.int32), jnp.ones((4,), jnp.int32))
  carry = jax.eval_shape(loop.start, params, jnp.zeros((4,), jnp.int32), obs,
                         jnp.zeros((4, 2), jnp.uint32), jnp.zeros((4,), jnp.uint32))
  assert isinstance(carry, EpisodeCarry) and carry.turns.reward.shape == (4, CFG.max_turns)


def test_extra_columns_errors_name_the_key():
  n = 3
  with pytest.raises(ValueError, match="'probs'"):
    extra_columns({"probs": jnp.zeros((n, 2))}, n)
  with pytest.raises(ValueError, match="reward_names"):
    extra_columns({"reward_terms": jnp.zeros((n, 2))}, n, reward_names=("a", "b", "c"))
  cols = extra_columns({"reward_terms": jnp.zeros((n, 2)), "success": jnp.zeros(n, bool),
                        "x": jnp.zeros(n, jnp.int8)}, n)
  assert cols == {"reward_terms/0": ("reward_terms", 0, np.dtype(np.float32)),
                  "reward_terms/1": ("reward_terms", 1, np.dtype(np.float32)),
                  "x": ("x", None, np.dtype(np.int8))}


def test_from_turns_accepts_extras():
  r = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
  q = np.array([[3, 1], [0, 2]], np.int32)
  b = from_turns(r, np.ones((2, 2), bool), np.array([0, 0]), extras={"question_index": q})
  np.testing.assert_array_equal(np.asarray(b.extras["question_index"]), q)
  assert b.extras["question_index"].dtype == np.int32
  assert from_turns(r, np.ones((2, 2), bool), np.array([0, 0])).extras == {}
  leaves = jax.tree.leaves(b)   # extras are pytree leaves (jit / tree.map see them)
  assert any(x is b.extras["question_index"] for x in leaves)
  with pytest.raises(ValueError, match="question_index"):
    from_turns(r, np.ones((2, 2), bool), np.array([0, 0]), extras={"question_index": q[:, :1]})
  with pytest.raises(TypeError, match="extras="):
    from_turns(r, np.ones((2, 2), bool), np.array([0, 0]), prm_score=r)
