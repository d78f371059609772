"""The one sampler: inverse-CDF draws follow softmax(logits/T); `generate` == a no-cache
reference loop and == prefill + the rollout's own decode loop (same tokens)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.models import SamplerConfig, forward, generate, sample, sampling_logprobs


def sample_inverse_cdf(key, logits, temperature=1.0):
  """(tokens [B], log-probs [B] under softmax(logits / T)) from the one sampler; T = 0 is
  greedy. Jitted once per shape: eager op-by-op dispatch compiles every op (slow on CPU)."""
  scfg = SamplerConfig(greedy=True) if temperature == 0 else SamplerConfig(temperature=temperature)
  tok, lq, _ = jax.jit(lambda k, x: sample(x, k, scfg))(jax.random.split(key, logits.shape[0]),
                                                        logits)
  return tok, lq


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


def test_inverse_cdf_large_vocab_and_greedy():
  v = 1000  # not a multiple of the block size
  logits = jnp.full((3000, v), -jnp.inf).at[:, 999].set(0.0).at[:, 5].set(0.0).at[:, 64].set(
      jnp.log(2.0))
  toks, _ = sample_inverse_cdf(jax.random.key(1), logits)
  freq = np.bincount(np.asarray(toks), minlength=v) / 3000
  assert set(np.nonzero(freq)[0]) == {5, 64, 999}
  np.testing.assert_allclose(freq[[5, 64, 999]], [0.25, 0.5, 0.25], atol=0.04)
  greedy, lp = sample_inverse_cdf(jax.random.key(1), logits[:2], temperature=0)
  assert list(np.asarray(greedy)) == [64, 64] and float(jnp.abs(lp).max()) == 0


def _reference_logits(graphdef, state, prompt, pvalid, toks, valid):
  """Full no-cache forward over each row's valid prompt + its generated tokens, right-aligned
  at one fixed width (one compile). Returns [B, P + A, V] float64 and the prompt lengths."""
  b, p = prompt.shape
  a = toks.shape[1]
  seqs = [list(np.asarray(prompt[row])[pvalid[row]]) + list(np.asarray(toks[row])[valid[row]])
          for row in range(b)]
  width = p + a
  x = np.zeros((b, width), np.int32)
  for row, seq in enumerate(seqs):
    x[row, :len(seq)] = seq
  logits, _ = forward(graphdef, state, jnp.asarray(x),
                      jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (b, width)),
                      jnp.asarray(np.arange(width)[None] < np.array([len(q) for q in seqs])[:, None]))
  return np.asarray(logits, np.float64), pvalid.sum(1)


def _prompt(cfg, padding, b=3, p=6):
  prompt = jax.random.randint(jax.random.key(5), (b, p), 0, cfg.vocab_size)
  lengths = np.array([6, 3, 4])
  ar = np.arange(p)[None]
  pvalid = ar < lengths[:, None] if padding == "right" else ar >= (p - lengths)[:, None]
  return prompt, pvalid


@pytest.mark.parametrize("padding", ["right", "left"])
def test_generate_matches_full_forward_reference(small_model, padding):
  """Sampled tokens' log-probs equal those of a full no-cache forward over prompt+output;
  greedy decoding equals the argmax loop of full forwards."""
  cfg, graphdef, state = small_model
  b, n = 3, 4
  prompt, pvalid = _prompt(cfg, padding)
  for temperature in (0.7, 0):
    scfg = SamplerConfig(greedy=True, max_tokens=n) if temperature == 0 else SamplerConfig(
        temperature=temperature, max_tokens=n)
    gen = generate(graphdef, state, prompt, jnp.asarray(pvalid), jax.random.key(7), scfg)
    toks, lps = gen.tokens, gen.logp_sample
    assert toks.shape == (b, n) and lps.shape == (b, n)
    assert bool(gen.valid.all()) and list(np.asarray(gen.length)) == [n] * b
    # Step t reads the logits before token t.
    ref_logits, lengths = _reference_logits(graphdef, state, prompt, pvalid, toks,
                                            np.ones((b, n), bool))
    for row in range(b):
      for t in range(n):
        last = ref_logits[row, lengths[row] + t - 1]
        tok = int(toks[row, t])
        raw = last[tok] - last.max() - np.log(np.exp(last - last.max()).sum())
        np.testing.assert_allclose(float(gen.logp_raw[row, t]), raw, atol=1e-4)
        if temperature == 0:
          assert tok == int(np.argmax(last))
        else:
          z = last / temperature
          ref = z[tok] - z.max() - np.log(np.exp(z - z.max()).sum())
          np.testing.assert_allclose(float(lps[row, t]), ref, atol=1e-4)


def test_generate_top_k_top_p_and_stop_tokens(small_model):
  """Top-k/top-p draws stay inside the reference's support and carry its log-probs; a row
  ends on its first stop token (kept), padding and invalid slots after it."""
  cfg, graphdef, state = small_model
  b, n = 3, 8
  prompt, pvalid = _prompt(cfg, "right")
  scfg = SamplerConfig(temperature=1.3, top_k=20, top_p=0.9, max_tokens=n,
                       stop_tokens=tuple(range(0, cfg.vocab_size, 4)))
  gen = generate(graphdef, state, prompt, jnp.asarray(pvalid), jax.random.key(11), scfg)
  toks, valid = np.asarray(gen.tokens), np.asarray(gen.valid)
  length = np.asarray(gen.length)
  assert np.array_equal(valid, np.arange(n)[None] < length[:, None])
  assert np.all(toks[~valid] == 0)
  for row in range(b):
    stops = [t for t in range(length[row]) if toks[row, t] in scfg.stop_tokens]
    assert stops == ([length[row] - 1] if gen.stopped[row] else [])
  assert bool(gen.stopped.any()) and int(gen.steps) == length.max()
  ref_logits, lengths = _reference_logits(graphdef, state, prompt, pvalid, gen.tokens, valid)
  ref_q = np.asarray(sampling_logprobs(jnp.asarray(ref_logits, jnp.float32), scfg), np.float64)
  for row in range(b):
    for t in range(length[row]):
      q = ref_q[row, lengths[row] + t - 1]
      assert np.isfinite(q[toks[row, t]])  # inside top-k / top-p
      np.testing.assert_allclose(float(gen.logp_sample[row, t]), q[toks[row, t]], atol=1e-4)


def test_generate_is_prefill_plus_the_rollout_decode_loop(small_model):
  """`generate` (what benchmarks/generate.py times) runs the very loop the rollout calls:
  the rollout's `generate` is `models.sampler.decode_loop`, and driving it by hand after a
  rows= prefill reproduces `generate`'s tokens exactly."""
  from agent_rl.models import decode_step, init_cache, prefill, sampler
  from agent_rl.rollout import sampler as rollout_sampler
  assert rollout_sampler.generate is sampler.decode_loop
  assert rollout_sampler.sample is sampler.sample and rollout_sampler.SamplerConfig is SamplerConfig
  cfg, graphdef, state = small_model
  prompt, pvalid = _prompt(cfg, "left")
  scfg = SamplerConfig(temperature=0.9, top_k=30, max_tokens=5, stop_tokens=(3, 7))
  key = jax.random.key(2)
  gen = generate(graphdef, state, prompt, jnp.asarray(pvalid), key, scfg)

  @jax.jit
  def by_hand(prompt, valid):
    b, p = prompt.shape
    pos = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)
    last = jnp.max(jnp.where(valid, jnp.arange(p), 0), axis=1)
    logits, _, cache = prefill(graphdef, state, prompt, pos, valid, init_cache(cfg, b, p + 5, cfg.compute_dtype),
                               last)
    decode = lambda t, q, c, v: (lambda o: (o[0], o[2]))(decode_step(graphdef, state, t, q, c, v))
    return rollout_sampler.generate(decode, logits, cache, jnp.sum(valid, axis=1), jnp.ones(b, bool),
                                    jax.random.split(key, b), scfg)[0]
  ref = by_hand(prompt, jnp.asarray(pvalid))
  for f in ("tokens", "valid", "length", "stopped", "steps"):
    np.testing.assert_array_equal(np.asarray(getattr(gen, f)), np.asarray(getattr(ref, f)), err_msg=f)
  # Two jitted programs may fuse the log-softmax differently: log-probs agree to an ulp or so.
  for f in ("logp_raw", "logp_sample"):
    np.testing.assert_allclose(np.asarray(getattr(gen, f)), np.asarray(getattr(ref, f)), atol=2e-6,
                               rtol=0, err_msg=f)


def test_generate_bad_input_names_it(small_model):
  cfg, graphdef, state = small_model
  prompt, pvalid = _prompt(cfg, "right")
  with pytest.raises(TypeError, match="cfg must be a SamplerConfig"):
    generate(graphdef, state, prompt, jnp.asarray(pvalid), jax.random.key(0), 4)
  with pytest.raises(ValueError, match="prompt_valid"):
    generate(graphdef, state, prompt, jnp.asarray(pvalid[:, :3]), jax.random.key(0),
             SamplerConfig(max_tokens=2))


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
