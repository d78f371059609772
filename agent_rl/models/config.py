"""Model configuration for the policy decoder (Qwen2/Qwen2.5, Llama-3 families).

`ModelConfig` is a frozen, hashable dataclass (it lives inside NNX graphdefs, which jit treats
as static), validated at construction: a wrong type or value raises a ValueError naming the
field. Llama-3 rope scaling follows Meta's Llama 3.1 release (Dubey et al., 2024, "The Llama 3
Herd of Models") as implemented by `transformers`' `_compute_llama3_parameters`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import jax.numpy as jnp
import numpy as np

DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Llama-3 rope scaling (`rope_type: llama3`); indexable like the HF dict it comes from."""
  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_position_embeddings: int

  def __post_init__(self):
    for f in ("factor", "low_freq_factor", "high_freq_factor"):
      v = getattr(self, f)
      if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ValueError(f"rope_scaling.{f} must be a positive number, got {v!r}")
      object.__setattr__(self, f, float(v))
    if self.high_freq_factor <= self.low_freq_factor:
      raise ValueError("rope_scaling.high_freq_factor must exceed rope_scaling.low_freq_factor, "
                       f"got {self.high_freq_factor} <= {self.low_freq_factor}")
    o = self.original_max_position_embeddings
    if isinstance(o, bool) or not isinstance(o, int) or o <= 0:
      raise ValueError(f"rope_scaling.original_max_position_embeddings must be a positive int, got {o!r}")

  def __getitem__(self, key: str) -> Any:
    if key not in self.as_dict():
      raise KeyError(f"rope_scaling has no field {key!r}")
    return getattr(self, key)

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "RopeScaling":
    d = dict(d)
    rope_type = d.pop("rope_type", d.pop("type", "llama3"))
    if rope_type != "llama3":
      raise ValueError(f"rope_scaling.rope_type {rope_type!r} is not supported (only 'llama3')")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    missing = sorted(names - set(d))
    if unknown:
      raise ValueError(f"rope_scaling has unknown keys {unknown}; expected {sorted(names)}")
    if missing:
      raise ValueError(f"rope_scaling is missing keys {missing}")
    return cls(**d)


def _is_int(v) -> bool:
  return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder hyperparameters. Defaults are the `tiny` preset (Qwen2-style, runs on one CPU).

  Attributes:
    vocab_size, hidden, num_layers, num_heads, num_kv_heads, head_dim, intermediate: sizes
      (V, E, number of blocks, H, KVH, D, MLP width). num_heads % num_kv_heads == 0 (GQA).
    rope_theta: RoPE base. rope_scaling: None or a Llama-3 dict/RopeScaling.
    rms_eps: RMSNorm epsilon. tie_embeddings: lm_head = embedding^T. qkv_bias: Qwen2 biases.
    dtype: compute dtype; param_dtype: storage dtype ('float32' | 'bfloat16' | 'float16').
  """
  vocab_size: int = 4096
  hidden: int = 256
  num_layers: int = 4
  num_heads: int = 4
  num_kv_heads: int = 2
  head_dim: int = 64
  intermediate: int = 1024
  rope_theta: float = 1_000_000.0
  rope_scaling: Optional[Any] = None
  rms_eps: float = 1e-6
  tie_embeddings: bool = True
  qkv_bias: bool = True
  dtype: Any = "float32"
  param_dtype: Any = "float32"

  def __post_init__(self):
    for f in ("vocab_size", "hidden", "num_layers", "num_heads", "num_kv_heads", "head_dim",
              "intermediate"):
      v = getattr(self, f)
      if not _is_int(v) or v <= 0:
        raise ValueError(f"ModelConfig.{f} must be a positive int, got {v!r}")
      object.__setattr__(self, f, int(v))
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"ModelConfig.num_kv_heads ({self.num_kv_heads}) must divide "
                       f"num_heads ({self.num_heads})")
    if self.head_dim % 2:
      raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")
    for f in ("rope_theta", "rms_eps"):
      v = getattr(self, f)
      if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not v > 0:
        raise ValueError(f"ModelConfig.{f} must be a positive number, got {v!r}")
      object.__setattr__(self, f, float(v))
    for f in ("tie_embeddings", "qkv_bias"):
      if not isinstance(getattr(self, f), (bool, np.bool_)):
        raise ValueError(f"ModelConfig.{f} must be a bool, got {getattr(self, f)!r}")
      object.__setattr__(self, f, bool(getattr(self, f)))
    rs = self.rope_scaling
    if rs is not None and not isinstance(rs, RopeScaling):
      if not isinstance(rs, Mapping):
        raise ValueError(f"ModelConfig.rope_scaling must be None or a dict, got {rs!r}")
      object.__setattr__(self, "rope_scaling", RopeScaling.from_dict(rs))
    for f in ("dtype", "param_dtype"):
      v = getattr(self, f)
      try:
        name = jnp.dtype(v).name
      except TypeError:
        name = None
      if name not in DTYPES:
        raise ValueError(f"ModelConfig.{f} must be one of {DTYPES}, got {v!r}")
      object.__setattr__(self, f, name)

  @property
  def compute_dtype(self) -> jnp.dtype:
    return jnp.dtype(self.dtype)

  @property
  def params_dtype(self) -> jnp.dtype:
    return jnp.dtype(self.param_dtype)

  @property
  def num_groups(self) -> int:
    """Query heads per KV head (GQA group size G = H / KVH)."""
    return self.num_heads // self.num_kv_heads

  def replace(self, **overrides) -> "ModelConfig":
    """A copy with `overrides` applied (validated); unknown fields raise a ValueError."""
    names = {f.name for f in dataclasses.fields(self)}
    unknown = sorted(set(overrides) - names)
    if unknown:
      raise ValueError(f"unknown ModelConfig fields {unknown}; known: {sorted(names)}")
    return dataclasses.replace(self, **overrides)

  def num_params(self) -> int:
    """Parameter count (embeddings counted once when tied)."""
    e, d, h, k, m, v = (self.hidden, self.head_dim, self.num_heads, self.num_kv_heads,
                        self.intermediate, self.vocab_size)
    attn = e * d * (2 * h + 2 * k) + (d * (h + 2 * k) if self.qkv_bias else 0)
    block = attn + 3 * e * m + 2 * e
    head = 0 if self.tie_embeddings else e * v
    return v * e + self.num_layers * block + e + head


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
  """Inverse frequencies [D/2] float32, computed as HF does (float32, Llama-3 scaling)."""
  d = cfg.head_dim
  inv = (1.0 / (np.float32(cfg.rope_theta) ** (np.arange(0, d, 2, dtype=np.int64)
                                                  .astype(np.float32) / np.float32(d))))
  inv = inv.astype(np.float32)
  rs = cfg.rope_scaling
  if rs is None:
    return inv
  # Llama 3.1: long wavelengths are divided by `factor`, short ones kept, and the band in
  # between interpolated smoothly (transformers `_compute_llama3_parameters`).
  old = rs.original_max_position_embeddings
  low_wavelen = old / rs.low_freq_factor
  high_wavelen = old / rs.high_freq_factor
  wavelen = (2 * np.pi / inv).astype(np.float32)
  scaled = np.where(wavelen > low_wavelen, inv / rs.factor, inv).astype(np.float32)
  smooth = (old / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
  smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled
  medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
  return np.where(medium, smoothed, scaled).astype(np.float32)
