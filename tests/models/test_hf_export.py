"""save_hf round trip: transformers.AutoModelForCausalLM.from_pretrained of our export gives
our logits (float32, left-padded batch, <= 1e-4) for every family; load_hf reads it back
bit for bit; sharding, tokenizer files and bad input."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import FAMILIES, load_hf, save_hf
from agent_rl.models.hf_import import config_from_hf

from conftest import init_model
from hf_util import hf_logits, our_logits

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_BASE = dict(vocab_size=97, hidden=32, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=8,
             intermediate=64)
CONFIGS = {
    "qwen2": dict(qkv_bias=True, tie_embeddings=True),
    "llama": dict(qkv_bias=False, tie_embeddings=False, rope_theta=500000.0, rope_scaling=dict(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16)),
    "qwen3": dict(qkv_bias=False, qk_norm=True, head_dim=16, tie_embeddings=False,
                  sliding_window=3, layer_types=("full", "full", "sliding", "sliding")),
    "gemma3_text": dict(qkv_bias=False, qk_norm=True, norm_plus_one=True, post_norms=True,
                        embed_scale=True, mlp_activation="gelu_tanh", head_dim=16,
                        query_pre_attn_scalar=12.0, sliding_window=3,
                        layer_types=("sliding", "full"), rope_local_theta=100.0,
                        rope_scaling=dict(rope_type="linear", factor=2.0)),
}
L = 10
TOKENS = np.random.default_rng(1).integers(0, 97, (3, L))
LEFT_MASK = np.array([[1] * L, [0] * 2 + [1] * (L - 2), [0] * 6 + [1] * (L - 6)])


def _model(name, seed=0):
  from agent_rl.models import ModelConfig
  cfg = ModelConfig(**{**_BASE, **CONFIGS[name]})
  graphdef, state = init_model(cfg, seed)
  if cfg.norm_plus_one:  # zero-centred (1 + w) scales, as Gemma checkpoints have them
    for path, var in nnx.to_flat_state(state):
      if path[-1] == "scale":
        var.set_value(var.get_value() - 1.0)
  return cfg, nnx.merge(graphdef, state)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_loads_our_export_with_equal_logits(tmp_path, name):
  cfg, model = _model(name)
  out = str(tmp_path / name)
  info = save_hf(out, cfg, model)
  assert info["family"] == name and info["num_params"] == cfg.num_params()
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["model_type"] == name
  hf = transformers.AutoModelForCausalLM.from_pretrained(
      out, dtype=torch.float32, attn_implementation="eager").eval()
  assert type(hf).__name__ == FAMILIES.get(name).architectures[0]
  m = LEFT_MASK.astype(bool)
  ours = our_logits(model, TOKENS, LEFT_MASK)
  np.testing.assert_allclose(ours[m], hf_logits(hf, TOKENS, LEFT_MASK)[m], atol=1e-4, rtol=0)
  # Read back by us: the same config and the same arrays, bit for bit.
  back = load_hf(out)
  assert back.cfg == cfg
  for (p, a), (q, b) in zip(nnx.to_flat_state(nnx.state(model)),
                            nnx.to_flat_state(nnx.state(back))):
    assert p == q
    np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()))


def test_sharded_export_and_tokenizer_files(tmp_path):
  cfg, model = _model("qwen2")
  tok_dir = tmp_path / "tok"
  tok_dir.mkdir()
  (tok_dir / "tokenizer.json").write_text('{"version": "1.0"}')
  (tok_dir / "tokenizer_config.json").write_text('{"eos_token": "</s>"}')

  class DirTokenizer:  # like agent_rl.tokenizers.load_hf: names its HF directory
    path = str(tok_dir)

  out = str(tmp_path / "sharded")
  info = save_hf(out, cfg, nnx.state(model), DirTokenizer(), max_shard_bytes=20_000)
  shards = [f for f in info["files"] if f.startswith("model-")]
  assert len(shards) > 1 and "model.safetensors.index.json" in info["files"]
  assert {"tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(out))
  with open(os.path.join(out, "model.safetensors.index.json")) as f:
    index = json.load(f)
  assert set(index["weight_map"].values()) == set(shards)
  hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  full = np.ones_like(TOKENS)
  np.testing.assert_allclose(our_logits(load_hf(out), TOKENS, full), hf_logits(hf, TOKENS, full),
                             atol=1e-4, rtol=0)
  # Re-export into the same directory as one file: the stale shards and index are removed.
  saved = []

  class SavingTokenizer:
    def save(self, path):
      saved.append(path)
      open(os.path.join(path, "tokenizer.model"), "wb").close()

  info = save_hf(out, cfg, nnx.to_pure_dict(nnx.state(model)), SavingTokenizer())
  assert saved == [out] and "tokenizer.model" in info["files"]
  assert not [f for f in os.listdir(out) if f.startswith("model-")]
  assert not os.path.exists(os.path.join(out, "model.safetensors.index.json"))


def test_export_bad_input_names_the_field(tmp_path):
  from agent_rl.models import ModelConfig
  cfg, model = _model("qwen3")
  state = nnx.to_pure_dict(nnx.state(model))
  with pytest.raises(ValueError, match="no HF family"):
    save_hf(str(tmp_path / "a"), cfg.replace(post_norms=True), state)
  with pytest.raises(ValueError, match="qk_norm"):
    save_hf(str(tmp_path / "b"), cfg, state, family="llama")
  with pytest.raises(ValueError, match="query_pre_attn_scalar"):
    save_hf(str(tmp_path / "c"), cfg.replace(query_pre_attn_scalar=4.0), state)
  with pytest.raises(ValueError, match="missing.*layers/1/attn/k"):
    bad = jax.tree.map(lambda x: x, state)
    del bad["layers"][1]["attn"]["k"]
    save_hf(str(tmp_path / "d"), cfg, bad)
  with pytest.raises(ValueError, match=r"layers/0/mlp/up has shape \(32, 65\)"):
    bad = jax.tree.map(lambda x: x, state)
    bad["layers"][0]["mlp"]["up"] = np.zeros((32, 65), np.float32)
    save_hf(str(tmp_path / "e"), cfg, bad)
  with pytest.raises(ValueError, match="cannot export tokenizer"):
    save_hf(str(tmp_path / "f"), cfg, state, tokenizer=object())
  with pytest.raises(ValueError, match="ModelConfig"):
    save_hf(str(tmp_path / "g"), dict(hidden=3), state)
  assert isinstance(cfg, ModelConfig)
