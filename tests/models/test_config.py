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
                          "llama-3.2-3b", "llama-3.1-8b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
                          "qwen3-8b", "gemma-3-1b", "gemma-3-4b"}
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


# Published config.json values (Hugging Face hub: Qwen/Qwen3-*, google/gemma-3-1b-it, and the
# text_config of google/gemma-3-4b-it), as the hub files spell them (transformers v4 keys).
_QWEN3_HUB = dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], vocab_size=151936,
                  num_key_value_heads=8, head_dim=128, rope_theta=1000000, rms_norm_eps=1e-6,
                  attention_bias=False, hidden_act="silu", max_position_embeddings=40960,
                  use_sliding_window=False, sliding_window=None, max_window_layers=28)
_GEMMA3_HUB = dict(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], head_dim=256,
                   hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256,
                   rms_norm_eps=1e-6, rope_local_base_freq=10000, rope_theta=1000000,
                   sliding_window_pattern=6, final_logit_softcapping=None,
                   attn_logit_softcapping=None, attention_bias=False, tie_word_embeddings=True)
HUB_CONFIGS = {
    "qwen3-0.6b": dict(_QWEN3_HUB, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, tie_word_embeddings=True),
    "qwen3-1.7b": dict(_QWEN3_HUB, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, tie_word_embeddings=True),
    "qwen3-4b": dict(_QWEN3_HUB, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, tie_word_embeddings=True),
    "qwen3-8b": dict(_QWEN3_HUB, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, tie_word_embeddings=False),
    "gemma-3-1b": dict(_GEMMA3_HUB, vocab_size=262144, hidden_size=1152, intermediate_size=6912,
                       num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
                       sliding_window=512, rope_scaling=None, max_position_embeddings=32768),
    "gemma-3-4b": dict(_GEMMA3_HUB, vocab_size=262208, hidden_size=2560, intermediate_size=10240,
                       num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4,
                       sliding_window=1024, rope_scaling={"factor": 8.0, "rope_type": "linear"},
                       max_position_embeddings=131072),
}
# The model cards' sizes: the hub's safetensors counts of the tied Qwen3 checkpoints include
# the stored copy of lm_head (0.6B -> 751.6M, 1.7B -> 2.03B); ours count it once.
PUBLISHED_NEW = {"qwen3-0.6b": 751_632_384 - 151936 * 1024,
                 "qwen3-1.7b": 2_031_739_904 - 151936 * 2048,
                 "qwen3-4b": 4_022_468_096, "qwen3-8b": 8_190_735_360,
                 "gemma-3-1b": 999_885_952, "gemma-3-4b": 3_880_263_168}


@pytest.mark.parametrize("name", sorted(HUB_CONFIGS))
def test_new_family_presets_match_hub_configs(tmp_path, name):
  """The preset == our translation of the hub config.json, and its parameter count ==
  `transformers`' model built from that config (on the meta device: no memory)."""
  import json
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from agent_rl.models.hf_import import config_from_hf
  hub = HUB_CONFIGS[name]
  (tmp_path / "config.json").write_text(json.dumps(hub))
  cfg, _ = config_from_hf(str(tmp_path))
  preset = get_preset(name)
  assert cfg == preset
  conf_cls = {"qwen3": transformers.Qwen3Config, "gemma3_text": transformers.Gemma3TextConfig}
  model_cls = {"qwen3": transformers.Qwen3ForCausalLM,
               "gemma3_text": transformers.Gemma3ForCausalLM}
  kw = {k: v for k, v in hub.items() if k not in ("model_type", "architectures")}
  with torch.device("meta"):
    hf = model_cls[hub["model_type"]](conf_cls[hub["model_type"]](**kw))
  assert preset.num_params() == sum(p.numel() for p in hf.parameters())
  assert preset.num_params() == PUBLISHED_NEW[name]
  abstract = nnx.eval_shape(lambda: Transformer(preset.replace(num_layers=2), rngs=nnx.Rngs(0)))
  n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract)))
  assert n == preset.replace(num_layers=2).num_params()


def test_gemma3_4b_hub_multimodal_config_is_the_preset(tmp_path):
  """google/gemma-3-4b-it's config.json lists only the text_config keys that differ from
  Gemma3TextConfig's defaults; the translation fills them in as transformers does."""
  import json
  from agent_rl.models.hf_import import config_from_hf
  hub = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
         "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                         "model_type": "gemma3_text", "num_hidden_layers": 34,
                         "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                         "sliding_window": 1024},
         "vision_config": {"model_type": "siglip_vision_model"}, "mm_tokens_per_image": 256}
  (tmp_path / "config.json").write_text(json.dumps(hub))
  cfg, family = config_from_hf(str(tmp_path))
  assert family.name == "gemma3" and cfg == get_preset("gemma-3-4b")


def test_family_fields_validation():
  with pytest.raises(ValueError, match="mlp_activation"):
    ModelConfig(mlp_activation="relu")
  with pytest.raises(ValueError, match="layer_types"):
    ModelConfig(layer_types=("full", "local"))
  with pytest.raises(ValueError, match="sliding_window"):
    ModelConfig(layer_types=("sliding",))
  with pytest.raises(ValueError, match="sliding_window"):
    ModelConfig(sliding_window=0)
  with pytest.raises(ValueError, match="query_pre_attn_scalar"):
    ModelConfig(query_pre_attn_scalar=-1.0)
  with pytest.raises(ValueError, match="qk_norm"):
    ModelConfig(qk_norm=1)
  cfg = ModelConfig(num_layers=7, sliding_window=4, layer_types=("sliding", "sliding", "full"))
  assert [cfg.layer_type(i) for i in range(7)] == ["sliding", "sliding", "full"] * 2 + ["sliding"]
  assert ModelConfig(sliding_window=4).layer_type(3) == "sliding" and not ModelConfig().has_sliding
  assert ModelConfig(query_pre_attn_scalar=16.0, head_dim=64).query_scale == 0.25


def test_rope_local_theta_and_linear_scaling_inv_freq():
  cfg = ModelConfig(head_dim=8, rope_theta=1e6, rope_local_theta=1e4, sliding_window=2,
                    rope_scaling=dict(rope_type="linear", factor=8.0))
  base = lambda theta: 1.0 / theta ** (np.arange(0, 8, 2) / 8)
  np.testing.assert_allclose(rope_inv_freq(cfg, "full"), base(1e6) / 8, rtol=1e-6)
  np.testing.assert_allclose(rope_inv_freq(cfg, "sliding"), base(1e4), rtol=1e-6)
  shared = cfg.replace(rope_local_theta=None)
  np.testing.assert_allclose(rope_inv_freq(shared, "sliding"), base(1e6) / 8, rtol=1e-6)
  with pytest.raises(ValueError, match="factor"):
    ModelConfig(rope_scaling=dict(rope_type="linear", factor=-2.0))
