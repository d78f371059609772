"""blocked_core (key blocks, online softmax, recomputing backward) vs NumPy, plain autodiff and
the dense core; the model with `attention_block` vs without; the memory it saves."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.models import ModelConfig, forward
from agent_rl.models.attention import MASK_BIAS, BlockMask, attention_core
from agent_rl.models.blocked_attention import blocked_core, key_blocks

from conftest import _SMALL, init_model

B, K, R, G, S, D = 2, 2, 5, 3, 11, 4


def _inputs(seed=0, dtype=jnp.float32, masked_row=False, window=None):
  """q, k, v, the rows' BlockMask (queries at the last R of S slots, causal, random padding
  keys, slot 0 always valid; `window`: a sliding window over positions = slots, the
  queries' own slots valid), its bias
  [B,1,R,1,S] and a cotangent."""
  ks = jax.random.split(jax.random.key(seed), 5)
  q = jax.random.normal(ks[0], (B, K, R, G, D), dtype)
  k = jax.random.normal(ks[1], (B, K, S, D), dtype)
  v = jax.random.normal(ks[2], (B, K, S, D), dtype)
  valid = np.asarray(jax.random.bernoulli(ks[3], 0.7, (B, S))) | (np.arange(S) == 0)
  if window:
    valid[:, S - R:] = True  # every query sees itself, inside its window
  q_slot = np.broadcast_to(np.arange(S - R, S, dtype=np.int32), (B, R)).copy()
  if masked_row:
    q_slot[1, 2] = -1  # a padding query: no valid key
  pos = lambda a: jnp.asarray(a) if window else None
  mask = BlockMask(jnp.asarray(q_slot), jnp.asarray(valid), pos(q_slot),
                   pos(np.broadcast_to(np.arange(S, dtype=np.int32), (B, S))), window)
  bias = mask.bias()[:, :, 0, :, None, :]
  return q, k, v, mask, bias, jax.random.normal(ks[4], (B, K, R, G, D), dtype)


def _numpy_attention(q, k, v, bias):
  q, k, v, bias = (np.asarray(a, np.float64) for a in (q, k, v, bias))
  s = np.einsum("bkrgd,bksd->bkrgs", q, k) + bias
  p = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum("bkrgs,bksd->bkrgd", p / p.sum(-1, keepdims=True), v)


def _plain(q, k, v, bias):
  s = jnp.einsum("bkrgd,bksd->bkrgs", q, k) + bias
  return jnp.einsum("bkrgs,bksd->bkrgd", jax.nn.softmax(s, axis=-1), v)


def test_key_blocks_are_balanced():
  assert key_blocks(11, 4) == (3, 4) and key_blocks(11, 5) == (3, 4)
  assert key_blocks(12, 4) == (3, 4) and key_blocks(4096, 512) == (8, 512)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("block", [1, 3, 4, 11])
def test_forward_matches_numpy(block, window):
  q, k, v, mask, bias, _ = _inputs(window=window)
  y = jax.jit(blocked_core, static_argnums=4)(q, k, v, mask, block)
  np.testing.assert_allclose(np.asarray(y), _numpy_attention(q, k, v, bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [2, 4])
def test_gradients_match_plain_autodiff_and_the_dense_core(block):
  q, k, v, mask, bias, dy = _inputs(1)

  def grads(fn, m=bias):
    return jax.vjp(lambda q, k, v: fn(q, k, v, m), q, k, v)[1](dy)

  ours, plain, dense = jax.jit(lambda: (grads(lambda *a: blocked_core(*a, block), mask),
                                        grads(_plain), grads(attention_core)))()
  for name, a, b, c in zip("qkv", ours, plain, dense):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-4, atol=1e-5, err_msg=name)


def test_gradient_matches_finite_differences():
  q, k, v, mask, _, dy = _inputs(2)
  loss = lambda k: jnp.sum(blocked_core(q, k, v, mask, 3) * dy)
  g = np.asarray(jax.grad(loss)(k))
  eps, idx = 1e-2, (1, 0, 9, 2)
  e = jnp.zeros_like(k).at[idx].set(eps)
  fd = (float(loss(k + e)) - float(loss(k - e))) / (2 * eps)
  assert g[idx] == pytest.approx(fd, rel=2e-2, abs=2e-3)


def test_a_row_without_keys_outputs_zero_and_passes_no_gradient():
  """A padding query (no valid key) outputs 0 and contributes no gradient: the gradients with
  a cotangent at that row equal those without it, and the dense core's without it."""
  q, k, v, mask, bias, dy = _inputs(3, masked_row=True)
  y, vjp = jax.vjp(lambda *a: blocked_core(*a, mask, 4), q, k, v)
  np.testing.assert_array_equal(np.asarray(y)[1, :, 2], 0.0)
  keep = np.ones((B, K, R, G, D), bool)
  keep[1, :, 2] = False
  want = _numpy_attention(q, k, v, bias)
  np.testing.assert_allclose(np.asarray(y)[keep], want[keep], rtol=1e-5, atol=1e-5)
  quiet = jnp.where(jnp.asarray(keep), dy, 0.0)
  dense = jax.vjp(lambda *a: attention_core(*a, bias), q, k, v)[1](quiet)
  for name, a, b, c in zip("qkv", vjp(dy), vjp(quiet), dense):
    assert bool(jnp.all(jnp.isfinite(a))), name
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-4, atol=1e-5, err_msg=name)


def test_bfloat16_close_to_the_dense_core():
  q, k, v, mask, bias, _ = _inputs(4, jnp.bfloat16)
  a = np.asarray(blocked_core(q, k, v, mask, 4), np.float32)
  b = np.asarray(attention_core(q, k, v, bias), np.float32)
  np.testing.assert_allclose(a, b, atol=3e-2)


def _loss_and_grads(cfg, tokens, valid):
  graphdef, state = init_model(cfg)
  pos = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)

  def loss(state):
    logits, _ = forward(graphdef, state, tokens, pos, valid)
    lp = jax.nn.log_softmax(logits[:, :-1])
    # Targets read at valid positions only: a padding query's output is nobody's (its keys are
    # all masked; the two cores average different padding there).
    read = (valid[:, :-1] & valid[:, 1:])[..., None]
    return -jnp.mean(jnp.take_along_axis(lp, tokens[:, 1:, None], axis=-1) * read)
  return jax.jit(jax.value_and_grad(loss))(state)


@pytest.mark.parametrize("layers", ["full", "sliding"])
@pytest.mark.parametrize("remat", ["none", "block"])
def test_model_with_attention_blocks_equals_the_dense_core(remat, layers):
  """Logits' loss and every parameter gradient of a left-padded batch of 24 tokens, key blocks
  of 5 (the causal query chunks see 6 to 24 keys): the dense core's, to float32 rounding;
  Gemma-style sliding layers (window 4) too."""
  extra = dict(sliding_window=4, layer_types=("sliding", "full")) if layers == "sliding" else {}
  base = ModelConfig(**_SMALL, **extra, remat=remat)
  tokens = jax.random.randint(jax.random.key(0), (3, 24), 0, base.vocab_size)
  valid = jnp.arange(24)[None] >= jnp.array([0, 4, 9])[:, None]
  want = _loss_and_grads(base, tokens, valid)
  got = _loss_and_grads(dataclasses.replace(base, attention_block=5), tokens, valid)
  for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=2e-5)


def _train_temp_bytes(block: int, l: int = 1024, b: int = 4) -> int:
  cfg = ModelConfig(**dict(_SMALL, num_layers=1), attention_block=block)
  graphdef, state = init_model(cfg)
  tokens = jnp.zeros((b, l), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  loss = lambda s: jnp.sum(forward(graphdef, s, tokens, pos, jnp.ones((b, l), bool))[1])
  return jax.jit(jax.grad(loss)).lower(state).compile().memory_analysis().temp_size_in_bytes


def test_attention_blocks_bound_the_train_step_memory():
  """4 rows x 1,024 tokens, 4 heads: the dense core saves 4 x 4 x 1,024^2 float32
  probabilities (5/8 of them computed: 42 MB) and the [4, 1,024, 1,024] bias; in blocks of 64
  keys, one block's scores and bias are alive (XLA:CPU: 65.4 -> 17.5 MB; at 2,048 tokens
  248 -> 35 MB, linear in the length)."""
  dense, blocked = _train_temp_bytes(0), _train_temp_bytes(64)
  assert dense > 4 * 4 * 1024 * 1024 * 4 * 5 / 8, dense
  assert blocked < dense / 3, (dense, blocked)


def test_attention_block_is_checked():
  for bad in (-1, 2.5, "64"):
    with pytest.raises(ValueError, match="attention_block"):
      ModelConfig(**_SMALL, attention_block=bad)


def test_read_rows_with_attention_blocks_equal_the_dense_core():
  """The scoring path (`apply(read=...)`: a reward model's last layer at a few rows) under key
  blocks of 4 reads the same logits as the dense core."""
  base = ModelConfig(**_SMALL)
  tokens = jax.random.randint(jax.random.key(1), (2, 13), 0, base.vocab_size)
  pos = jnp.broadcast_to(jnp.arange(13, dtype=jnp.int32), (2, 13))
  valid = jnp.ones((2, 13), bool)
  read = jnp.array([[3, 12], [7, 9]], jnp.int32)

  def logits(cfg):
    from flax import nnx
    graphdef, state = init_model(cfg)
    return nnx.merge(graphdef, state).apply(tokens, pos, valid, read=read)[0]
  np.testing.assert_allclose(np.asarray(logits(dataclasses.replace(base, attention_block=4))),
                             np.asarray(logits(base)), rtol=1e-5, atol=1e-5)
