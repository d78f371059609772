"""Reward-model export against `transformers`: a random reward model (decoder + head with a
nonzero bias) written by `save_hf_reward_model` loads as `AutoModelForSequenceClassification`,
and HF's score (read at the last non-pad token) + config.json's `agent_rl_score_bias` equals
our head applied at each row's last valid token, for right-padded rows of different lengths;
qwen2 (tied embeddings) and llama (an untied LM head, which is not written)."""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl import models
from agent_rl.models.hf_export import SCORE_BIAS_KEY, save_hf_reward_model
from agent_rl.reward.model import reward_model_factory

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PAD = 0
CFGS = {
    "qwen2": models.get_preset("tiny", vocab_size=50, hidden=32, num_layers=2, num_heads=4,
                               num_kv_heads=2, intermediate=64, head_dim=8, qkv_bias=True,
                               tie_embeddings=True),
    "llama": models.get_preset("tiny", vocab_size=50, hidden=32, num_layers=2, num_heads=4,
                               num_kv_heads=2, intermediate=64, head_dim=8, qkv_bias=False,
                               tie_embeddings=False),
}


def _rows():
  """Right-padded rows of lengths 9 and 6; no real token is the pad id."""
  r = np.random.default_rng(0)
  tok = r.integers(1, 50, (2, 9)).astype(np.int32)
  valid = np.ones((2, 9), bool)
  valid[1, 6:] = False
  tok[~valid] = PAD
  return tok, valid


def _ours(model, tok, valid) -> np.ndarray:
  """Our score: the decoder's final hidden states, the head at the last valid token."""
  pos = np.where(valid, np.cumsum(valid, axis=1) - 1, 0).astype(np.int32)
  _, hidden, _ = model.lm.apply(jnp.asarray(tok), jnp.asarray(pos), jnp.asarray(valid))
  return np.asarray(model.head(hidden, jnp.asarray(valid)))


@pytest.mark.parametrize("family", sorted(CFGS))
def test_reward_model_loads_as_sequence_classifier(family, tmp_path):
  cfg = CFGS[family]
  model = reward_model_factory(cfg, 5)()
  model.head.bias[...] = jnp.asarray([0.75], jnp.float32)  # HF's score layer has no bias
  params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  out = str(tmp_path / family)
  info = save_hf_reward_model(out, cfg, params["lm"], params["head"]["kernel"],
                              params["head"]["bias"], pad_token_id=PAD)
  assert info["family"] == family
  assert info["architecture"] == {"qwen2": "Qwen2ForSequenceClassification",
                                  "llama": "LlamaForSequenceClassification"}[family]
  with open(os.path.join(out, "config.json")) as f:
    hc = json.load(f)
  assert hc["pad_token_id"] == PAD and hc[SCORE_BIAS_KEY] == pytest.approx(0.75)
  hf = transformers.AutoModelForSequenceClassification.from_pretrained(
      out, dtype=torch.float32).eval()
  assert hf.config.num_labels == 1
  assert not any(k.startswith("lm_head") for k in hf.state_dict())
  tok, valid = _rows()
  with torch.no_grad():
    logits = hf(input_ids=torch.tensor(tok, dtype=torch.long),
                attention_mask=torch.tensor(valid, dtype=torch.long)).logits.numpy()[:, 0]
  want = _ours(model, tok, valid)
  np.testing.assert_allclose(logits + hc[SCORE_BIAS_KEY], want, atol=1e-4, rtol=0)
  assert abs(want[0] - want[1]) > 1e-3  # different rows, different scores: a real check


def test_head_of_another_width_is_refused(tmp_path):
  cfg = CFGS["qwen2"]
  params = nnx.to_pure_dict(nnx.state(reward_model_factory(cfg, 0)(), nnx.Param))
  with pytest.raises(ValueError, match="hidden is 32"):
    save_hf_reward_model(str(tmp_path / "x"), cfg, params["lm"], np.zeros((16, 1)),
                         np.zeros(1), pad_token_id=PAD)
