"""`agent_rl.export.export_policy` on a LoRA policy, at the library level (the learner's LoRA
wiring is tested elsewhere; the run-level CLI is tests/train/test_pretrained_e2e.py):
`merged` loads in `transformers` with the adapted logits, `adapter` loads with
`peft.PeftModel.from_pretrained` onto the base with the same logits."""
import json
import os

import numpy as np
import pytest
from flax import nnx

from agent_rl import export
from agent_rl.models import Transformer, load_hf, lora

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

TOKENS = np.random.default_rng(0).integers(0, 97, (2, 11))


def _hf_logits(model) -> np.ndarray:
  with torch.no_grad():
    return model(torch.tensor(TOKENS, dtype=torch.long)).logits.numpy()


@pytest.fixture(scope="module")
def lora_policy(tmp_path_factory):
  """(base HF dir, cfg with lora, params with nonzero adapters, our logits [2, 11, 97])."""
  path = str(tmp_path_factory.mktemp("base") / "qwen2")
  torch.manual_seed(0)
  hf_cfg = transformers.Qwen2Config(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=64, tie_word_embeddings=True)
  transformers.Qwen2ForCausalLM(hf_cfg).save_pretrained(path)
  base = load_hf(path)
  cfg = base.cfg.replace(lora=dict(rank=4, alpha=8.0, targets=("q", "v", "o", "up", "down")))
  state = nnx.to_pure_dict(lora.attach(cfg, nnx.state(base, nnx.Param)))
  rng = np.random.default_rng(1)
  flat = nnx.traversals.flatten_mapping(state)
  for p in flat:  # B starts at zero, which would test nothing
    if "lora" in str(p[-1]):
      flat[p] = (0.3 * rng.standard_normal(flat[p].shape)).astype(np.float32)
  state = nnx.traversals.unflatten_mapping(flat)
  model = nnx.merge(nnx.graphdef(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))),
                    lora._to_state(cfg, state))
  ours = np.asarray(model(TOKENS))
  assert np.abs(ours - np.asarray(base(TOKENS))).max() > 1e-2  # the adapters matter
  return path, cfg, state, ours


def test_merged_loads_in_transformers(lora_policy, tmp_path):
  path, cfg, state, ours = lora_policy
  out = str(tmp_path / "merged")
  info = export.export_policy(out, cfg, state, lora_mode="merged")
  assert info["family"] == "qwen2" and "model.safetensors" in info["files"]
  loaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
  np.testing.assert_allclose(_hf_logits(loaded), ours, atol=1e-4, rtol=0)


def test_adapter_loads_in_peft(lora_policy, tmp_path):
  path, cfg, state, ours = lora_policy
  out = str(tmp_path / "adapter")
  info = export.export_policy(out, cfg, state, lora_mode="adapter", base=path)
  assert sorted(info["files"]) == ["adapter_config.json", "adapter_model.safetensors"]
  with open(os.path.join(out, "adapter_config.json")) as f:
    ac = json.load(f)
  assert ac["base_model_name_or_path"] == path and ac["r"] == 4
  assert ac["target_modules"] == ["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
  fresh = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
  loaded = peft.PeftModel.from_pretrained(fresh, out).eval()
  np.testing.assert_allclose(_hf_logits(loaded), ours, atol=1e-4, rtol=0)
  # The adapter holds only the LoRA weights: 2 layers x 5 targets x (A, B).
  assert info["num_params"] == sum(
      np.asarray(v).size for p, v in nnx.traversals.flatten_mapping(state).items()
      if "lora" in str(p[-1]))


def test_bad_modes_name_the_flag(lora_policy, tmp_path):
  path, cfg, state, _ = lora_policy
  with pytest.raises(ValueError, match="--lora must be one of"):
    export.export_policy(str(tmp_path / "x"), cfg, state, lora_mode="both")
  base_cfg, base_state = lora.merge(cfg, state)
  with pytest.raises(ValueError, match="no LoRA adapters"):
    export.export_policy(str(tmp_path / "y"), base_cfg, base_state, lora_mode="adapter")
