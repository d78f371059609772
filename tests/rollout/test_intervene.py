"""Teacher interventions (agent_rl/rollout/intervene.py): with an unreachable threshold the
rollout is the plain one; otherwise every stored turn is checked against forwards of both
models over the stored window samples (the learner's path, not the rollout's): the student's
turns carry the student's log-probs and a gap at most the threshold, the teacher's turns the
teacher's log-probs and no loss; at turn 0 the decision equals the rule applied to the plain
rollout's action (same context, same keys)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.intervene import InterveneConfig
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig

from toy import PIECES, STOP, VOCAB, GuessEnv, tasks, tiny_policy

SAMPLER = SamplerConfig(temperature=1.0, max_tokens=6, stop_tokens=STOP)


def bigger_teacher(seed=5):
  """Another architecture (2 layers, wider): its own cache shapes."""
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  cfg = get_preset("tiny", vocab_size=VOCAB, hidden=48, num_layers=2, num_heads=2,
                   num_kv_heads=1, head_dim=24, intermediate=96)
  graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(seed)))
  return Policy.from_model(cfg, graphdef), jax.tree.map(lambda x: x * 2.0 if x.ndim == 2 else x,
                                                        params)


def per_turn_logprobs(pol, params, batch, t_max):
  """`[N, T*Lw]` log-prob of each stored token under `pol`, sample by sample."""
  n, lw = batch.tokens.shape[0], batch.segment_len
  seg = lambda x: jnp.asarray(x).reshape(n * t_max, lw)
  logits, _ = pol.forward(pol.graphdef, params, seg(batch.tokens), seg(batch.position),
                          seg(batch.attention_mask))
  lp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), -1)
  tok = seg(batch.tokens)
  nxt = jnp.take_along_axis(lp, tok[:, 1:, None], -1)[..., 0]
  out = jnp.concatenate([jnp.zeros((n * t_max, 1)), nxt], axis=1)  # token s's log-prob at s
  return np.asarray(out.reshape(n, t_max * lw))


def turn_gaps(s_lp, t_lp, batch, t_max):
  """`[N, T]` mean per-token student - teacher log-prob of each stored action."""
  ti, valid = np.asarray(batch.turn_index), np.asarray(batch.attention_mask)
  out = np.zeros((ti.shape[0], t_max))
  for t in range(t_max):
    m = (ti == t) & valid
    out[:, t] = np.where(m, s_lp - t_lp, 0).sum(1) / np.maximum(m.sum(1), 1)
  return out


@pytest.fixture(scope="module")
def setup():
  pol, params = tiny_policy()
  teacher, tparams = bigger_teacher()
  base = EpisodeConfig(sampler=SAMPLER, max_turns=3, group_size=2, history="windowed",
                       window_turns=1)
  return pol, params, teacher, tparams, base, tasks(4, key=2), jax.random.PRNGKey(11)


def test_an_unreachable_threshold_is_the_plain_rollout(setup):
  pol, params, teacher, tparams, base, tks, key = setup
  cfg = EpisodeConfig(**{**base.__dict__, "intervene": InterveneConfig(threshold=1e9)})
  got, m = make_rollout(pol, GuessEnv(), cfg, PIECES, teacher=teacher)(
      params, tks, key, teacher_params=tparams)
  want, _ = make_rollout(pol, GuessEnv(), base, PIECES)(params, tks, key)
  for f in ("tokens", "loss_mask", "reward", "valid"):
    np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(want, f)), f)
  assert float(m["rollout/teacher_turns"]) == 0


def test_turns_are_the_student_or_the_teacher_by_the_gap(setup):
  pol, params, teacher, tparams, base, tks, key = setup
  plain, _ = make_rollout(pol, GuessEnv(), base, PIECES)(params, tks, key)
  t_max = base.max_turns
  p_gap = turn_gaps(per_turn_logprobs(pol, params, plain, t_max),
                    per_turn_logprobs(teacher, tparams, plain, t_max), plain, t_max)
  valid0 = np.asarray(plain.valid)[:, 0]
  thr = float(np.median(p_gap[valid0, 0]))  # about half the rows are taken over at turn 0
  cfg = EpisodeConfig(**{**base.__dict__, "intervene": InterveneConfig(threshold=thr)})
  got, m = make_rollout(pol, GuessEnv(), cfg, PIECES, teacher=teacher)(
      params, tks, key, teacher_params=tparams)
  s_lp = per_turn_logprobs(pol, params, got, t_max)
  t_lp = per_turn_logprobs(teacher, tparams, got, t_max)
  ti, lm = np.asarray(got.turn_index), np.asarray(got.loss_mask)
  stored = np.asarray(got.logprobs)
  act = (ti >= 0) & np.asarray(got.attention_mask)
  # which turns the teacher took: its tokens carry its log-probs, the student's tokens the
  # student's; the loss mask is exactly the student's turns
  taken = np.zeros(np.asarray(got.valid).shape, bool)
  for i, t in zip(*np.nonzero(np.asarray(got.valid))):
    m_t = act[i] & (ti[i] == t)
    by_teacher = np.allclose(stored[i][m_t], t_lp[i][m_t], atol=1e-4)
    by_student = np.allclose(stored[i][m_t], s_lp[i][m_t], atol=1e-4)
    assert by_teacher != by_student, (i, t)
    taken[i, t] = by_teacher
    assert np.all(lm[i][m_t] == (0.0 if by_teacher else 1.0)), (i, t)
  assert taken.any() and (~taken & np.asarray(got.valid)).any()
  assert float(m["rollout/teacher_turns"]) == taken.sum()
  g = turn_gaps(s_lp, t_lp, got, t_max)
  student = ~taken & np.asarray(got.valid)
  assert np.all(g[student] <= thr + 1e-4)
  # turn 0: the rollout's decision is the rule applied to the plain rollout's action
  close = np.abs(p_gap[:, 0] - thr) < 1e-4  # ties at the threshold are rounding's call
  np.testing.assert_array_equal(taken[valid0 & ~close, 0], (p_gap[:, 0] > thr)[valid0 & ~close])


def test_intervention_settings_are_checked():
  pol, _ = tiny_policy()
  with pytest.raises(ValueError, match="threshold must be > 0"):
    InterveneConfig(threshold=0.0)
  with pytest.raises(ValueError, match="history='windowed'"):
    EpisodeConfig(history="concatenated", intervene=InterveneConfig())
  with pytest.raises(ValueError, match="go together"):
    make_rollout(pol, GuessEnv(), EpisodeConfig(history="windowed", intervene=InterveneConfig()),
                 PIECES)(None, tasks(1), jax.random.PRNGKey(0))
