"""Multi-LoRA: the batched forward (each row its own adapter) equals the single-adapter model
run per row with that row's adapter (the path pinned to PEFT in test_lora.py), left padding
included; gradients reach only the adapters some row selected."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import Transformer, multi_lora
from agent_rl.models.lora import LoraConfig

ALL = ("q", "k", "v", "o", "gate", "up", "down")
K, B, L = 3, 5, 7


def _setup(small_config):
  cfg = small_config(qkv_bias=True).replace(lora=LoraConfig(rank=4, alpha=8.0, targets=ALL))
  model = Transformer(cfg, rngs=nnx.Rngs(0))
  graphdef, adapters, base = multi_lora.split(model)
  rng = np.random.default_rng(0)
  # Distinct nonzero adapters (B starts at zero, which would make them all equal the base).
  ads = [jax.tree.map(lambda a: jnp.asarray(0.3 * rng.standard_normal(a.shape), a.dtype),
                      adapters) for _ in range(K)]
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, L)), jnp.int32)
  valid = jnp.asarray(np.arange(L)[None] >= np.array([0, 2, 0, 4, 1])[:, None])
  pos = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)
  return graphdef, base, ads, tokens, pos, valid


def test_batched_forward_equals_per_row_single_adapter(small_config):
  graphdef, base, ads, tokens, pos, valid = _setup(small_config)
  stacked = multi_lora.stack(ads)
  assert multi_lora.num_adapters(stacked) == K
  ids = jnp.asarray([2, 0, 1, 2, 0], jnp.int32)
  got = jax.jit(multi_lora.forward, static_argnums=0)(graphdef, base, stacked, ids, tokens, pos,
                                                       valid)
  for b in range(B):
    model = nnx.merge(graphdef, base, multi_lora.select(stacked, int(ids[b])))
    want = model(tokens, pos, valid)[b]
    m = np.asarray(valid[b])
    np.testing.assert_allclose(np.asarray(got[b])[m], np.asarray(want)[m], atol=2e-5, rtol=0)
  # The adapters really differ: the same rows under adapter 0 give other logits.
  other = multi_lora.forward(graphdef, base, stacked, jnp.zeros_like(ids), tokens, pos, valid)
  assert float(jnp.abs(other[0] - got[0]).max()) > 1e-2


def test_gradients_reach_only_selected_adapters(small_config):
  graphdef, base, ads, tokens, pos, valid = _setup(small_config)
  stacked = multi_lora.stack(ads)
  ids = jnp.asarray([0, 2, 2, 0, 0], jnp.int32)  # adapter 1 unused

  def loss(st):
    logits = multi_lora.forward(graphdef, base, st, ids, tokens, pos, valid)
    return jnp.sum(jnp.where(valid[..., None], jax.nn.log_softmax(logits), 0.0) ** 2) * 1e-3

  grads = jax.grad(loss)(stacked)
  for g in jax.tree.leaves(grads):
    assert float(jnp.abs(g[1]).max()) == 0.0
  for k in (0, 2):
    assert sum(float(jnp.abs(g[k]).sum()) for g in jax.tree.leaves(grads)) > 0
  # Adapter 2's gradient equals the single-adapter model's on its rows alone.
  rows = np.asarray(ids) == 2

  def single(ad):
    logits = nnx.merge(graphdef, base, ad)(tokens[rows], pos[rows], valid[rows])
    v = valid[rows]
    return jnp.sum(jnp.where(v[..., None], jax.nn.log_softmax(logits), 0.0) ** 2) * 1e-3

  want = jax.grad(single)(multi_lora.select(stacked, 2))
  for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g[2]), np.asarray(w), atol=1e-5, rtol=1e-4)


def test_bad_inputs(small_config):
  graphdef, base, ads, tokens, pos, valid = _setup(small_config)
  with pytest.raises(ValueError, match="adapter_ids"):
    multi_lora.forward(graphdef, base, multi_lora.stack(ads), jnp.zeros((2,), jnp.int32), tokens,
                       pos, valid)
  with pytest.raises(ValueError, match="no adapters"):
    multi_lora.stack([])
  with pytest.raises(ValueError, match="no LoRA adapters"):
    multi_lora.split(Transformer(small_config(), rngs=nnx.Rngs(0)))
