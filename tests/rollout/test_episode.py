"""Invariants of the compiled episode loop (concatenated and windowed history) on the tiny policy."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.sampler import SamplerConfig, sampling_logprobs

from toy import PIECES, STOP, GuessEnv, tasks, tiny_policy

SAMPLER = SamplerConfig(temperature=0.7, top_k=12, max_tokens=6, stop_tokens=STOP)


@pytest.fixture(scope="module")
def policy():
  return tiny_policy()


_FNS = {}


def _run(policy, **kw):
  """Rollout of 2 tasks x G=3, 4 turns; jitted programs cached per config (compiles dominate)."""
  pol, params = policy
  cfg = EpisodeConfig(**dict(dict(sampler=SAMPLER, max_turns=4, group_size=3), **kw))
  if cfg not in _FNS:
    _FNS[cfg] = make_rollout(pol, GuessEnv(), cfg, PIECES)
  return _FNS[cfg](params, tasks(2), jax.random.PRNGKey(3))


def _rows(batch):
  """The learner's forward rows: [N, L] (concat) or [N*T, Lw] (window)."""
  f = lambda x: x if batch.segment_len == 0 else x.reshape(-1, batch.segment_len)
  return tuple(f(x) for x in (batch.tokens, batch.position, batch.attention_mask, batch.loss_mask,
                              batch.logprobs, batch.sample_logprobs))


def _teacher_forced(policy, batch, cfg=SAMPLER):
  """Reference: forward on the stored tokens, predicted log-probs of each next token."""
  pol, params = policy
  tok, pos, attn, loss, lp, lq = _rows(batch)
  logits, _ = pol.forward(pol.graphdef, params, tok, pos, attn)
  logits = np.asarray(logits, np.float64)[:, :-1]
  tgt = np.asarray(tok)[:, 1:]
  raw = logits - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1,
                               keepdims=True)) - logits.max(-1, keepdims=True)
  raw = np.take_along_axis(raw, tgt[..., None], -1)[..., 0]
  samp = np.take_along_axis(np.asarray(sampling_logprobs(jnp.asarray(logits, jnp.float32), cfg)),
                            tgt[..., None], -1)[..., 0]
  m = np.asarray(loss)[:, 1:] > 0
  return raw, samp, m, np.asarray(lp)[:, 1:], np.asarray(lq)[:, 1:]


@pytest.mark.parametrize("history", ["concatenated", "windowed"])
def test_behaviour_logprobs_equal_training_forward(policy, history):
  kw = {} if history == "concatenated" else dict(history="windowed", window_turns=3)
  batch, _ = _run(policy, **kw)
  raw, samp, m, lp, lq = _teacher_forced(policy, batch)
  assert m.sum() > 10
  np.testing.assert_allclose(lp[m], raw[m], atol=1e-5)
  np.testing.assert_allclose(lq[m], samp[m], atol=1e-5)
  # the two are different distributions (temperature 0.7, top-k 12)
  assert np.max(np.abs(lp[m] - lq[m])) > 1e-2
  assert np.all(lp[~m] == 0)


def test_masks_turn_index_and_turn_fields_consistent(policy):
  batch, metrics = _run(policy)
  tok, ti, lm, attn = map(np.asarray, (batch.tokens, batch.turn_index, batch.loss_mask,
                                       batch.attention_mask))
  valid = np.asarray(batch.valid)
  assert np.array_equal(lm > 0, ti >= 0)
  assert np.all(attn[lm > 0])
  for i in range(tok.shape[0]):
    n = attn[i].sum()
    assert np.all(attn[i, :n]) and not np.any(attn[i, n:])  # packed, no holes
    assert np.all(tok[i, n:] == PIECES.pad_id)
    turns = sorted(set(ti[i][ti[i] >= 0].tolist()))
    assert turns == list(np.nonzero(valid[i])[0])  # every valid turn generated >= 1 token
    # turn blocks are in order and contiguous
    order = ti[i][ti[i] >= 0]
    assert np.all(np.diff(order) >= 0)
    # valid turns are a prefix, done only on the last one
    k = valid[i].sum()
    assert np.all(valid[i, :k]) and not np.any(valid[i, k:])
    assert np.asarray(batch.done)[i, :k - 1].sum() == 0
  assert np.array_equal(np.asarray(batch.position), np.broadcast_to(np.arange(tok.shape[1]), tok.shape))
  assert float(metrics["rollout/gen_tokens"]) == lm.sum()
  # group members share the task's initial state hash, group ids are contiguous
  assert np.array_equal(np.asarray(batch.group_id), np.repeat(np.arange(2), 3))
  h0 = np.asarray(batch.state_hash)[:, 0].reshape(2, 3)
  assert np.all(h0 == h0[:, :1])
  # next_hash of turn t is the state_hash of turn t+1
  nh, sh = np.asarray(batch.next_hash), np.asarray(batch.state_hash)
  both = valid[:, 1:]
  assert np.array_equal(nh[:, :-1][both], sh[:, 1:][both])


def test_window_covering_episode_reproduces_concat_contexts(policy):
  concat, _ = _run(policy, history="concatenated")
  window, _ = _run(policy, history="windowed", window_turns=3)  # 3 past turns of 4: all
  lw = window.segment_len
  n, t = concat.valid.shape
  ct, wt = np.asarray(concat.tokens), np.asarray(window.tokens).reshape(n, t, lw)
  cti = np.asarray(concat.turn_index)
  wa = np.asarray(window.attention_mask).reshape(n, t, lw)
  wlp = np.asarray(window.logprobs).reshape(n, t, lw)
  assert np.array_equal(np.asarray(concat.valid), np.asarray(window.valid))
  checked = 0
  for i in range(n):
    for j in range(t):
      if not concat.valid[i, j]:
        assert not wa[i, j].any()
        continue
      end = np.nonzero(cti[i] == j)[0].max() + 1  # concat prefix through turn j's action
      seg = wt[i, j][wa[i, j]]
      assert np.array_equal(seg, ct[i, :end])
      np.testing.assert_allclose(wlp[i, j][wa[i, j]], np.asarray(concat.logprobs)[i, :end] *
                                 (cti[i, :end] == j), atol=1e-5)
      checked += 1
  assert checked >= 6


def test_deterministic_bit_for_bit(policy):
  a, ma = _run(policy)
  b, mb = _run(policy)
  for x, y in zip(jax.tree.leaves((a, ma)), jax.tree.leaves((b, mb))):
    assert np.array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_deterministic_across_recompiles(policy):
  a, _ = _run(policy)
  pol, params = policy  # a freshly built program gives the same bits too
  cfg = EpisodeConfig(sampler=SAMPLER, max_turns=4, group_size=3)
  c, _ = make_rollout(pol, GuessEnv(), cfg, PIECES)(params, tasks(2), jax.random.PRNGKey(3))
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(c)):
    assert np.array_equal(np.asarray(x), np.asarray(y))


def test_no_retrace_across_iterations(policy):
  pol, params = policy
  cfg = EpisodeConfig(sampler=SAMPLER, max_turns=3, group_size=2)
  fn = jax.jit(chex.assert_max_traces(make_rollout(pol, GuessEnv(), cfg, PIECES, jit=False), n=1))
  outs = []
  for it in range(3):
    params = jax.tree.map(lambda x: x * 1.01, params)  # new params each iteration
    outs.append(fn(params, tasks(2, key=it), jax.random.PRNGKey(it))[0].tokens)
  assert not np.array_equal(np.asarray(outs[0]), np.asarray(outs[1]))


@pytest.mark.slow
def test_concat_budget_truncates_and_counts(policy):
  full, _ = _run(policy)
  small, m = _run(policy, max_context=40)
  attn = np.asarray(small.attention_mask)
  assert attn.shape[1] == 40 and attn.sum(1).max() <= 40
  assert float(m["rollout/context_truncated"]) > 0
  # turns before the truncation are exactly those of the unbudgeted run
  v = np.asarray(small.valid)
  assert np.all(v <= np.asarray(full.valid))
  for i in range(v.shape[0]):
    n = attn[i].sum()
    assert np.array_equal(np.asarray(small.tokens)[i, :n], np.asarray(full.tokens)[i, :n])


@pytest.mark.slow
def test_window_budget_drops_oldest_turns(policy):
  wide, mw = _run(policy, history="windowed", window_turns=3)
  narrow, mn = _run(policy, history="windowed", window_turns=3, window_tokens=34)
  assert float(mw["rollout/window_dropped_turns"]) == 0
  assert float(mn["rollout/window_dropped_turns"]) > 0
  assert float(mn["rollout/window_truncated_samples"]) > 0
  lw = narrow.segment_len
  assert lw == 34
  attn = np.asarray(narrow.attention_mask).reshape(-1, lw)
  tok = np.asarray(narrow.tokens).reshape(-1, lw)
  first = np.asarray(PIECES.first)
  for r in range(tok.shape[0]):
    if attn[r].any():
      assert np.array_equal(tok[r, :len(first)], first)  # the instruction is always kept
  # turn 0 contexts do not depend on the budget
  n, t = wide.valid.shape
  w0 = np.asarray(wide.tokens).reshape(n, t, -1)[:, 0]
  a0 = np.asarray(wide.attention_mask).reshape(n, t, -1)[:, 0]
  n0 = np.asarray(narrow.tokens).reshape(n, t, -1)[:, 0]
  for i in range(n):
    k = a0[i].sum()
    assert np.array_equal(w0[i, :k], n0[i, :k])


def test_bad_config_names_field():
  with pytest.raises(ValueError, match="history"):
    EpisodeConfig(history="stacked")
  with pytest.raises(ValueError, match="concatenated"):   # one vocabulary: the config's
    EpisodeConfig(history="concat")
  with pytest.raises(ValueError, match="max_context"):
    pol, params = tiny_policy()
    make_rollout(pol, GuessEnv(), EpisodeConfig(sampler=SAMPLER, max_context=5), PIECES)(
        params, tasks(1), jax.random.PRNGKey(0))
