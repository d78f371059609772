"""Named model presets: small deltas over the one base `ModelConfig()` (= `tiny`).

Hyperparameters are those of the public Hugging Face `config.json` of each checkpoint
(Qwen2.5: Qwen Team, 2024, arXiv:2412.15115; Llama 3.x: Dubey et al., 2024, arXiv:2407.21783;
Qwen3: Yang et al., 2025, arXiv:2505.09388; Gemma 3: Gemma Team, 2025, arXiv:2503.19786, the
text decoder of the 4B model). Gemma 3 alternates five sliding-window layers with one global
layer (`layer_types` is that 6-cycle, so `num_layers` overrides keep the pattern).
"""
from __future__ import annotations

import types
from typing import Mapping

from agent_rl.models.config import ModelConfig

_BASE = ModelConfig()

# Family-level deltas, shared by the sizes below.
_QWEN25 = dict(rope_theta=1_000_000.0, rms_eps=1e-6, qkv_bias=True, head_dim=128)
_LLAMA3 = dict(vocab_size=128256, rope_theta=500_000.0, rms_eps=1e-5, qkv_bias=False,
               num_kv_heads=8, intermediate=8192,
               rope_scaling=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=8192))
_QWEN3 = dict(vocab_size=151936, rope_theta=1_000_000.0, rms_eps=1e-6, qkv_bias=False,
              qk_norm=True, head_dim=128, num_kv_heads=8)
_GEMMA3 = dict(qkv_bias=False, qk_norm=True, norm_plus_one=True, post_norms=True,
               embed_scale=True, mlp_activation="gelu_tanh", head_dim=256,
               query_pre_attn_scalar=256.0, rope_theta=1_000_000.0, rope_local_theta=10_000.0,
               layer_types=("sliding",) * 5 + ("full",), rms_eps=1e-6, tie_embeddings=True)

_DELTAS: Mapping[str, dict] = {
    "tiny": {},
    "qwen2.5-0.5b": dict(_QWEN25, vocab_size=151936, hidden=896, num_layers=24, num_heads=14,
                         num_kv_heads=2, head_dim=64, intermediate=4864, tie_embeddings=True),
    "qwen2.5-1.5b": dict(_QWEN25, vocab_size=151936, hidden=1536, num_layers=28, num_heads=12,
                         num_kv_heads=2, intermediate=8960, tie_embeddings=True),
    "qwen2.5-7b": dict(_QWEN25, vocab_size=152064, hidden=3584, num_layers=28, num_heads=28,
                       num_kv_heads=4, intermediate=18944, tie_embeddings=False),
    "llama-3.2-1b": dict(_LLAMA3, hidden=2048, num_layers=16, num_heads=32, head_dim=64,
                         tie_embeddings=True),
    "llama-3.2-3b": dict(_LLAMA3, hidden=3072, num_layers=28, num_heads=24, head_dim=128,
                         tie_embeddings=True),
    "llama-3.1-8b": dict(_LLAMA3, hidden=4096, num_layers=32, num_heads=32, head_dim=128,
                         intermediate=14336, tie_embeddings=False,
                         rope_scaling=dict(_LLAMA3["rope_scaling"], factor=8.0)),
    "qwen3-0.6b": dict(_QWEN3, hidden=1024, num_layers=28, num_heads=16, intermediate=3072,
                       tie_embeddings=True),
    "qwen3-1.7b": dict(_QWEN3, hidden=2048, num_layers=28, num_heads=16, intermediate=6144,
                       tie_embeddings=True),
    "qwen3-4b": dict(_QWEN3, hidden=2560, num_layers=36, num_heads=32, intermediate=9728,
                     tie_embeddings=True),
    "qwen3-8b": dict(_QWEN3, hidden=4096, num_layers=36, num_heads=32, intermediate=12288,
                     tie_embeddings=False),
    "gemma-3-1b": dict(_GEMMA3, vocab_size=262144, hidden=1152, num_layers=26, num_heads=4,
                       num_kv_heads=1, intermediate=6912, sliding_window=512),
    "gemma-3-4b": dict(_GEMMA3, vocab_size=262208, hidden=2560, num_layers=34, num_heads=8,
                       num_kv_heads=4, intermediate=10240, sliding_window=1024,
                       rope_scaling=dict(rope_type="linear", factor=8.0)),
}

PRESETS: Mapping[str, ModelConfig] = types.MappingProxyType(
    {name: _BASE.replace(**delta) for name, delta in _DELTAS.items()})


def get_preset(name: str, **overrides) -> ModelConfig:
  """The preset `name` with `overrides` applied (e.g. `get_preset('tiny', num_layers=2)`)."""
  try:
    cfg = PRESETS[name]
  except KeyError:
    raise KeyError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
  return cfg.replace(**overrides) if overrides else cfg
