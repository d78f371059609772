"""HF import parity against `transformers` (CPU torch) on tiny random Qwen2 / Llama configs."""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from agent_rl.models import load_hf
from agent_rl.models.hf_import import config_from_hf

from hf_util import hf_logits, our_logits, randomize

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128)


def _save(tmp_path, family, seed=0, **kw):
  cls = {"qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
         "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}[family]
  cfg = cls[0](**{**SIZES, **kw})
  torch.manual_seed(seed)
  model = randomize(cls[1](cfg).eval(), seed)
  path = str(tmp_path / family)
  model.save_pretrained(path)
  return model, path


TOKENS = np.random.default_rng(0).integers(0, SIZES["vocab_size"], (3, 9))
LEFT_MASK = np.array([[1] * 9, [0] * 3 + [1] * 6, [0] * 5 + [1] * 4])

CASES = {
    "qwen2_untied": ("qwen2", dict(tie_word_embeddings=False, rope_theta=10000.0)),
    "llama3_scaled_tied": ("llama", dict(tie_word_embeddings=True, rope_theta=500000.0,
                                         rope_scaling=dict(rope_type="llama3", factor=8.0,
                                                           low_freq_factor=1.0,
                                                           high_freq_factor=4.0,
                                                           original_max_position_embeddings=16))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(tmp_path, case):
  family, kw = CASES[case]
  hf, path = _save(tmp_path, family, **kw)
  ours = load_hf(path)
  full = np.ones_like(TOKENS)
  # Plain call: positions arange, all valid.
  got = np.asarray(jax.jit(lambda s, t: nnx.merge(nnx.graphdef(ours), s)(t))(
      nnx.state(ours), jnp.asarray(TOKENS, jnp.int32)))
  np.testing.assert_allclose(got, hf_logits(hf, TOKENS, full), atol=1e-4, rtol=0)
  # Left-padded batch with attention mask (positions = cumsum(mask) - 1 as HF generate).
  m = LEFT_MASK.astype(bool)
  np.testing.assert_allclose(our_logits(ours, TOKENS, LEFT_MASK)[m],
                             hf_logits(hf, TOKENS, LEFT_MASK)[m], atol=1e-4, rtol=0)


def test_sharded_checkpoint_and_bf16(tmp_path):
  hf, _ = _save(tmp_path, "qwen2", tie_word_embeddings=True)
  path = str(tmp_path / "sharded")
  hf.save_pretrained(path, max_shard_size="20KB")
  assert os.path.exists(os.path.join(path, "model.safetensors.index.json"))
  ours = load_hf(path)
  full = np.ones_like(TOKENS)
  np.testing.assert_allclose(our_logits(ours, TOKENS, full), hf_logits(hf, TOKENS, full), atol=1e-4)
  ours16 = load_hf(path, dtype=jnp.bfloat16)
  assert nnx.state(ours16)["embed"]["embedding"].get_value().dtype == jnp.bfloat16
  p16 = jax.nn.softmax(our_logits(ours16, TOKENS, full))
  p32 = jax.nn.softmax(hf_logits(hf, TOKENS, full))
  assert float(np.abs(p16 - p32).max()) < 0.05


def test_v4_style_config_json(tmp_path):
  _, path = _save(tmp_path, "llama", rope_theta=500000.0, rope_scaling=dict(
      rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
      original_max_position_embeddings=16))
  with open(os.path.join(path, "config.json")) as f:
    hf = json.load(f)
  params = hf.pop("rope_parameters")
  hf["rope_theta"] = params.pop("rope_theta")
  hf["rope_scaling"] = params
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf, f)
  cfg, family = config_from_hf(path)
  assert family.name == "llama" and cfg.rope_theta == 500000.0
  assert cfg.rope_scaling.original_max_position_embeddings == 16 and not cfg.qkv_bias


def _rewrite(path, fn):
  f = os.path.join(path, "model.safetensors")
  tensors = load_file(f)
  fn(tensors)
  save_file(tensors, f)


def test_checkpoint_errors_name_the_key(tmp_path):
  _, src = _save(tmp_path, "qwen2", tie_word_embeddings=False)
  key = "model.layers.1.self_attn.k_proj.weight"

  def case(name, fn):
    path = str(tmp_path / name)
    shutil.copytree(src, path)
    _rewrite(path, fn)
    return path

  with pytest.raises(ValueError, match=r"missing 'model\.layers\.1\.self_attn\.k_proj\.weight'"):
    load_hf(case("missing", lambda t: t.pop(key)))
  with pytest.raises(ValueError, match=r"k_proj\.weight' has shape \(16, 33\), expected \(16, 32\)"):
    load_hf(case("shape", lambda t: t.__setitem__(key, np.zeros((16, 33), np.float32))))
  with pytest.raises(ValueError, match="unexpected keys.*extra.weight"):
    load_hf(case("extra", lambda t: t.__setitem__("extra.weight", np.zeros(3, np.float32))))
  with pytest.raises(ValueError, match="config.json"):
    load_hf(str(tmp_path))
  pickled = str(tmp_path / "pickled")
  os.makedirs(pickled)
  shutil.copy(os.path.join(src, "config.json"), pickled)
  open(os.path.join(pickled, "pytorch_model.bin"), "wb").close()
  with pytest.raises(ValueError, match="pickle checkpoints are not read"):
    load_hf(pickled)
  cfg_path = case("gemma", lambda t: None)
  with open(os.path.join(cfg_path, "config.json")) as f:
    hf = json.load(f)
  hf["model_type"] = "gemma"
  with open(os.path.join(cfg_path, "config.json"), "w") as f:
    json.dump(hf, f)
  with pytest.raises(KeyError, match="llama, qwen2"):
    load_hf(cfg_path)


def test_bad_directories_name_the_file_and_key(tmp_path):
  _, src = _save(tmp_path, "qwen2", tie_word_embeddings=True)

  def variant(name, edit_config=None, remove=(), add=()):
    path = str(tmp_path / name)
    shutil.copytree(src, path)
    for f in remove:
      os.remove(os.path.join(path, f))
    for f in add:
      open(os.path.join(path, f), "wb").close()
    if edit_config is not None:
      with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
      edit_config(hf)
      with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf, f)
    return path

  with pytest.raises(ValueError, match=r"pytorch_model\.bin.*safetensors"):
    load_hf(variant("bin", remove=["model.safetensors"], add=["pytorch_model.bin"]))
  with pytest.raises(ValueError, match=r"model\.pt.*never loaded"):
    load_hf(variant("pt", remove=["model.safetensors"], add=["model.pt"]))
  with pytest.raises(ValueError, match=r"config\.json: architectures \['Qwen2ForSequenceClass"):
    load_hf(variant("arch", lambda hf: hf.__setitem__(
        "architectures", ["Qwen2ForSequenceClassification"])))
  with pytest.raises(ValueError, match=r"config\.json: key 'model_type' is missing"):
    load_hf(variant("no_type", lambda hf: hf.pop("model_type")))
  with pytest.raises(ValueError, match=r"config\.json is missing 'hidden_size'"):
    load_hf(variant("no_hidden", lambda hf: hf.pop("hidden_size")))
  with pytest.raises(ValueError, match=r"config\.json: .*hidden_act 'gelu'"):
    load_hf(variant("act", lambda hf: hf.__setitem__("hidden_act", "gelu")))
  with pytest.raises(ValueError, match=r"config\.json: .*rope_type 'yarn'"):
    load_hf(variant("rope", lambda hf: hf.__setitem__(
        "rope_parameters", {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4})))
  broken = variant("json")
  with open(os.path.join(broken, "config.json"), "w") as f:
    f.write("{not json")
  with pytest.raises(ValueError, match=r"config\.json is not valid JSON"):
    load_hf(broken)
  with pytest.raises(ValueError, match="does not exist"):
    load_hf(str(tmp_path / "nowhere"))
  # A sharded index whose shard file is gone: names the index, the shard and a key.
  hf, _ = _save(tmp_path, "llama")
  sharded = str(tmp_path / "sharded")
  hf.save_pretrained(sharded, max_shard_size="20KB")
  shard = sorted(f for f in os.listdir(sharded) if f.startswith("model-"))[-1]
  os.remove(os.path.join(sharded, shard))
  with pytest.raises(ValueError, match=rf"index\.json: shard '{shard}' \(of '\w"):
    load_hf(sharded)
