"""Value/reward heads and log-prob helpers against plain NumPy references.

The shifted, chunked hidden-state path (`shifted_token_stats`) is pinned to a float64 NumPy
loop for values and to autodiff through plainly materialized `jax.nn.log_softmax` logits for
gradients (wrt hidden and head weight), in float32, under bf16 mixed precision, with tied
embeddings, lengths not divisible by the chunk, and on a (data, tensor) mesh of fake devices.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import RewardHead, ValueHead
from agent_rl.models import logprobs_from_hidden as _lp_hidden
from agent_rl.models import token_entropy as _entropy
from agent_rl.models import token_logprobs as _logprobs

# Jitted: eager op-by-op dispatch compiles every op and is slow on the shared CPU.
token_logprobs, token_entropy = jax.jit(_logprobs), jax.jit(_entropy)
logprobs_from_hidden = jax.jit(_lp_hidden, static_argnames=("chunk", "with_entropy",
                                                            "temperature"))


def np_log_softmax(z):
  z = np.asarray(z, np.float64)
  out = np.empty_like(z)
  for idx in np.ndindex(z.shape[:-1]):
    row = z[idx]
    m = row.max()
    out[idx] = row - m - np.log(np.sum(np.exp(row - m)))
  return out


def np_entropy(z):
  lp = np_log_softmax(z)
  return -np.sum(np.exp(lp) * lp, axis=-1)


RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(2, 5, 11)).astype(np.float32) * 3
TARGETS = RNG.integers(0, 11, (2, 5))


def test_token_logprobs_and_entropy_vs_numpy():
  lp = np_log_softmax(LOGITS)
  want = np.take_along_axis(lp, TARGETS[..., None], -1)[..., 0]
  np.testing.assert_allclose(token_logprobs(jnp.asarray(LOGITS), jnp.asarray(TARGETS)), want,
                             atol=1e-5)
  np.testing.assert_allclose(token_entropy(jnp.asarray(LOGITS)), np_entropy(LOGITS), atol=1e-5)
  # Extreme logits stay finite (logsumexp, not log(softmax)).
  big = jnp.array([[1e4, 0.0, -1e4]])
  assert np.isfinite(np.asarray(token_logprobs(big, jnp.array([2])))).all()
  assert np.isfinite(np.asarray(token_entropy(big))).all()
  with pytest.raises(ValueError, match="targets"):
    _logprobs(jnp.asarray(LOGITS), jnp.asarray(TARGETS[:, :3]))


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_logprobs_from_hidden_chunked(chunk):
  hidden = RNG.normal(size=(2, 7, 6)).astype(np.float32)
  w = RNG.normal(size=(6, 13)).astype(np.float32)
  targets = RNG.integers(0, 13, (2, 7))
  z = np.einsum("ble,ev->blv", hidden.astype(np.float64), w) / 0.7
  want_lp = np.take_along_axis(np_log_softmax(z), targets[..., None], -1)[..., 0]
  lp, ent = logprobs_from_hidden(jnp.asarray(hidden), jnp.asarray(w), jnp.asarray(targets),
                                 chunk=chunk, with_entropy=True, temperature=0.7)
  np.testing.assert_allclose(lp, want_lp, atol=1e-4)
  np.testing.assert_allclose(ent, np_entropy(z), atol=1e-4)
  only = logprobs_from_hidden(jnp.asarray(hidden), jnp.asarray(w), jnp.asarray(targets),
                              chunk=chunk, temperature=0.7)
  np.testing.assert_allclose(only, lp, atol=1e-6)


def test_logprobs_from_hidden_gradient_matches_direct():
  hidden = jnp.asarray(RNG.normal(size=(2, 9, 4)), jnp.float32)
  w = jnp.asarray(RNG.normal(size=(4, 10)), jnp.float32)
  targets = jnp.asarray(RNG.integers(0, 10, (2, 9)))

  def chunked(h, w):
    return jnp.sum(_lp_hidden(h, w, targets, chunk=4))

  def direct(h, w):
    return jnp.sum(_logprobs(h @ w, targets))

  grads = jax.jit(lambda h, w: (jax.grad(chunked, (0, 1))(h, w), jax.grad(direct, (0, 1))(h, w)))
  for a, b in zip(*grads(hidden, w)):
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_value_head_vs_numpy():
  head = ValueHead(6, rngs=nnx.Rngs(0))
  _, state = nnx.split(head)
  assert tuple(state["kernel"].get_metadata()["out_sharding"]) == ("embed", None)
  hidden = RNG.normal(size=(2, 5, 6)).astype(np.float32)
  w, b = np.asarray(head.kernel[...]), np.asarray(head.bias[...])
  want = np.array([[hidden[i, t] @ w[:, 0] + b[0] for t in range(5)] for i in range(2)])
  np.testing.assert_allclose(head(jnp.asarray(hidden)), want, atol=1e-5)


def test_reward_head_reads_last_valid_token():
  head = RewardHead(6, rngs=nnx.Rngs(1))
  hidden = RNG.normal(size=(3, 5, 6)).astype(np.float32)
  valid = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]], bool)
  w, b = np.asarray(head.kernel[...])[:, 0], float(head.bias[...][0])
  want = [hidden[0, 2] @ w + b, hidden[1, 4] @ w + b, 0.0]
  np.testing.assert_allclose(head(jnp.asarray(hidden), jnp.asarray(valid)), want, atol=1e-5)
  with pytest.raises(ValueError, match="valid"):
    head(jnp.asarray(hidden), jnp.asarray(valid[:, :3]))


# --- shifted_token_stats: the learner's one log-prob implementation ---------------------------

from agent_rl.models.logprobs import shifted_logprobs, shifted_token_stats  # noqa: E402

B, L, E, V = 2, 7, 6, 13


def _inputs(seed=3):
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.normal(size=(B, L, E)), jnp.float32),
          jnp.asarray(rng.normal(size=(E, V)), jnp.float32),
          jnp.asarray(rng.integers(0, V, (B, L)), jnp.int32),
          jnp.asarray(rng.normal(size=(B, L)), jnp.float32),
          jnp.asarray(rng.normal(size=(B, L)), jnp.float32))


def np_shifted(hidden, w, tokens):
  """float64 loop: token t scored by the logits at t-1, position 0 gets 0."""
  h, w, tok = np.asarray(hidden, np.float64), np.asarray(w, np.float64), np.asarray(tokens)
  lp, ent = np.zeros(tok.shape), np.zeros(tok.shape)
  for b, t in np.ndindex(tok.shape):
    if t == 0:
      continue
    ls = np_log_softmax(h[b, t - 1] @ w)
    lp[b, t] = ls[tok[b, t]]
    ent[b, t] = -np.sum(np.exp(ls) * ls)
  return lp, ent


def plain_objective(hidden, w, tokens, g_lp, g_ent):
  """Materialized reference: plain logits, jax.nn.log_softmax, autodiff."""
  ls = jax.nn.log_softmax(jnp.einsum("ble,ev->blv", hidden[:, :-1].astype(jnp.float32),
                                     w.astype(jnp.float32)), axis=-1)
  lp = jnp.take_along_axis(ls, tokens[:, 1:, None], -1)[..., 0]
  ent = -jnp.sum(jnp.exp(ls) * ls, -1)
  return jnp.sum(lp * g_lp[:, 1:]) + jnp.sum(ent * g_ent[:, 1:])


def chunked_objective(hidden, w, tokens, g_lp, g_ent, chunk):
  lp, ent = shifted_token_stats(hidden, w, tokens, chunk=chunk)
  return jnp.sum(lp * g_lp) + jnp.sum(ent * g_ent)


_grads = jax.jit(jax.grad(chunked_objective, (0, 1)), static_argnums=5)
_plain_grads = jax.jit(jax.grad(plain_objective, (0, 1)))
_stats = jax.jit(shifted_token_stats, static_argnames=("chunk", "with_entropy"))


# chunk counts tokens: B = 2 rows x (chunk // 2) positions; L-1 = 6 positions, so chunk 8
# (4 positions) and 10 (5) leave a ragged last chunk, 64 is one chunk.
@pytest.mark.parametrize("chunk", [0, 1, 4, 6, 8, 10, 64])
def test_shifted_token_stats_values_and_grads(chunk):
  hidden, w, tokens, g_lp, g_ent = _inputs()
  lp, ent = _stats(hidden, w, tokens, chunk=chunk)
  want_lp, want_ent = np_shifted(hidden, w, tokens)
  assert lp.dtype == ent.dtype == jnp.float32 and lp.shape == ent.shape == (B, L)
  np.testing.assert_allclose(lp, want_lp, atol=1e-5)
  np.testing.assert_allclose(ent, want_ent, atol=1e-5)
  for got, want in zip(_grads(hidden, w, tokens, g_lp, g_ent, chunk),
                       _plain_grads(hidden, w, tokens, g_lp, g_ent)):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
  lp_only, ent0 = _stats(hidden, w, tokens, chunk=chunk, with_entropy=False)
  np.testing.assert_allclose(lp_only, lp, atol=1e-6)
  assert not np.any(np.asarray(ent0))


def test_shifted_token_stats_tied_embedding_gradient():
  hidden, w, tokens, g_lp, g_ent = _inputs(4)
  emb = w.T  # [V, E] as the embedding table stores it; the head is its transpose
  got = jax.jit(jax.grad(lambda h, e: chunked_objective(h, e.T, tokens, g_lp, g_ent, 8),
                         (0, 1)))(hidden, emb)
  want = jax.jit(jax.grad(lambda h, e: plain_objective(h, e.T, tokens, g_lp, g_ent),
                          (0, 1)))(hidden, emb)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_shifted_token_stats_bf16_mixed_precision():
  """bf16 hidden over an f32 master weight: the chunked path equals the materialized one
  through `dense` (same rounding points), the weight gradient stays f32."""
  hidden, w, tokens, g_lp, g_ent = _inputs(5)
  hb = hidden.astype(jnp.bfloat16)
  lp, ent = _stats(hb, w, tokens, chunk=8)
  lp0, ent0 = _stats(hb, w, tokens, chunk=0)
  np.testing.assert_allclose(lp, lp0, atol=1e-5)
  np.testing.assert_allclose(ent, ent0, atol=1e-5)
  # Against float64 on the bf16-rounded operands (the GEMM accumulates in f32).
  want_lp, _ = np_shifted(hb.astype(jnp.float32), w.astype(jnp.bfloat16).astype(jnp.float32),
                          tokens)
  np.testing.assert_allclose(lp, want_lp, atol=1e-4)
  dh, dw = _grads(hb, w, tokens, g_lp, g_ent, 8)
  dh0, dw0 = _grads(hb, w, tokens, g_lp, g_ent, 0)
  assert dh.dtype == jnp.bfloat16 and dw.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(dh, np.float32), np.asarray(dh0, np.float32),
                             atol=2e-2, rtol=2e-2)
  np.testing.assert_allclose(dw, dw0, atol=2e-2, rtol=2e-2)


def test_shifted_token_stats_matches_logits_convention():
  hidden, w, tokens, _, _ = _inputs(6)
  lp, ent = _stats(hidden, w, tokens, chunk=4)
  lp2, ent2 = jax.jit(shifted_logprobs)(jnp.einsum("ble,ev->blv", hidden, w), tokens)
  np.testing.assert_allclose(lp, lp2, atol=1e-5)
  np.testing.assert_allclose(ent, ent2, atol=1e-5)


def test_shifted_token_stats_edge_cases_and_errors():
  hidden, w, tokens, _, _ = _inputs()
  lp, ent = shifted_token_stats(hidden[:, :1], w, tokens[:, :1], chunk=4)
  assert lp.shape == (B, 1) and not np.any(np.asarray(lp)) and not np.any(np.asarray(ent))
  with pytest.raises(ValueError, match="chunk"):
    shifted_token_stats(hidden, w, tokens, chunk=-1)
  with pytest.raises(ValueError, match="chunk"):
    shifted_token_stats(hidden, w, tokens, chunk=2.5)
  with pytest.raises(ValueError, match="head_weight"):
    shifted_token_stats(hidden, w.T, tokens, chunk=4)
  with pytest.raises(ValueError, match="tokens"):
    shifted_token_stats(hidden, w, tokens[:, :3], chunk=4)


def test_chunked_gradient_peak_memory_does_not_scale_with_vocab_times_length():
  """Compiled temp memory of value-and-grad: chunked << materialized [B, L, V] f32."""
  b, l, e, v = 2, 128, 16, 4096
  args = (jax.ShapeDtypeStruct((b, l, e), jnp.float32), jax.ShapeDtypeStruct((e, v), jnp.float32),
          jax.ShapeDtypeStruct((b, l), jnp.int32), jax.ShapeDtypeStruct((b, l), jnp.float32),
          jax.ShapeDtypeStruct((b, l), jnp.float32))

  def temp(chunk):
    f = jax.jit(jax.grad(chunked_objective, (0, 1)), static_argnums=5)
    return f.lower(*args, chunk).compile().memory_analysis().temp_size_in_bytes

  logits_bytes = b * (l - 1) * v * 4
  chunked, full = temp(16), temp(0)  # 16 tokens = 8 positions x 2 rows
  assert full >= logits_bytes  # the baseline really materializes the logits
  assert chunked < logits_bytes / 4, (chunked, full)


def test_shifted_token_stats_sharded_matches_unsharded():
  from agent_rl.parallel import DEFAULT_RULES, make_mesh, mesh_rules
  if len(jax.devices()) < 4:
    pytest.skip("needs 4 (fake) devices")
  hidden, w, tokens, g_lp, g_ent = _inputs(7)
  want = _grads(hidden, w, tokens, g_lp, g_ent, 0)  # materialized, unsharded
  want_stats = _stats(hidden, w, tokens, chunk=0)
  mesh = make_mesh((2, 1, 2), devices=jax.devices()[:4])  # data x fsdp x tensor (vocab)
  with mesh_rules(mesh, DEFAULT_RULES):
    f = jax.jit(lambda *a: (shifted_token_stats(a[0], a[1], a[2], chunk=8),
                            jax.grad(chunked_objective, (0, 1))(*a, 8)))
    stats, got = f(hidden, w, tokens, g_lp, g_ent)
  for a, b in zip(jax.tree.leaves((stats, got)), jax.tree.leaves((want_stats, want))):
    np.testing.assert_allclose(a, b, atol=1e-5)
