"""The policy model born sharded on 8 fake CPU devices (fsdp=4, tensor=2): its params are
really split across devices and its forward equals the single-device forward."""
import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from agent_rl.models import Transformer, forward, get_preset
from agent_rl.parallel import DEFAULT_RULES, init_sharded, logical_sharding, make_mesh, mesh_rules


def _on_one_device(state):
  dev = jax.devices()[0]
  return jax.tree.map(lambda a: jax.device_put(np.asarray(a), dev), state)


# Untied covers both embedding and lm_head; the tied variant (head = embedding^T) is slow-only.
@pytest.mark.parametrize("tie", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_tiny_sharded_forward_equals_unsharded(tie):
  cfg = get_preset("tiny", num_layers=2, tie_embeddings=tie)
  mesh = make_mesh((1, 4, 2))
  graphdef, state = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh, DEFAULT_RULES)

  flat = {"/".join(map(str, k)): v.value for k, v in nnx.to_flat_state(state)}
  e, v, h, kvh, d, m = (cfg.hidden, cfg.vocab_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                        cfg.intermediate)
  expected = {
      "embed/embedding": (P("tensor", "fsdp"), (v // 2, e // 4)),
      "layers/0/attn/q": (P("fsdp", "tensor", None), (e // 4, h // 2, d)),
      "layers/1/attn/k": (P("fsdp", "tensor", None), (e // 4, kvh // 2, d)),
      "layers/0/attn/o": (P("tensor", None, "fsdp"), (h // 2, d, e // 4)),
      "layers/0/mlp/gate": (P("fsdp", "tensor"), (e // 4, m // 2)),
      "layers/1/mlp/down": (P("tensor", "fsdp"), (m // 2, e // 4)),
      "final_norm/scale": (P("fsdp"), (e // 4,)),
  }
  if not tie:
    expected["lm_head"] = (P("fsdp", "tensor"), (e // 4, v // 2))
  for path, (spec, shard_shape) in expected.items():
    arr = flat[path]
    assert arr.sharding.is_equivalent_to(NamedSharding(mesh, spec), arr.ndim), (path, arr.sharding)
    assert {s.data.shape for s in arr.addressable_shards} == {shard_shape}, path
    assert len(arr.addressable_shards) == 8

  b, l = 8, 12
  tokens = jax.random.randint(jax.random.key(1), (b, l), 0, cfg.vocab_size)
  positions = np.broadcast_to(np.arange(l, dtype=np.int32), (b, l)) - 2
  valid = np.ones((b, l), bool)
  valid[:3, :2] = False  # left padding on a few rows
  positions = np.maximum(positions, 0).astype(np.int32)

  tok_s = jax.device_put(tokens, logical_sharding(("batch", "length"), mesh))
  with mesh_rules(mesh, DEFAULT_RULES):
    logits, hidden = forward(graphdef, state, tok_s, positions, valid)
  ref_state = _on_one_device(state)
  ref_logits, ref_hidden = forward(graphdef, ref_state, tokens, positions, valid)
  assert len(ref_logits.sharding.device_set) == 1 and len(logits.sharding.device_set) == 8
  # float32 sums reordered by the shard split: error is relative to the output's scale
  # (tiny's N(0,1) tied embedding gives logits of |x| ~ 30), bounded by 1e-5 of it.
  for got, want in ((logits, ref_logits), (hidden, ref_hidden)):
    got, want = np.asarray(got), np.asarray(want)
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= 1e-5 * scale, (np.abs(got - want).max(), scale)


def test_gqa_kv_heads_not_divisible_by_tensor_is_named():
  cfg = get_preset("tiny", num_layers=1, num_heads=4, num_kv_heads=1)
  mesh = make_mesh((1, 4, 2))
  with pytest.raises(ValueError, match=r"parameter layers/0/attn/k of shape \(256, 1, 64\): "
                                       r"dimension 1 \('kv_heads', size 1\)"):
    init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh, DEFAULT_RULES)


def test_kv_cache_and_residual_follow_the_rules():
  """Under a mesh the cache is born laid out by the rules (episodes over data x fsdp, KV heads
  over tensor); a batch that does not divide the mesh stays replicated on that dimension."""
  from agent_rl.models import ModelConfig, init_cache
  from agent_rl.parallel import DEFAULT_RULES, make_mesh, mesh_rules
  cfg = ModelConfig(vocab_size=64, hidden=32, num_layers=1, num_heads=4, num_kv_heads=2,
                    head_dim=8, intermediate=64)
  mesh = make_mesh((2, 2, 2))
  with mesh_rules(mesh, DEFAULT_RULES):
    even = jax.jit(lambda: init_cache(cfg, 8, 16))()
    odd = jax.jit(lambda: init_cache(cfg, 3, 16))()
  spec = lambda x: tuple(x.sharding.spec) + (None,) * (x.ndim - len(x.sharding.spec))
  assert spec(even.k[0]) == (("data", "fsdp"), "tensor", None, None)
  assert spec(even.v[0]) == (("data", "fsdp"), "tensor", None, None)
  assert spec(even.valid) == (("data", "fsdp"), None)
  assert spec(odd.k[0]) == (None, "tensor", None, None)
