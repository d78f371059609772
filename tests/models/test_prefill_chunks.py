"""A cached block's attention in query chunks (`ModelConfig.prefill_chunk`): the same logits,
hidden states and cache as the whole block at once, full and sliding layers, a block written
after an earlier one (ragged padding), the read-rows path; and the memory it saves."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.models import ModelConfig, init_cache, prefill
from agent_rl.models.attention import in_query_chunks
from tests.models.conftest import _SMALL, init_model

# Layer 0 slides (window 4 positions), layer 1 is global: both masks are chunked.
SLIDING = dict(_SMALL, sliding_window=4, layer_types=("sliding", "full"))


def _two_blocks(cfg, rows: bool):
  """Prefills a ragged prompt block then a ragged 11-token block (`rows`: read at each row's
  last valid token); returns the second block's logits, hidden states and the cache."""
  graphdef, state = init_model(cfg)
  b, l1, l2 = 3, 5, 11
  t1, t2 = (jax.random.randint(jax.random.key(k), (b, n), 0, cfg.vocab_size)
            for k, n in ((1, l1), (2, l2)))
  v1 = jnp.arange(l1)[None] < jnp.array([5, 2, 4])[:, None]
  v2 = jnp.arange(l2)[None] >= jnp.array([0, 3, 6])[:, None]
  valid = jnp.concatenate([v1, v2], axis=1)
  pos = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)
  cache = init_cache(cfg, b, l1 + l2 + 2)
  _, _, cache = prefill(graphdef, state, t1, pos[:, :l1], v1, cache)
  last = jnp.full((b,), l2 - 1, jnp.int32) if rows else None
  return prefill(graphdef, state, t2, pos[:, l1:], v2, cache, last)


@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("layers", ["full", "sliding"])
@pytest.mark.parametrize("chunk", [1, 3, 4])
def test_chunked_block_equals_the_whole_block(layers, rows, chunk):
  base = ModelConfig(**(SLIDING if layers == "sliding" else _SMALL), prefill_chunk=0)
  want = _two_blocks(base, rows)
  got = _two_blocks(dataclasses.replace(base, prefill_chunk=chunk), rows)
  for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-6, rtol=0)


def test_in_query_chunks_pads_the_last_chunk_and_passes_none():
  q = jnp.arange(2 * 7 * 3, dtype=jnp.float32).reshape(2, 7, 3)
  pos = jnp.arange(14, dtype=jnp.int32).reshape(2, 7)
  f = lambda a, p, none: (a * 2 + p[..., None]) if none is None else None
  for chunk in (0, 2, 3, 7, 9):
    np.testing.assert_array_equal(in_query_chunks(f, chunk, q, pos, None), q * 2 + pos[..., None])


def _temp_bytes(chunk: int, l: int = 512, b: int = 8) -> int:
  cfg = ModelConfig(**dict(_SMALL, num_layers=1), prefill_chunk=chunk)
  graphdef, state = init_model(cfg)
  tokens = jnp.zeros((b, l), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  fn = jax.jit(lambda s, c: prefill(graphdef, s, tokens, pos, jnp.ones((b, l), bool), c))
  return fn.lower(state, init_cache(cfg, b, l)).compile().memory_analysis().temp_size_in_bytes


def test_chunks_bound_the_prefill_memory():
  """A 512-token block of 8 rows, 4 heads: whole, its scores and bias are 8 x 4 x 512 x 512
  and 8 x 512 x 512 floats (41.9 MB); in chunks of 64 queries, an eighth of that."""
  whole, chunked = _temp_bytes(0), _temp_bytes(64)
  scores_and_bias = (8 * 4 * 512 * 512 + 8 * 512 * 512) * 4
  assert whole > scores_and_bias, (whole, scores_and_bias)
  assert chunked < whole / 4, (whole, chunked)


def test_prefill_chunk_is_checked():
  for bad in (-1, 2.5, "64"):
    with pytest.raises(ValueError, match="prefill_chunk"):
      ModelConfig(**_SMALL, prefill_chunk=bad)
