"""Qwen3 and Gemma 3 against `transformers` (CPU torch, float32) on tiny random configs,
sliding-window layers with a window shorter than the sequence included; KV-cache decode
equals the full forward for each family."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import decode_step, forward, init_cache, load_hf, prefill
from agent_rl.models.hf_import import config_from_hf

from conftest import init_model
from hf_util import hf_logits, our_logits, randomize

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
             head_dim=16)  # head_dim != hidden / heads, as Qwen3 and Gemma 3 allow
L = 11
TOKENS = np.random.default_rng(0).integers(0, SIZES["vocab_size"], (3, L))
LEFT_MASK = np.array([[1] * L, [0] * 3 + [1] * (L - 3), [0] * 6 + [1] * (L - 6)])

CASES = {
    "qwen3_untied": ("qwen3", dict(tie_word_embeddings=False, rope_theta=10000.0)),
    "qwen3_tied_sliding": ("qwen3", dict(tie_word_embeddings=True, use_sliding_window=True,
                                         sliding_window=4, max_window_layers=2)),
    "gemma3_sliding_linear_rope": ("gemma3_text", dict(
        tie_word_embeddings=True, query_pre_attn_scalar=24, sliding_window=4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0,
                                            "rope_theta": 1_000_000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}})),
    "gemma3_untied_v4_rope": ("gemma3_text", dict(
        tie_word_embeddings=False, query_pre_attn_scalar=16, sliding_window=3,
        sliding_window_pattern=2, rope_theta=50_000.0, rope_local_base_freq=500.0)),
}
CLASSES = {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
           "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM")}


def save_random(tmp_path, family, seed=0, **kw):
  """A random HF model of `family`, saved with save_pretrained; (model, path)."""
  conf_cls, model_cls = (getattr(transformers, n) for n in CLASSES[family])
  cfg = conf_cls(**{**SIZES, **kw})
  cfg._attn_implementation = "eager"
  torch.manual_seed(seed)
  model = randomize(model_cls(cfg).eval(), seed, zero_centred_norms=family == "gemma3_text")
  path = str(tmp_path / family)
  model.save_pretrained(path)
  return model, path


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(tmp_path, case):
  family, kw = CASES[case]
  hf, path = save_random(tmp_path, family, **kw)
  cfg, fam = config_from_hf(path)
  assert fam.name == family and cfg.head_dim == 16
  if "sliding" in case:
    assert cfg.has_sliding and cfg.sliding_window < L
  ours = load_hf(path)
  full = np.ones_like(TOKENS)
  np.testing.assert_allclose(our_logits(ours, TOKENS, full), hf_logits(hf, TOKENS, full),
                             atol=1e-4, rtol=0)
  m = LEFT_MASK.astype(bool)
  got, want = our_logits(ours, TOKENS, LEFT_MASK)[m], hf_logits(hf, TOKENS, LEFT_MASK)[m]
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_gemma3_config_translation(tmp_path):
  _, path = save_random(tmp_path, "gemma3_text", **CASES["gemma3_sliding_linear_rope"][1])
  cfg, _ = config_from_hf(path)
  assert [cfg.layer_type(i) for i in range(4)] == ["sliding", "sliding", "full", "sliding"]
  assert cfg.rope_scaling.rope_type == "linear" and cfg.rope_scaling.factor == 4.0
  assert cfg.rope_local_theta == 10_000.0 and cfg.rope_theta == 1_000_000.0
  assert cfg.query_scale == 24 ** -0.5 and cfg.mlp_activation == "gelu_tanh"
  assert cfg.norm_plus_one and cfg.post_norms and cfg.embed_scale and cfg.qk_norm


def _positions(valid):
  return jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)


FAMILY_CONFIGS = {
    "qwen3_sliding": dict(qkv_bias=False, qk_norm=True, head_dim=16, sliding_window=3,
                          layer_types=("full", "sliding")),
    "gemma3": dict(qkv_bias=False, qk_norm=True, norm_plus_one=True, post_norms=True,
                   embed_scale=True, mlp_activation="gelu_tanh", head_dim=16,
                   query_pre_attn_scalar=12.0, sliding_window=3, layer_types=("sliding", "full"),
                   rope_local_theta=100.0, rope_scaling=dict(rope_type="linear", factor=2.0)),
}


@pytest.mark.parametrize("name", sorted(FAMILY_CONFIGS))
def test_cache_decode_matches_forward_with_sliding_windows(small_config, name):
  """A ragged two-block prefill (padding inside the cache, so slots != positions), then
  decodes past the window: equals the full forward over the concatenation."""
  cfg = small_config(**FAMILY_CONFIGS[name])
  graphdef, state = init_model(cfg)
  b, l1, l2, n_dec = 3, 6, 5, 4
  tokens = jax.random.randint(jax.random.key(3), (b, l1 + l2 + n_dec), 0, cfg.vocab_size)
  v1 = jnp.arange(l1)[None] >= jnp.array([0, 2, 4])[:, None]
  v2 = jnp.arange(l2)[None] < jnp.array([5, 1, 3])[:, None]
  valid = jnp.concatenate([v1, v2, jnp.ones((b, n_dec), bool)], axis=1)
  pos = _positions(valid)
  full, _ = forward(graphdef, state, tokens, pos, valid)
  cache = init_cache(cfg, b, l1 + l2 + n_dec)
  assert cache.pos is not None
  la, _, cache = prefill(graphdef, state, tokens[:, :l1], pos[:, :l1], v1, cache)
  lb, _, cache = prefill(graphdef, state, tokens[:, l1:l1 + l2], pos[:, l1:l1 + l2], v2, cache)
  outs = [la, lb]
  for t in range(l1 + l2, l1 + l2 + n_dec):
    ld, _, cache = decode_step(graphdef, state, tokens[:, t], pos[:, t], cache)
    outs.append(ld[:, None])
  inc = np.asarray(jnp.concatenate(outs, axis=1))
  m = np.asarray(valid)
  np.testing.assert_allclose(inc[m], np.asarray(full)[m], atol=1e-5, rtol=0)
  # The window is in effect: without it (all layers full) the logits differ.
  g2, _ = init_model(cfg.replace(sliding_window=None, layer_types=None))
  no_window, _ = forward(g2, state, tokens, pos, valid)
  assert float(np.abs(np.asarray(no_window)[m] - np.asarray(full)[m]).max()) > 1e-3


def test_sliding_window_against_numpy_mask(small_config):
  """One sliding layer, one head: attention weights == a NumPy softmax with the mask
  0 <= p_q - p_k < W (positions) over valid keys."""
  cfg = small_config(num_layers=1, num_heads=1, num_kv_heads=1, qkv_bias=False,
                     sliding_window=2, layer_types=("sliding",))
  graphdef, state = init_model(cfg)
  model = nnx.merge(graphdef, state)
  valid = jnp.array([[False, True, True, True, True, True]])
  pos = _positions(valid)
  tokens = jnp.array([[5, 6, 7, 8, 9, 10]])
  biases = {t: m.bias() for t, m in
            model._masks(jnp.arange(6, dtype=jnp.int32)[None], valid, pos, pos).items()}
  p = np.asarray(pos[0])
  want = (p[:, None] - p[None, :] >= 0) & (p[:, None] - p[None, :] < 2) & np.asarray(valid[0])[None]
  want &= np.tril(np.ones((6, 6), bool))
  np.testing.assert_array_equal(np.asarray(biases["sliding"][0, 0, 0]) == 0, want)
  np.testing.assert_array_equal(np.asarray(biases["full"][0, 0, 0]) == 0,
                                np.tril(np.ones((6, 6), bool)) & np.asarray(valid[0])[None])
  assert forward(graphdef, state, tokens, pos, valid)[0].shape == (1, 6, cfg.vocab_size)


def test_sliding_model_rejects_cache_without_positions(small_config):
  cfg = small_config(sliding_window=2)
  graphdef, state = init_model(cfg)
  cache = init_cache(cfg.replace(sliding_window=None), 1, 4)
  with pytest.raises(ValueError, match="slot positions"):
    prefill(graphdef, state, jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2), jnp.int32),
            jnp.ones((1, 2), bool), cache)


def test_gemma3_multimodal_checkpoint_loads_its_text_decoder(tmp_path):
  """Gemma3ForConditionalGeneration (the hub's 4B+ checkpoints): the text decoder under
  `language_model.`, the vision tower ignored; text logits equal `transformers`'."""
  text = dict(SIZES, sliding_window=4, query_pre_attn_scalar=16,
              layer_types=["sliding_attention", "full_attention"] * 2)
  vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                image_size=28, patch_size=14)
  cfg = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
  cfg._attn_implementation = "eager"
  cfg.text_config._attn_implementation = "eager"
  torch.manual_seed(0)
  hf = randomize(transformers.Gemma3ForConditionalGeneration(cfg).eval(), 0,
                 zero_centred_norms=True)
  path = str(tmp_path / "gemma3_mm")
  hf.save_pretrained(path)
  ours = load_hf(path)
  assert ours.cfg.has_sliding and ours.cfg.embed_scale
  m = LEFT_MASK.astype(bool)
  np.testing.assert_allclose(our_logits(ours, TOKENS, LEFT_MASK)[m],
                             hf_logits(hf, TOKENS, LEFT_MASK)[m], atol=1e-4, rtol=0)
