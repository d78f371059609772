"""Value/reward heads and log-prob helpers against plain NumPy references."""
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
