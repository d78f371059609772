"""Decoder: logical axis names, cache-based prefill/decode == full forward, contract shapes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import (KVCache, Transformer, decode_step, forward, init_cache, prefill)

from conftest import init_model

EXPECTED_AXES = {
    "embed/embedding": ("vocab", "embed"),
    "layers/0/attn/q": ("embed", "heads", "head_dim"),
    "layers/0/attn/k": ("embed", "kv_heads", "head_dim"),
    "layers/0/attn/v": ("embed", "kv_heads", "head_dim"),
    "layers/0/attn/o": ("heads", "head_dim", "embed"),
    "layers/0/attn/q_bias": ("heads", "head_dim"),
    "layers/0/attn/k_bias": ("kv_heads", "head_dim"),
    "layers/0/mlp/gate": ("embed", "mlp"),
    "layers/0/mlp/up": ("embed", "mlp"),
    "layers/0/mlp/down": ("mlp", "embed"),
    "layers/0/attn_norm/scale": ("embed",),
    "layers/1/mlp_norm/scale": ("embed",),
    "final_norm/scale": ("embed",),
    "lm_head": ("embed", "vocab"),
}


def test_every_param_has_logical_axes(small_config):
  model = nnx.eval_shape(lambda: Transformer(small_config(tie_embeddings=False),
                                             rngs=nnx.Rngs(0)))
  _, state = nnx.split(model)
  flat = {"/".join(map(str, p)): v for p, v in nnx.to_flat_state(state)}
  for name, axes in EXPECTED_AXES.items():
    assert tuple(flat[name].get_metadata()["out_sharding"]) == axes, name
  for name, var in flat.items():
    assert len(var.get_metadata()["out_sharding"]) == var.get_value().ndim, name
  specs = nnx.get_partition_spec(state)
  assert tuple(specs["layers"][0]["attn"]["q"].get_value()) == ("embed", "heads", "head_dim")


def _positions(valid):
  return jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)


def _incremental(graphdef, state, cfg, tokens, valid, split, max_len):
  """Prefill tokens[:, :split], then decode the rest one token at a time."""
  pos = _positions(valid)
  cache = init_cache(cfg, tokens.shape[0], max_len)
  lp, _, cache = prefill(graphdef, state, tokens[:, :split], pos[:, :split], valid[:, :split],
                         cache)
  out = [lp]
  for t in range(split, tokens.shape[1]):
    ld, _, cache = decode_step(graphdef, state, tokens[:, t], pos[:, t], cache, valid[:, t])
    out.append(ld[:, None])
  return jnp.concatenate(out, axis=1), cache


@pytest.mark.parametrize("padding", ["right", "left"])
def test_prefill_decode_matches_forward(small_model, padding):
  cfg, graphdef, state = small_model
  b, l = 3, 10
  tokens = jax.random.randint(jax.random.key(1), (b, l), 0, cfg.vocab_size)
  lengths = jnp.array([10, 6, 8])
  ar = jnp.arange(l)[None]
  valid = ar < lengths[:, None] if padding == "right" else ar >= (l - lengths)[:, None]
  full, hidden = forward(graphdef, state, tokens, _positions(valid), valid)
  assert full.shape == (b, l, cfg.vocab_size) and full.dtype == jnp.float32
  assert hidden.shape == (b, l, cfg.hidden)
  inc, cache = _incremental(graphdef, state, cfg, tokens, valid, split=5, max_len=12)
  assert int(cache.index) == l
  np.testing.assert_array_equal(np.asarray(cache.valid[:, :l]), np.asarray(valid))
  m = np.asarray(valid)
  np.testing.assert_allclose(np.asarray(inc)[m], np.asarray(full)[m], atol=1e-5, rtol=0)


def test_two_prefill_blocks_with_ragged_padding(small_model):
  """Prompt block (ragged, right-padded) then an observation block (ragged) then decodes:
  equals one forward over the concatenation with the same validity mask."""
  cfg, graphdef, state = small_model
  b, l1, l2, n_dec = 3, 6, 5, 3
  key1, key2 = jax.random.split(jax.random.key(2))
  t1 = jax.random.randint(key1, (b, l1), 0, cfg.vocab_size)
  t2 = jax.random.randint(key2, (b, l2 + n_dec), 0, cfg.vocab_size)
  v1 = jnp.arange(l1)[None] < jnp.array([6, 2, 4])[:, None]
  v2 = jnp.concatenate([jnp.arange(l2)[None] >= jnp.array([0, 3, 1])[:, None],
                        jnp.ones((b, n_dec), bool)], axis=1)
  tokens = jnp.concatenate([t1, t2], axis=1)
  valid = jnp.concatenate([v1, v2], axis=1)
  pos = _positions(valid)
  full, _ = forward(graphdef, state, tokens, pos, valid)
  cache = init_cache(cfg, b, l1 + l2 + n_dec + 2)
  la, _, cache = prefill(graphdef, state, t1, pos[:, :l1], v1, cache)
  lb, _, cache = prefill(graphdef, state, t2[:, :l2], pos[:, l1:l1 + l2], v2[:, :l2], cache)
  outs = [la, lb]
  for t in range(l1 + l2, l1 + l2 + n_dec):
    ld, _, cache = decode_step(graphdef, state, tokens[:, t], pos[:, t], cache)
    outs.append(ld[:, None])
  inc = np.asarray(jnp.concatenate(outs, axis=1))
  m = np.asarray(valid)
  np.testing.assert_allclose(inc[m], np.asarray(full)[m], atol=1e-5, rtol=0)


def test_invalid_decode_rows_do_not_pollute_cache(small_model):
  cfg, graphdef, state = small_model
  b = 3
  tokens = jax.random.randint(jax.random.key(4), (b, 6), 0, cfg.vocab_size)
  pos = jnp.broadcast_to(jnp.arange(6, dtype=jnp.int32), (b, 6))
  cache = init_cache(cfg, b, 12)
  _, _, cache = prefill(graphdef, state, tokens[:, :5], pos[:, :5], jnp.ones((b, 5), bool), cache)
  _, _, cache_skip = decode_step(graphdef, state, tokens[:, 5], pos[:, 5], cache,
                                 jnp.array([True, False, False]))
  l_after, _, _ = decode_step(graphdef, state, tokens[:, 0], pos[:, 5], cache_skip)
  l_direct, _, _ = decode_step(graphdef, state, tokens[:, 0], pos[:, 5], cache)
  np.testing.assert_allclose(l_after[1:], l_direct[1:], atol=1e-5)
  assert float(jnp.abs(l_after[0] - l_direct[0]).max()) > 1e-3  # row 0 did see its token


def test_model_call_defaults_and_cache_pytree(small_model):
  cfg, graphdef, state = small_model
  tokens = jax.random.randint(jax.random.key(1), (3, 10), 0, cfg.vocab_size)
  logits = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))(state, tokens)
  ref, _ = forward(graphdef, state, tokens, jnp.broadcast_to(jnp.arange(10, dtype=jnp.int32),
                                                             (3, 10)), jnp.ones((3, 10), bool))
  np.testing.assert_allclose(logits, ref, atol=1e-5, rtol=1e-5)
  cache = init_cache(cfg, 2, 16)
  assert isinstance(cache, KVCache) and cache.max_len == 16 and cache.batch == 2
  assert cache.k[0].shape == (2, cfg.num_kv_heads, cfg.head_dim, 16)
  assert cache.v[0].shape == (2, cfg.num_kv_heads, 16, cfg.head_dim)
  assert len(jax.tree.leaves(cache)) == 2 * cfg.num_layers + 2


def test_bad_shapes_raise(small_model):
  cfg, graphdef, state = small_model
  tokens = jnp.zeros((2, 3), jnp.int32)
  with pytest.raises(ValueError, match="positions"):
    forward(graphdef, state, tokens, jnp.zeros((2, 4), jnp.int32), jnp.ones((2, 3), bool))
  with pytest.raises(ValueError, match="cache batch"):
    prefill(graphdef, state, tokens, jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 3), bool),
            init_cache(cfg, 1, 8))


def test_decode_compiles_once(small_model):
  cfg, graphdef, state = small_model
  traces = []

  @jax.jit
  def step(state, tok, pos, cache):
    traces.append(1)
    return decode_step(graphdef, state, tok, pos, cache)

  cache = init_cache(cfg, 3, 12)
  for t in range(3):
    _, _, cache = step(state, jnp.array([1, 2, 3]), jnp.array([t, t, t]), cache)
  assert len(traces) == 1


def test_bfloat16_compute_runs_close_to_float32(small_config):
  cfg32 = small_config()
  g, s = init_model(cfg32)
  g16, _ = init_model(cfg32.replace(dtype="bfloat16"))
  tokens = jax.random.randint(jax.random.key(1), (3, 10), 0, cfg32.vocab_size)
  pos = jnp.broadcast_to(jnp.arange(10, dtype=jnp.int32), (3, 10))
  valid = jnp.ones((3, 10), bool)
  l32, _ = forward(g, s, tokens, pos, valid)
  l16, h16 = forward(g16, s, tokens, pos, valid)
  assert l16.dtype == jnp.float32 and h16.dtype == jnp.bfloat16
  p32, p16 = jax.nn.softmax(l32), jax.nn.softmax(l16)
  assert float(jnp.abs(p32 - p16).max()) < 0.05


def test_prefill_rows_matches_forward_and_writes_the_same_cache(small_model):
  """prefill(rows=last) == the full forward's logits at each row's last valid token (a
  second, ragged block too: index > 0), and writes the same cache as a plain prefill."""
  cfg, graphdef, state = small_model
  b, l1, l2 = 3, 6, 5
  tokens = jax.random.randint(jax.random.key(6), (b, l1 + l2), 0, cfg.vocab_size)
  v1 = jnp.arange(l1)[None] >= jnp.array([0, 2, 5])[:, None]  # left-padded prompt
  v2 = jnp.arange(l2)[None] < jnp.array([5, 1, 3])[:, None]  # right-padded observation
  valid = jnp.concatenate([v1, v2], axis=1)
  pos = _positions(valid)
  full, hidden = forward(graphdef, state, tokens, pos, valid)
  cache = init_cache(cfg, b, l1 + l2)
  _, _, plain = prefill(graphdef, state, tokens[:, :l1], pos[:, :l1], v1, cache)
  last1 = jnp.full((b,), l1 - 1, jnp.int32)
  lg, h, cache = prefill(graphdef, state, tokens[:, :l1], pos[:, :l1], v1, cache, last1)
  assert lg.shape == (b, cfg.vocab_size) and h.shape == (b, cfg.hidden)
  np.testing.assert_allclose(lg, full[:, l1 - 1], atol=1e-5, rtol=0)
  np.testing.assert_allclose(h, hidden[:, l1 - 1], atol=1e-5, rtol=0)
  for got, want in zip(jax.tree.leaves(cache), jax.tree.leaves(plain)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  last2 = jnp.array([4, 0, 2], jnp.int32)
  lg2, _, _ = prefill(graphdef, state, tokens[:, l1:], pos[:, l1:], v2, cache, last2)
  want = np.asarray(full)[np.arange(b), l1 + np.asarray(last2)]
  np.testing.assert_allclose(lg2, want, atol=1e-5, rtol=0)
  with pytest.raises(ValueError, match="rows"):
    prefill(graphdef, state, tokens[:, :l1], pos[:, :l1], v1, cache, jnp.zeros((2,), jnp.int32))


@pytest.mark.parametrize("remat", ["none", "block"])
def test_full_path_read_rows_match_forward(small_config, remat):
  """apply(read=...) == the full forward's logits/hidden at the read positions (duplicates,
  padded rows too), with the last layer run at those rows alone; bad uses are errors."""
  cfg = small_config(remat=remat)
  graphdef, state = init_model(cfg)
  b, l = 3, 9
  tokens = jax.random.randint(jax.random.key(7), (b, l), 0, cfg.vocab_size)
  valid = jnp.arange(l)[None] < jnp.array([9, 5, 7])[:, None]
  pos = _positions(valid)
  full, hidden = forward(graphdef, state, tokens, pos, valid)
  read = jnp.array([[8, 0, 3, 3], [4, 1, 0, 8], [6, 6, 2, 5]], jnp.int32)
  model = nnx.merge(graphdef, state)
  lg, h, cache = model.apply(tokens, pos, valid, read=read)
  assert cache is None and lg.shape == (b, 4, cfg.vocab_size) and h.shape == (b, 4, cfg.hidden)
  idx = np.arange(b)[:, None], np.asarray(read)
  np.testing.assert_allclose(h, np.asarray(hidden)[idx], atol=1e-5, rtol=0)
  np.testing.assert_allclose(lg, np.asarray(full)[idx], atol=1e-5, rtol=0)
  with pytest.raises(ValueError, match="read"):
    model.apply(tokens, pos, valid, read=read[:2])
