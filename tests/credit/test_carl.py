"""CARL's segment critic (credit/carl.py) vs a plain NumPy loop over episodes, tokens and turns.

Batches look like real tool-use rollouts: a prompt (turn -1), then per turn a span of
generated tokens (loss mask 1) followed by an observation span (the tool result: loss mask 0,
turn -1), padded tails, some valid turns with no generated token.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import credit
from agent_rl.credit import carl as carl_mod
from agent_rl.rollout.batch import from_turns

TOL = dict(rtol=1e-5, atol=1e-5)


def tool_batch(seed, n=7, t=5, prompt=3):
  """An EpisodeBatch with prompt / action / observation spans and random critic values."""
  rng = np.random.default_rng(seed)
  turns = rng.integers(1, t + 1, n)
  valid = np.arange(t)[None, :] < turns[:, None]
  reward = np.where(valid, rng.normal(size=(n, t)), 0.0).astype(np.float32)
  act = rng.integers(0, 4, (n, t))  # 0 generated tokens: a turn with no loss-mask token
  obs = rng.integers(1, 4, (n, t))
  length = prompt + int(np.max(np.sum((act + obs) * valid, 1))) + 2
  mask = np.zeros((n, length), np.float32)
  tix = np.full((n, length), -1, np.int32)
  for i in range(n):
    p = prompt
    for k in range(turns[i]):
      mask[i, p:p + act[i, k]] = 1.0
      tix[i, p:p + act[i, k]] = k
      p += act[i, k] + obs[i, k]
  b = from_turns(reward, valid, np.arange(n) // 2)
  return b.replace(tokens=jnp.zeros((n, length), jnp.int32), loss_mask=jnp.asarray(mask),
                   turn_index=jnp.asarray(tix),
                   position=jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (n, length)),
                   logprobs=jnp.zeros((n, length), jnp.float32),
                   values=jnp.asarray(rng.normal(size=(n, length)), jnp.float32))


def ref_carl(b, gamma=1.0, lam=1.0, whiten=True):
  """Dict-free plain loops: segment value = value at the segment's first loss-mask token."""
  r, valid = np.asarray(b.reward, np.float64), np.asarray(b.valid)
  v, m, tix = np.asarray(b.values, np.float64), np.asarray(b.loss_mask), np.asarray(b.turn_index)
  n, t = r.shape
  vs, cnt = np.zeros((n, t)), np.zeros((n, t))
  for i in range(n):
    seen = set()
    for p in range(v.shape[1]):
      k = tix[i, p]
      if k >= 0 and m[i, p] > 0:
        cnt[i, k] += 1
        if k not in seen:
          seen.add(k)
          vs[i, k] = v[i, p]
  adv, ret = np.zeros((n, t)), np.zeros((n, t))
  for i in range(n):
    nk = int(valid[i].sum())
    a = 0.0
    for k in reversed(range(nk)):
      v_next = vs[i, k + 1] if k + 1 < nk else 0.0
      a = r[i, k] + gamma * v_next - vs[i, k] + gamma * lam * a
      adv[i, k], ret[i, k] = a, a + vs[i, k]
  if whiten:
    w = cnt * valid
    s = w.sum()
    mu = (adv * w).sum() / (s + 1e-8)
    var = (((adv - mu) ** 2) * w).sum() / (s + 1e-8) * s / (s - 1)
    adv = (adv - mu) / np.sqrt(var + 1e-8) * valid
  ret_tok = np.zeros(v.shape)
  for i in range(n):
    for p in range(v.shape[1]):
      if tix[i, p] >= 0 and m[i, p] > 0:
        ret_tok[i, p] = ret[i, tix[i, p]]
  return adv, ret_tok


_jit = jax.jit(credit.get("carl"), static_argnames=("gamma", "lam", "whiten"))


@pytest.mark.parametrize("gamma,lam,whiten", [(1.0, 1.0, True), (0.9, 0.0, True), (0.95, 0.7, False)])
@pytest.mark.parametrize("seed", [0, 1])
def test_carl_matches_loop(seed, gamma, lam, whiten):
  b = tool_batch(seed)
  cr = _jit(b, gamma=gamma, lam=lam, whiten=whiten)
  want_a, want_r = ref_carl(b, gamma, lam, whiten)
  assert cr.token is None and cr.turn.shape == b.reward.shape and cr.returns.shape == b.loss_mask.shape
  np.testing.assert_allclose(cr.turn, want_a, **TOL)
  np.testing.assert_allclose(cr.returns, want_r, **TOL)
  # The loss sees each segment's advantage on its generated tokens only (never observations).
  tok = credit.token_advantages(cr, b.turn_index, b.loss_mask)
  assert np.all(np.asarray(tok)[np.asarray(b.loss_mask) == 0] == 0)


def test_segment_credit_is_td_between_boundaries():
  """lam=0: each segment's credit is V(next boundary) - V(its boundary) (+ its reward), the
  outcome on the answer turn: a search that raises the value is credited, one that does not
  gets 0, an answer that fails after a confident critic is penalized."""
  v_seg = jnp.array([[0.2, 0.9, 0.9]])  # useful search, unneeded search, answer
  reward = jnp.array([[0.0, 0.0, 0.0]])
  adv, ret = carl_mod.segment_gae(reward, v_seg, jnp.ones((1, 3), bool), 1.0, 0.0)
  np.testing.assert_allclose(adv, [[0.7, 0.0, -0.9]], atol=1e-6)
  np.testing.assert_allclose(ret, [[0.9, 0.9, 0.0]], atol=1e-6)
  # lam=1: A_k = G - V_k, the Monte-Carlo return against each segment's own baseline.
  adv, _ = carl_mod.segment_gae(jnp.array([[0.0, 0.0, 1.0]]), v_seg, jnp.ones((1, 3), bool), 1.0, 1.0)
  np.testing.assert_allclose(adv, [[0.8, 0.1, 0.1]], atol=1e-6)


def test_padding_and_empty_segments():
  b = tool_batch(3)
  cr = _jit(b, gamma=1.0, lam=1.0, whiten=False)
  valid = np.asarray(b.valid)
  assert np.all(np.asarray(cr.turn)[~valid] == 0)
  v_seg, n_tok = carl_mod.segment_values(b.values, b.loss_mask, b.turn_index, b.num_turns)
  assert np.all(np.asarray(v_seg)[np.asarray(n_tok) == 0] == 0)
  assert np.array_equal(np.asarray(n_tok).sum(1), np.asarray(b.loss_mask).sum(1))


def test_deterministic_and_needs_a_critic():
  b = tool_batch(4)
  a1, a2 = _jit(b), _jit(b)
  assert np.array_equal(np.asarray(a1.turn), np.asarray(a2.turn))
  assert credit.needs_of("carl").critic
  with pytest.raises(ValueError, match="carl.*values"):
    credit.get("carl")(b.replace(values=None))


def test_start_up_check_on_kb_search_qa():
  """The run's start-up check (credit.check_inputs) accepts carl on the real tool-use env with
  a critic and refuses it without one, naming the field to set."""
  import importlib.util
  import os
  from agent_rl import envs
  spec = importlib.util.spec_from_file_location(
      "envs_conftest_for_carl", os.path.join(os.path.dirname(__file__), "..", "envs", "conftest.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  env = envs.make("kb_search_qa", tokenizer=mod.CharTokenizer(), num_entities=40, max_hops=2,
                  max_searches=2, max_turns=3, num_questions=16)
  chk = lambda critic: credit.check_inputs("carl", {"lam": 0.0}, env=env, env_name="kb_search_qa",
                                           critic=critic)
  assert chk(True).critic
  with pytest.raises(ValueError, match="'carl' needs a critic.*config.model.critic"):
    chk(False)
