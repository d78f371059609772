"""Start-up memory report: shard bytes from shapes match the bytes real sharded arrays hold;
the prefill estimate is near what XLA compiles."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agent_rl.models import ModelConfig, Transformer, init_cache
from agent_rl.parallel import (DEFAULT_RULES, init_sharded, make_mesh, optimizer_shardings,
                               state_shardings)
from agent_rl.parallel.memory import (GIB, MemoryBudgetError, MemoryReport, activation_bytes,
                                      kv_cache_bytes, prefill_bytes, report,
                                      tree_bytes_per_device, update_weight_bytes)

CFG = ModelConfig(vocab_size=96, hidden=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, intermediate=64)


def _device0_bytes(tree):
  """Bytes device 0 actually holds (measured on materialized arrays)."""
  d0 = jax.devices()[0]
  return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards
             if s.device == d0)


@pytest.mark.parametrize("shape", [(1, 4, 2), (8, 1, 1), (2, 2, 2)])
def test_params_and_optimizer_bytes_match_materialized_arrays(shape):
  mesh = make_mesh(shape)
  make = lambda: Transformer(CFG, rngs=nnx.Rngs(0))
  _, params = init_sharded(make, mesh, DEFAULT_RULES)
  _, abstract = nnx.split(nnx.eval_shape(make))
  p_sh = state_shardings(abstract, mesh, DEFAULT_RULES)
  assert tree_bytes_per_device(abstract, p_sh) == _device0_bytes(params)

  opt = optax.adamw(1e-3)
  opt_abs = jax.eval_shape(opt.init, abstract)
  opt_sh = optimizer_shardings(opt_abs, p_sh, mesh)
  with jax.set_mesh(mesh):
    opt_state = jax.jit(opt.init, out_shardings=opt_sh)(params)
  assert tree_bytes_per_device(opt_abs, opt_sh) == _device0_bytes(opt_state)
  # Adam's two moments mirror the params exactly (plus a replicated step count).
  assert tree_bytes_per_device(opt_abs, opt_sh) == 2 * _device0_bytes(params) + 4


def test_kv_cache_bytes_by_hand():
  mesh = make_mesh((2, 2, 2))  # batch over data*fsdp = 4, kv heads over tensor = 2
  # 2 (K, V) x 2 layers x 16/4 episodes x 2/2 kv heads x 100 slots x 8 dims x 4 bytes
  assert kv_cache_bytes(CFG, 16, 100, mesh, DEFAULT_RULES) == 2 * 2 * 4 * 1 * 100 * 8 * 4
  # The cache holds the compute dtype (models.init_cache): bf16 compute, half the bytes.
  bf16 = dataclasses.replace(CFG, dtype="bfloat16")
  assert kv_cache_bytes(bf16, 16, 100, mesh, DEFAULT_RULES) == 2 * 2 * 4 * 1 * 100 * 8 * 2
  k = init_cache(bf16, 4, 100).k[0]
  assert k.dtype == jnp.bfloat16 and k.nbytes * 2 * 2 == kv_cache_bytes(
      bf16, 4, 100, make_mesh((1, 1, 1), devices=jax.devices()[:1]), DEFAULT_RULES)


def _compiled_prefill_bytes(cfg, b: int, l: int) -> int:
  """XLA's temporaries of prefilling a whole l-token window read at its last row (the
  rollout's call; the cache an output, as in the rollout's loop)."""
  from benchmarks.prefill_chunks import program
  fn, state, cache = program(cfg, b, l)
  return fn.lower(state, cache).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("chunk", [0, 64])
def test_prefill_estimate_is_near_the_compiled_temporaries(chunk):
  """A 16 x 768-token window: whole, the [16, 4, 768, 768] scores dominate (75 MB); in
  chunks of 64 (12 x 64), a twelfth. The estimate is within 0.6-1.6x of XLA:CPU's number."""
  cfg = dataclasses.replace(CFG, prefill_chunk=chunk)
  mesh = make_mesh((1, 1, 1), devices=jax.devices()[:1])
  est = prefill_bytes(cfg, 16, 768, mesh, DEFAULT_RULES)
  got = _compiled_prefill_bytes(cfg, 16, 768)
  assert 0.6 < got / est < 1.6, (got, est)


def test_budget_refusal_names_field_and_numbers():
  rep = MemoryReport(mesh={"data": 1, "fsdp": 4, "tensor": 2}, params=GIB, optimizer=2 * GIB,
                     kv_cache=GIB // 2, activations=3 * GIB, budget_gib=4.0)
  assert rep.total == 6 * GIB
  # The rollout's cache and prefill add up; an evaluation's rollout is a peak of its own.
  assert dataclasses.replace(rep, prefill=3 * GIB).total == 6.5 * GIB
  assert dataclasses.replace(rep, prefill=GIB, eval_rollout=4 * GIB).total == 7 * GIB
  assert "eval rollout" in rep.text() and "rollout prefill" in rep.text()
  # The update's weight-sized trees sit beside the activations: gradients, and with block remat
  # the stacked layers and their gradient.
  assert dataclasses.replace(rep, update=update_weight_bytes(GIB)).total == 7 * GIB
  assert update_weight_bytes(GIB, "block") == 3 * GIB and "update weights" in rep.text()
  with pytest.raises(MemoryBudgetError, match=r"memory_budget_gib.*6\.000 GiB.*4\.000 GiB"):
    rep.check()
  MemoryReport(mesh={"data": 8}, params=GIB, optimizer=0, kv_cache=0, activations=0,
               budget_gib=1.5).check()
  assert "data=1 x fsdp=4 x tensor=2 (8 devices)" in rep.text()


def test_report_shards_shrink_with_the_mesh():
  make = lambda: Transformer(CFG, rngs=nnx.Rngs(0))
  _, abstract = nnx.split(nnx.eval_shape(make))
  opt_abs = jax.eval_shape(optax.adamw(1e-3).init, abstract)
  out = {}
  for shape in [(8, 1, 1), (1, 8, 1)]:
    mesh = make_mesh(shape)
    p_sh = state_shardings(abstract, mesh, DEFAULT_RULES)
    out[shape] = report(mesh=mesh, rules=DEFAULT_RULES, params=abstract, params_shardings=p_sh,
                        optimizer=opt_abs, opt_shardings=optimizer_shardings(opt_abs, p_sh, mesh),
                        model_cfg=CFG, episodes=64, cache_len=128, rows=16, length=128)
  dp, fsdp = out[(8, 1, 1)], out[(1, 8, 1)]
  assert fsdp.params < dp.params and fsdp.optimizer < dp.optimizer  # FSDP shards the weights
  assert fsdp.kv_cache == dp.kv_cache and fsdp.activations == dp.activations  # same batch split
  assert np.isclose(dp.params / fsdp.params, 8, rtol=0.1)  # norms' scales are tiny and replicated


def test_activation_estimate_with_remat_and_chunked_logits():
  mesh = make_mesh((1, 1, 1), devices=jax.devices()[:1])
  act = lambda cfg, chunk=0: activation_bytes(cfg, 2, 10, mesh, DEFAULT_RULES, np.float32, chunk)
  per_token = 4 * 32 + (2 * 4 + 2 * 2) * 8 + 3 * 64
  per_layer = 20 * per_token + 2 * 2 * 4 * 10 * 10
  assert act(CFG) == (2 * per_layer + 3 * 20 * 96) * 4
  # Block remat keeps each block's input and recomputes one block at a time.
  assert act(dataclasses.replace(CFG, remat="block")) == (2 * 20 * 32 + per_layer + 3 * 20 * 96) * 4
  # Chunked log-probs: one chunk's logits (never more than all of them).
  assert act(CFG, 8) == (2 * per_layer + 3 * 8 * 96) * 4 and act(CFG, 64) == act(CFG)
  # Key blocks of 4: each layer keeps a log-sum-exp a row and head; one block's scores live.
  blocked = 20 * per_token + 2 * 4 * 10
  assert act(dataclasses.replace(CFG, attention_block=4)) == (
      2 * blocked + 2 * 2 * 4 * 10 * 4 + 3 * 20 * 96) * 4
  assert act(dataclasses.replace(CFG, attention_block=10)) == act(CFG)  # one block: dense
