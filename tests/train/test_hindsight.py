"""The TRIAL-style privileged teacher pass (train.hindsight): a padded privileged prefix gives
the student's tokens the same log-probs as the unpadded concatenation `priv[:len] + tokens`
run through the model row by row; segments (windowed rows) repeat their episode's text; the
reweighting is `hindsight_gap_advantages` on the loss tokens."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agent_rl.envs.base import Text
from agent_rl.models import ModelConfig, Transformer
from agent_rl.models.logprobs import shifted_logprobs
from agent_rl.objective.minibatch import Minibatch
from agent_rl.losses.distill import hindsight_gap_advantages
from agent_rl.train import hindsight

CFG = ModelConfig(vocab_size=41, hidden=16, num_layers=2, num_heads=2, num_kv_heads=1,
                  head_dim=8, intermediate=32)
RNG = np.random.default_rng(0)


def _reference(graphdef, params, tok, attn, ptok, plen):
  """Per row: the valid privileged tokens, then the row's valid tokens, positions 0..n-1."""
  lm = nnx.merge(graphdef, params)
  out = np.zeros(tok.shape, np.float32)
  for r in range(tok.shape[0]):
    keep = np.nonzero(attn[r])[0]
    seq = np.concatenate([ptok[r, :plen[r]], tok[r, keep]])
    n = len(seq)
    logits, _, _ = lm.apply(jnp.asarray(seq)[None], jnp.arange(n)[None], jnp.ones((1, n), bool))
    lp, _ = shifted_logprobs(logits, jnp.asarray(seq)[None])
    out[r, keep] = np.asarray(lp[0, plen[r]:])
  return out


def test_prefix_equals_unpadded_concatenation():
  graphdef, params = nnx.split(Transformer(CFG, rngs=nnx.Rngs(3)))
  n, s, p = 3, 9, 5
  tok = RNG.integers(1, 41, (n, s)).astype(np.int32)
  attn = np.ones((n, s), bool)
  attn[1, 6:] = False          # right padding
  pos = np.cumsum(attn, 1).astype(np.int32) - 1
  ptok = RNG.integers(1, 41, (n, p)).astype(np.int32)
  plen = np.array([5, 2, 0], np.int32)  # full, partial, none
  got = hindsight.row_logprobs(graphdef, params, jnp.asarray(tok), jnp.asarray(pos),
                               jnp.asarray(attn), Text(jnp.asarray(ptok), jnp.asarray(plen)))
  want = _reference(graphdef, params, tok, attn, ptok, plen)
  # Column 0's token is predicted from the prefix's last slot; with plen < P that slot is
  # a pad, so compare columns >= 1 (column 0 is a prompt token, never a loss token).
  np.testing.assert_allclose(np.asarray(got)[:, 1:], want[:, 1:], atol=2e-5)
  np.testing.assert_allclose(np.asarray(got)[0], want[0], atol=2e-5)  # full prefix: all
  # The text changes the scores (the teacher sees something).
  plain = hindsight.row_logprobs(graphdef, params, jnp.asarray(tok), jnp.asarray(pos),
                                 jnp.asarray(attn), Text(jnp.asarray(ptok), jnp.zeros(n, jnp.int32)))
  assert np.abs(np.asarray(plain)[0, 1:] - np.asarray(got)[0, 1:]).max() > 1e-3


def test_segments_repeat_their_episode_text():
  tok = jnp.arange(12, dtype=jnp.int32).reshape(4, 3)   # 2 episodes x 2 segments
  pos = jnp.tile(jnp.arange(3, dtype=jnp.int32), (4, 1))
  priv = Text(jnp.array([[7, 8], [9, 0]], jnp.int32), jnp.array([2, 1], jnp.int32))
  ft, fp, fa = hindsight.prefixed_rows(tok, pos, jnp.ones((4, 3), bool), priv)
  np.testing.assert_array_equal(ft[:, :2], [[7, 8], [7, 8], [9, 0], [9, 0]])
  np.testing.assert_array_equal(fa[:, :2], [[1, 1], [1, 1], [1, 0], [1, 0]])
  np.testing.assert_array_equal(fp[:, 2:], np.asarray(pos) + np.array([[2], [2], [1], [1]]))


def test_reweight_is_the_gap_formula_on_rows():
  b, l = 4, 6
  f = lambda *s: jnp.asarray(RNG.normal(size=s), jnp.float32)
  mask = jnp.asarray(RNG.random((b, l)) < 0.7, jnp.float32)
  z = jnp.zeros((b, l))
  rows = Minibatch(tokens=z.astype(jnp.int32), position=z.astype(jnp.int32),
                   attention_mask=z > -1, loss_mask=mask, turn_index=z.astype(jnp.int32),
                   old_logprobs=f(b, l), advantages=f(b, l) * mask)
  tlp = f(b, l)
  out, m = hindsight.reweight(rows, tlp, mode="weight", beta=0.5, gap_clip=1.0, normalize=True)
  want = hindsight_gap_advantages(rows.advantages, rows.old_logprobs, tlp, mask, mode="weight",
                                  beta=0.5, gap_clip=1.0, normalize=True)
  np.testing.assert_allclose(out.advantages, want, atol=1e-6)
  gap = np.sum((np.asarray(tlp) - np.asarray(rows.old_logprobs)) * np.asarray(mask)) / np.sum(mask)
  np.testing.assert_allclose(m["hindsight/gap"], gap, rtol=1e-5)
