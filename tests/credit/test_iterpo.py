"""IterPO (credit/iterpo.py): Q read at each turn's last generated token, Monte-Carlo
return-to-go targets on the turn's tokens, and single-turn GRPO of Q among the actions
sampled at the same state — against plain NumPy / dict loops."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import credit
from agent_rl.credit import iterpo as iterpo_mod
from agent_rl.rollout.batch import from_turns
from test_carl import tool_batch  # tests/credit is on sys.path (rootdir import), as ref_turns

TOL = dict(rtol=1e-5, atol=1e-5)


def state_batch(seed, n=8, t=5, states=3):
  """tool_batch with few distinct states, so (group, state) groups of 1, 2 and more occur."""
  b = tool_batch(seed, n=n, t=t)
  rng = np.random.default_rng(100 + seed)
  return b.replace(state_hash=jnp.asarray(rng.integers(0, states, (n, t)), jnp.uint32))


def ref_iterpo(b, gamma=1.0, norm="mean_std_norm", eps=1e-6):
  r, valid = np.asarray(b.reward, np.float64), np.asarray(b.valid)
  v, m, tix = np.asarray(b.values, np.float64), np.asarray(b.loss_mask), np.asarray(b.turn_index)
  gid, sh = np.asarray(b.group_id), np.asarray(b.state_hash)
  n, t = r.shape
  q, has = np.zeros((n, t)), np.zeros((n, t), bool)
  for i in range(n):
    for p in range(v.shape[1]):  # the last loss-mask token of turn k wins
      if tix[i, p] >= 0 and m[i, p] > 0:
        q[i, tix[i, p]], has[i, tix[i, p]] = v[i, p], True
  g = np.zeros((n, t))
  for i in range(n):
    run = 0.0
    for k in reversed(range(t)):
      run = (r[i, k] if valid[i, k] else 0.0) + gamma * run
      g[i, k] = run
  groups = {}
  for i in range(n):
    for k in range(t):
      if valid[i, k] and has[i, k]:
        groups.setdefault((gid[i], sh[i, k]), []).append(q[i, k])
  adv = np.zeros((n, t))
  for i in range(n):
    for k in range(t):
      if not (valid[i, k] and has[i, k]):
        continue
      xs = np.asarray(groups[(gid[i], sh[i, k])])
      if len(xs) < 2 or np.all(xs == xs[0]):
        continue
      c = q[i, k] - xs.mean()
      adv[i, k] = c / (xs.std(ddof=1) + eps) if norm == "mean_std_norm" else c
  ret = np.zeros(v.shape)
  for i in range(n):
    for p in range(v.shape[1]):
      if tix[i, p] >= 0 and m[i, p] > 0:
        ret[i, p] = g[i, tix[i, p]]
  return adv, ret


_jit = jax.jit(credit.get("iterpo"), static_argnames=("gamma", "norm"))


@pytest.mark.parametrize("gamma,norm", [(1.0, "mean_std_norm"), (0.9, "mean_std_norm"), (0.95, "mean_norm")])
@pytest.mark.parametrize("seed", [0, 1])
def test_iterpo_matches_loop(seed, gamma, norm):
  b = state_batch(seed)
  cr = _jit(b, gamma=gamma, norm=norm)
  want_a, want_r = ref_iterpo(b, gamma, norm)
  assert cr.token is None and cr.turn.shape == b.reward.shape and cr.returns.shape == b.loss_mask.shape
  np.testing.assert_allclose(cr.turn, want_a, **TOL)
  np.testing.assert_allclose(cr.returns, want_r, **TOL)
  assert np.any(np.asarray(cr.turn) != 0)  # the batch does have multi-sample states
  tok = credit.token_advantages(cr, b.turn_index, b.loss_mask)
  assert np.all(np.asarray(tok)[np.asarray(b.loss_mask) == 0] == 0)


def test_single_turn_grpo_at_one_state():
  """Four actions at one state (one task group, turn 0): A is GRPO of their Q; a second state
  sampled once gets 0; equal Q gives 0; Q is the value at the last token, not the first."""
  n, length = 4, 6
  values = np.zeros((n, length), np.float32)
  values[:, 2] = [0.1, 0.5, 0.3, 0.7]   # last generated token of turn 0 (tokens 1, 2)
  values[:, 1] = 9.0                    # first token: a partial action, not Q
  mask = np.zeros((n, length), np.float32)
  mask[:, 1:3] = 1.0
  mask[0, 4] = 1.0                      # episode 0 alone has a turn 1 (token 4)
  tix = np.full((n, length), -1, np.int32)
  tix[:, 1:3] = 0
  tix[0, 4] = 1
  valid = np.zeros((n, 2), bool)
  valid[:, 0], valid[0, 1] = True, True
  b = from_turns(np.zeros((n, 2), np.float32), valid, np.zeros(n, np.int32)).replace(
      loss_mask=jnp.asarray(mask), turn_index=jnp.asarray(tix), values=jnp.asarray(values),
      state_hash=jnp.asarray(np.tile([[7, 8]], (n, 1)), jnp.uint32))
  a = np.asarray(credit.get("iterpo")(b).turn)
  q = np.array([0.1, 0.5, 0.3, 0.7])
  np.testing.assert_allclose(a[:, 0], (q - q.mean()) / (q.std(ddof=1) + 1e-6), rtol=1e-5)
  assert a[0, 1] == 0.0 and np.all(a[1:, 1] == 0.0)
  b_eq = b.replace(values=jnp.asarray(np.where(mask > 0, 0.4, 0.0), jnp.float32))
  assert np.all(np.asarray(credit.get("iterpo")(b_eq).turn) == 0.0)


def test_q_targets_are_return_to_go():
  reward = jnp.array([[0.0, 0.5, 1.0]])
  valid = jnp.ones((1, 3), bool)
  mask = jnp.array([[0, 1, 0, 1, 1, 0, 1]], jnp.float32)
  tix = jnp.array([[-1, 0, -1, 1, 1, -1, 2]], jnp.int32)
  ret = iterpo_mod.q_targets(reward, valid, mask, tix, gamma=0.5)
  g2, g1 = 1.0, 0.5 + 0.5 * 1.0
  g0 = 0.0 + 0.5 * g1
  np.testing.assert_allclose(ret, [[0, g0, 0, g1, g1, 0, g2]], atol=1e-6)


def test_padding_empty_turns_and_needs():
  b = state_batch(5)
  cr = _jit(b)
  valid = np.asarray(b.valid)
  assert np.all(np.asarray(cr.turn)[~valid] == 0)
  q, has = iterpo_mod.turn_q_values(b.values, b.loss_mask, b.turn_index, b.num_turns)
  assert np.all(np.asarray(cr.turn)[~np.asarray(has)] == 0)
  assert np.all(np.asarray(q)[~np.asarray(has)] == 0)
  assert credit.needs_of("iterpo").critic
  with pytest.raises(ValueError, match="iterpo.*values"):
    credit.get("iterpo")(b.replace(values=None))
  with pytest.raises(ValueError, match="norm"):
    credit.get("iterpo")(b, norm="whiten")


def test_start_up_check_on_deal_lite():
  """credit.check_inputs accepts iterpo on DealLite with a critic (token-level returns for
  it) and refuses it without one, naming the field."""
  import importlib.util
  import os
  from agent_rl import envs
  spec = importlib.util.spec_from_file_location(
      "envs_conftest_for_iterpo", os.path.join(os.path.dirname(__file__), "..", "envs", "conftest.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  env = envs.make("deal_lite", tokenizer=mod.CharTokenizer())
  chk = lambda critic: credit.check_inputs("iterpo", {"gamma": 1.0}, env=env, env_name="deal_lite",
                                           critic=critic)
  assert chk(True).critic
  with pytest.raises(ValueError, match="'iterpo' needs a critic.*config.model.critic"):
    chk(False)
