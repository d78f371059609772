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


def test_bfloat16_cache_paths_run_and_track_float32():
  """bf16 compute through prefill (a second block appended to the cache) and decode.

  Regression: XLA:CPU raised "Unsupported element type for DotThunk::Execute: BF16 x BF16 =
  F32" on the cache's score product in a bf16 rollout (see `attention._scores`).
  """
  import dataclasses
  from flax import nnx
  from agent_rl.models import ModelConfig, Transformer, decode_step, init_cache, prefill
  cfg = ModelConfig(vocab_size=97, hidden=32, num_layers=2, num_heads=4, num_kv_heads=2,
                    head_dim=8, intermediate=64)
  out = {}
  for dt in ("float32", "bfloat16"):
    mcfg = dataclasses.replace(cfg, dtype=dt)
    graphdef, state = nnx.split(Transformer(mcfg, rngs=nnx.Rngs(0)))
    b, l = 3, 5
    tok = jnp.arange(b * l, dtype=jnp.int32).reshape(b, l) % 97
    pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
    valid = jnp.ones((b, l), bool)
    cache = init_cache(mcfg, b, 3 * l, mcfg.compute_dtype)
    _, _, cache = jax.jit(prefill)(graphdef, state, tok, pos, valid, cache)
    logits, _, cache = jax.jit(prefill)(graphdef, state, tok, pos + l, valid, cache)
    step, _, _ = jax.jit(decode_step)(graphdef, state, tok[:, 0], pos[:, 0] + 2 * l, cache)
    out[dt] = (np.asarray(logits, np.float32), np.asarray(step, np.float32))
  for a, b_ in zip(out["float32"], out["bfloat16"]):
    assert np.isfinite(b_).all()
    np.testing.assert_allclose(b_, a, atol=0.1)
