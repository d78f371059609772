"""Sampler: inverse-CDF draws follow softmax(logits/T); generate == a no-cache reference loop."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.models import forward, generate
from agent_rl.models import sample_inverse_cdf as _sample

# Jitted once per shape: eager op-by-op dispatch compiles every op and is slow on CPU.
sample_inverse_cdf = jax.jit(_sample, static_argnums=2)


def test_inverse_cdf_frequencies_match_softmax():
  logits = jnp.array([[2.0, 0.5, -1.0, -jnp.inf, 1.0, 0.0, -3.0, 1.5, 0.2, -0.4]] * 4000)
  temperature = 0.8
  toks, lps = sample_inverse_cdf(jax.random.key(0), logits, temperature)
  z = np.asarray(logits[0], np.float64) / temperature
  p = np.exp(z - z.max())
  p /= p.sum()
  freq = np.bincount(np.asarray(toks), minlength=10) / toks.shape[0]
  assert freq[3] == 0  # zero-probability token never drawn
  # 4000 draws: binomial std <= 0.008; allow ~4 sigma.
  np.testing.assert_allclose(freq, p, atol=0.03)
  np.testing.assert_allclose(np.asarray(lps), np.log(p[np.asarray(toks)]), atol=1e-5)


def test_inverse_cdf_large_vocab_blocks_and_greedy():
  v = 1000  # not a multiple of the block size
  logits = jnp.full((3000, v), -jnp.inf).at[:, 999].set(0.0).at[:, 5].set(0.0).at[:, 64].set(
      jnp.log(2.0))
  toks, _ = sample_inverse_cdf(jax.random.key(1), logits)
  freq = np.bincount(np.asarray(toks), minlength=v) / 3000
  assert set(np.nonzero(freq)[0]) == {5, 64, 999}
  np.testing.assert_allclose(freq[[5, 64, 999]], [0.25, 0.5, 0.25], atol=0.04)
  greedy, lp = sample_inverse_cdf(jax.random.key(1), logits[:2], temperature=0)
  assert list(np.asarray(greedy)) == [64, 64] and float(jnp.abs(lp).max()) == 0


@pytest.mark.parametrize("padding", ["right", "left"])
def test_generate_matches_full_forward_reference(small_model, padding):
  """Sampled tokens' log-probs equal those of a full no-cache forward over prompt+output;
  greedy decoding equals the argmax loop of full forwards."""
  cfg, graphdef, state = small_model
  b, p, n = 3, 6, 4
  prompt = jax.random.randint(jax.random.key(5), (b, p), 0, cfg.vocab_size)
  lengths = np.array([6, 3, 4])
  ar = np.arange(p)[None]
  pvalid = ar < lengths[:, None] if padding == "right" else ar >= (p - lengths)[:, None]
  for temperature in (0.7, 0):
    toks, lps = generate(graphdef, state, prompt, jnp.asarray(pvalid), jax.random.key(7), n,
                         temperature)
    assert toks.shape == (b, n) and lps.shape == (b, n)
    # Reference: each row's valid prompt + generated tokens, right-aligned at fixed length
    # (one compile), scored by a full forward; step t reads the logits before token t.
    seqs = [list(np.asarray(prompt[row])[pvalid[row]]) + list(np.asarray(toks[row]))
            for row in range(b)]
    width = p + n
    x = np.zeros((b, width), np.int32)
    for row, seq in enumerate(seqs):
      x[row, :len(seq)] = seq
    ref_logits, _ = forward(graphdef, state, jnp.asarray(x),
                            jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (b, width)),
                            jnp.asarray(np.arange(width)[None] < np.array([len(q) for q in seqs])[:, None]))
    for row in range(b):
      for t in range(n):
        last = np.asarray(ref_logits[row, lengths[row] + t - 1], np.float64)
        tok = int(toks[row, t])
        if temperature == 0:
          assert tok == int(np.argmax(last))
        else:
          z = last / temperature
          ref = z[tok] - z.max() - np.log(np.exp(z - z.max()).sum())
          np.testing.assert_allclose(float(lps[row, t]), ref, atol=1e-4)
