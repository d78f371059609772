"""ModelConfig validation and presets (parameter counts checked against the published ones)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import PRESETS, ModelConfig, Transformer, get_preset
from agent_rl.models.config import RopeScaling, rope_inv_freq

# Parameter counts listed on the Hugging Face model cards / safetensors metadata.
PUBLISHED_PARAMS = {
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-7b": 7_615_616_512,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "llama-3.1-8b": 8_030_261_248,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_preset_param_counts_match_published(name):
  assert get_preset(name).num_params() == PUBLISHED_PARAMS[name]


def test_tiny_preset_and_param_count_matches_module():
  cfg = get_preset("tiny")
  assert (cfg.hidden, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate,
          cfg.vocab_size) == (256, 4, 4, 2, 1024, 4096)
  for c in (cfg, cfg.replace(tie_embeddings=False, qkv_bias=False)):
    abstract = nnx.eval_shape(lambda: Transformer(c, rngs=nnx.Rngs(0)))
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract)))
    assert n == c.num_params()


def test_presets_are_deltas_and_hashable():
  assert set(PRESETS) == {"tiny", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "llama-3.2-1b",
                          "llama-3.2-3b", "llama-3.1-8b"}
  cfg = get_preset("llama-3.1-8b", num_layers=2)
  assert cfg.num_layers == 2 and cfg.rope_scaling["factor"] == 8.0
  assert get_preset("llama-3.2-1b").rope_scaling["factor"] == 32.0
  assert not get_preset("qwen2.5-7b").tie_embeddings and get_preset("qwen2.5-0.5b").qkv_bias
  assert len({hash(c) for c in PRESETS.values()}) == len(PRESETS)


def test_unknown_preset_lists_known():
  with pytest.raises(KeyError, match="qwen2.5-0.5b"):
    get_preset("gpt-5")


@pytest.mark.parametrize("field,value", [
    ("hidden", 0), ("hidden", 3.0), ("num_layers", True), ("vocab_size", -1),
    ("num_kv_heads", 3), ("head_dim", 7), ("rope_theta", -1.0), ("rms_eps", "x"),
    ("tie_embeddings", 1), ("qkv_bias", None), ("dtype", "int8"), ("param_dtype", "float64"),
    ("rope_scaling", 3.0),
])
def test_bad_values_name_the_field(field, value):
  with pytest.raises(ValueError, match=field):
    ModelConfig(**{field: value})


def test_rope_scaling_validation():
  with pytest.raises(ValueError, match="low_freq_factor"):
    ModelConfig(rope_scaling=dict(factor=8.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=8192))
  with pytest.raises(ValueError, match="rope_type"):
    ModelConfig(rope_scaling=dict(rope_type="yarn", factor=8.0))
  with pytest.raises(ValueError, match="hidden_size"):
    get_preset("tiny", hidden_size=3)
  rs = ModelConfig(rope_scaling=dict(rope_type="llama3", factor=8, low_freq_factor=1,
                                     high_freq_factor=4, original_max_position_embeddings=64))
  assert isinstance(rs.rope_scaling, RopeScaling) and rs.rope_scaling.factor == 8.0
  assert ModelConfig(dtype=jnp.bfloat16).compute_dtype == jnp.bfloat16


def test_llama3_inv_freq_against_equations():
  """Written from the Llama 3.1 release's scaling rule, in float64 per frequency."""
  cfg = ModelConfig(head_dim=64, rope_theta=500000.0, rope_scaling=dict(
      factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192))
  got = rope_inv_freq(cfg)
  for i, f in enumerate(500000.0 ** -(np.arange(0, 64, 2) / 64)):
    wavelen = 2 * np.pi / f
    if wavelen < 8192 / 4:
      want = f
    elif wavelen > 8192 / 1:
      want = f / 8
    else:
      s = (8192 / wavelen - 1) / (4 - 1)
      want = (1 - s) * f / 8 + s * f
    np.testing.assert_allclose(got[i], want, rtol=1e-5)
