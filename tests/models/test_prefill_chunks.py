"""A cached block written in sequence chunks (`ModelConfig.prefill_chunk`): the same logits,
hidden states and cache as the whole block at once, full and sliding layers, a block written
after an earlier one (ragged padding), into a cache it fills exactly, the read-rows path
(rows inside the chunks' overlap too); and the memory it saves."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import ModelConfig, init_cache, prefill
from tests.models.conftest import _SMALL, init_model

# Layer 0 slides (window 4 positions), layer 1 is global: both masks are chunked.
SLIDING = dict(_SMALL, sliding_window=4, layer_types=("sliding", "full"))


def _two_blocks(cfg, rows: str):
  """Prefills a ragged 5-token prompt block then a ragged 11-token block into a cache of 16
  slots; returns the second block's logits, hidden states and the cache. rows: 'none' (all
  rows), 'last' (read each row at the block's end), 'mixed' (rows 0, 7 and 10: with chunks
  of 4, 4 x 3 = 12 tokens for 11, row 7 is in the two chunks' overlap)."""
  graphdef, state = init_model(cfg)
  b, l1, l2 = 3, 5, 11
  t1, t2 = (jax.random.randint(jax.random.key(k), (b, n), 0, cfg.vocab_size)
            for k, n in ((1, l1), (2, l2)))
  v1 = jnp.arange(l1)[None] < jnp.array([5, 2, 4])[:, None]
  v2 = jnp.arange(l2)[None] >= jnp.array([0, 3, 6])[:, None]
  valid = jnp.concatenate([v1, v2], axis=1)
  pos = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)
  cache = init_cache(cfg, b, l1 + l2)
  _, _, cache = prefill(graphdef, state, t1, pos[:, :l1], v1, cache)
  read = {"none": None, "last": jnp.full((b,), l2 - 1, jnp.int32),
          "mixed": jnp.array([0, 7, 10], jnp.int32)}[rows]
  return prefill(graphdef, state, t2, pos[:, l1:], v2, cache, read)


@pytest.mark.parametrize("rows", ["none", "last", "mixed"])
@pytest.mark.parametrize("layers", ["full", "sliding"])
@pytest.mark.parametrize("chunk", [1, 3, 4, 6])
def test_chunked_block_equals_the_whole_block(layers, rows, chunk):
  base = ModelConfig(**(SLIDING if layers == "sliding" else _SMALL), prefill_chunk=0)
  want = _two_blocks(base, rows)
  got = _two_blocks(dataclasses.replace(base, prefill_chunk=chunk), rows)
  # float32 sums in another order: equal to ~1e-6 (bitwise on one Intel box, 2.4e-6 apart
  # on an AMD EPYC one); a wrong mask or chunk moves values by > 1e-2.
  for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=1e-5)


def test_chunks_are_balanced_and_cover_the_block():
  """11 tokens at chunk 5: 3 chunks of 4 (traced once, a scan), not 5, 5 and 1; the cache
  index advances by the block's length (the chunks' values: the tests above)."""
  cfg = ModelConfig(**_SMALL, prefill_chunk=5)
  graphdef, state = init_model(cfg)
  seen = []
  model = nnx.merge(graphdef, state)
  write = model._write
  model._write = lambda tok, *a: (seen.append(tok.shape), write(tok, *a))[1]
  tokens = jnp.ones((2, 11), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(11, dtype=jnp.int32), (2, 11))
  _, _, cache = model.apply(tokens, pos, jnp.ones((2, 11), bool), init_cache(cfg, 2, 13))
  assert seen == [(2, 4)] and int(cache.index) == 11


def _temp_bytes(chunk: int, l: int = 512, b: int = 8) -> int:
  cfg = ModelConfig(**dict(_SMALL, num_layers=1), prefill_chunk=chunk)
  graphdef, state = init_model(cfg)
  tokens = jnp.zeros((b, l), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  fn = jax.jit(lambda s, c: prefill(graphdef, s, tokens, pos, jnp.ones((b, l), bool), c))
  return fn.lower(state, init_cache(cfg, b, l)).compile().memory_analysis().temp_size_in_bytes


def test_chunks_bound_the_prefill_memory():
  """A 512-token block of 8 rows, 4 heads: whole, its scores and bias are 8 x 4 x 512 x 512
  and 8 x 512 x 512 floats (41.9 MB); in chunks of 64 tokens, an eighth of that (and of the
  MLP's activations)."""
  whole, chunked = _temp_bytes(0), _temp_bytes(64)
  scores_and_bias = (8 * 4 * 512 * 512 + 8 * 512 * 512) * 4
  assert whole > scores_and_bias, (whole, scores_and_bias)
  assert chunked < whole / 4, (whole, chunked)


def test_chunk_plan():
  plan = lambda chunk, l: ModelConfig(**_SMALL, prefill_chunk=chunk).prefill_chunks(l)
  assert plan(256, 1093) == (5, 219) and plan(256, 256) == (1, 256)
  assert plan(256, 257) == (2, 129) and plan(0, 5000) == (1, 5000) and plan(1, 3) == (3, 1)


def test_prefill_chunk_is_checked():
  for bad in (-1, 2.5, "64"):
    with pytest.raises(ValueError, match="prefill_chunk"):
      ModelConfig(**_SMALL, prefill_chunk=bad)
