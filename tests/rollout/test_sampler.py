"""Sampler against NumPy references written from the definitions (temperature, top-k, top-p)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.rollout.sampler import SamplerConfig, generate, sample, sampling_logprobs


def np_sampling_probs(logits, temperature=1.0, top_k=0, top_p=1.0):
  """Reference: sort by logit (ties by id), keep top-k, then the smallest prefix with mass >= p."""
  x = np.asarray(logits, np.float64) / temperature
  order = sorted(range(len(x)), key=lambda i: (-x[i], i))
  keep = order[:top_k] if top_k else order
  p = np.exp(x[keep] - x[keep].max())
  p /= p.sum()
  kept, mass = [], 0.0
  for i, pi in zip(keep, p):
    if mass >= top_p and kept:
      break
    kept.append(i)
    mass += pi
  out = np.zeros(len(x))
  z = np.exp(x[kept] - x[kept].max())
  out[kept] = z / z.sum()
  return out


LOGITS = np.array([1.5, -0.3, 0.2, 2.0, 2.0, -1.0, 0.7, 0.0, -2.5, 1.1], np.float32)
CASES = [dict(), dict(temperature=0.5), dict(top_k=3), dict(top_p=0.8),
         dict(temperature=1.7, top_k=6, top_p=0.9), dict(top_p=0.05)]


@pytest.mark.parametrize("kw", CASES)
def test_sampling_logprobs_match_reference(kw):
  ref = np_sampling_probs(LOGITS, **kw)
  got = np.exp(np.asarray(sampling_logprobs(jnp.asarray(LOGITS)[None], SamplerConfig(**kw))))[0]
  np.testing.assert_allclose(got, ref, atol=1e-6)


@pytest.mark.parametrize("kw", CASES)
def test_sample_frequencies_and_logprobs(kw):
  cfg = SamplerConfig(**kw)
  n = 20000
  keys = jax.random.split(jax.random.PRNGKey(0), n)
  tok, lq, lp = jax.jit(lambda k: sample(jnp.broadcast_to(jnp.asarray(LOGITS), (n, 10)), k, cfg))(keys)
  tok = np.asarray(tok)
  ref = np_sampling_probs(LOGITS, **kw)
  freq = np.bincount(tok, minlength=10) / n
  assert np.max(np.abs(freq - ref)) < 0.015  # ~4.5 sigma at p=0.5
  assert np.all(ref[tok] > 0)  # never a token outside top-k / top-p
  np.testing.assert_allclose(np.exp(np.asarray(lq)), ref[tok], rtol=1e-5)
  raw = LOGITS - np.log(np.sum(np.exp(LOGITS.astype(np.float64))))
  np.testing.assert_allclose(np.asarray(lp), raw[tok], atol=1e-6)


def test_greedy():
  tok, lq, lp = sample(jnp.asarray(LOGITS)[None], jax.random.PRNGKey(0)[None], SamplerConfig(greedy=True))
  assert int(tok[0]) == 3  # first of the tied maxima
  assert float(lq[0]) == 0.0


def test_bad_config_names_field():
  for kw, field in [(dict(temperature=0.0), "temperature"), (dict(top_p=0.0), "top_p"),
                    (dict(top_k=-1), "top_k"), (dict(max_tokens=0), "max_tokens")]:
    with pytest.raises(ValueError, match=field):
      SamplerConfig(**kw)


def _markov(v=6, seed=1):
  return np.random.RandomState(seed).randn(v, v).astype(np.float32) * 2


def test_generate_matches_python_loop():
  """Markov 'model' (next logits = table[token]); reference is a Python loop over rows."""
  table = _markov()
  cfg = SamplerConfig(temperature=0.9, max_tokens=5, stop_tokens=(0, 1))
  b = 5
  keys = jax.random.split(jax.random.PRNGKey(4), b)
  active = np.array([True, True, False, True, True])
  start = np.array([2, 3, 4, 5, 2])

  def decode(tok, pos, cache, valid):
    slot = cache["index"]
    cache = dict(index=slot + 1, tok=cache["tok"].at[:, slot].set(tok),
                 valid=cache["valid"].at[:, slot].set(valid), pos=cache["pos"].at[:, slot].set(pos))
    return jnp.asarray(table)[tok], cache

  cache = dict(index=jnp.int32(0), tok=jnp.zeros((b, 5), jnp.int32), valid=jnp.zeros((b, 5), bool),
               pos=jnp.zeros((b, 5), jnp.int32))
  gen, cache = jax.jit(lambda: generate(decode, jnp.asarray(table)[start], cache,
                                        jnp.array([7, 8, 9, 10, 11]), jnp.asarray(active), keys, cfg))()
  for r in range(b):
    toks, lps = [], []
    if active[r]:
      prev = start[r]
      for i in range(cfg.max_tokens):
        u = 1.0 - float(jax.random.uniform(jax.random.fold_in(keys[r], i), (), jnp.float32))
        p = np_sampling_probs(table[prev], temperature=0.9)
        tok = int(np.searchsorted(np.cumsum(p), u * p.sum()))
        toks.append(tok)
        lps.append(np.log(np.exp(table[prev] - table[prev].max()) /
                          np.exp(table[prev] - table[prev].max()).sum())[tok])
        prev = tok
        if tok in cfg.stop_tokens:
          break
    n = len(toks)
    assert int(gen.length[r]) == n
    assert list(np.asarray(gen.tokens[r, :n])) == toks
    assert np.all(np.asarray(gen.tokens[r, n:]) == 0) and not np.any(gen.valid[r, n:])
    np.testing.assert_allclose(np.asarray(gen.logp_raw[r, :n]), lps, atol=1e-5)
    assert bool(gen.stopped[r]) == (n > 0 and toks[-1] in cfg.stop_tokens)
    # every generated token (stop token included) was written to the cache, at positions 7+r..
    steps = int(gen.steps)
    assert list(np.asarray(cache["tok"][r, :n])) == toks
    assert np.array_equal(np.asarray(cache["valid"][r, :steps]), np.arange(steps) < n)
    assert list(np.asarray(cache["pos"][r, :n])) == list(range(7 + r, 7 + r + n))
  assert int(gen.steps) == max(int(x) for x in gen.length)  # stops once every row ended
