"""Model configuration for the policy decoder (Qwen2/Qwen2.5, Llama-3, Qwen3, Gemma 3).

`ModelConfig` is a frozen, hashable dataclass (it lives inside NNX graphdefs, which jit treats
as static), validated at construction: a wrong type or value raises a ValueError naming the
field. Llama-3 rope scaling follows Meta's Llama 3.1 release (Dubey et al., 2024, "The Llama 3
Herd of Models") as implemented by `transformers`' `_compute_llama3_parameters`. Qwen3
(Yang et al., 2025, arXiv:2505.09388) and Gemma 3 (Gemma Team, 2025, arXiv:2503.19786) are
switches on the same decoder (q/k norm, (1 + w) norms, sandwich norms, GeGLU, sliding layers).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Tuple

import jax.numpy as jnp
import numpy as np

DTYPES = ("float32", "bfloat16", "float16")
LAYER_TYPES = ("full", "sliding")
# Rematerialization of the full (training) forward: none, or each decoder block recomputed in
# the backward (jax.checkpoint), keeping only the residual stream between blocks.
REMAT = ("none", "block")
# How a process computes with a model, not what the model is (ModelConfig.computing_as).
COMPUTE_FIELDS = ("remat", "prefill_chunk", "attention_block")


class _Scaling:
  """Shared by the rope-scaling types: dict-like access and the HF form."""
  rope_type = ""

  def __getitem__(self, key: str) -> Any:
    if key not in self.as_dict():
      raise KeyError(f"rope_scaling has no field {key!r}")
    return getattr(self, key)

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)

  def hf_dict(self) -> dict:
    """The `transformers` form: the fields plus `rope_type`."""
    return {"rope_type": self.rope_type, **self.as_dict()}

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]):
    d = dict(d)
    rope_type = d.pop("rope_type", d.pop("type", cls.rope_type))
    if rope_type != cls.rope_type:
      raise ValueError(f"rope_scaling.rope_type {rope_type!r} does not match {cls.rope_type!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    missing = sorted(names - set(d))
    if unknown:
      raise ValueError(f"rope_scaling has unknown keys {unknown}; expected {sorted(names)}")
    if missing:
      raise ValueError(f"rope_scaling is missing keys {missing}")
    return cls(**d)


def _check_positive(name: str, v) -> float:
  if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
    raise ValueError(f"rope_scaling.{name} must be a positive number, got {v!r}")
  return float(v)


@dataclasses.dataclass(frozen=True)
class RopeScaling(_Scaling):
  """Llama-3 rope scaling (`rope_type: llama3`); indexable like the HF dict it comes from."""
  rope_type = "llama3"
  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_position_embeddings: int

  def __post_init__(self):
    for f in ("factor", "low_freq_factor", "high_freq_factor"):
      object.__setattr__(self, f, _check_positive(f, getattr(self, f)))
    if self.high_freq_factor <= self.low_freq_factor:
      raise ValueError("rope_scaling.high_freq_factor must exceed rope_scaling.low_freq_factor, "
                       f"got {self.high_freq_factor} <= {self.low_freq_factor}")
    o = self.original_max_position_embeddings
    if isinstance(o, bool) or not isinstance(o, int) or o <= 0:
      raise ValueError(f"rope_scaling.original_max_position_embeddings must be a positive int, got {o!r}")

  def scale(self, inv: np.ndarray) -> np.ndarray:
    """inv_freq [D/2] float32 -> scaled, as `transformers` `_compute_llama3_parameters`."""
    # Llama 3.1: long wavelengths are divided by `factor`, short ones kept, and the band in
    # between interpolated smoothly.
    old = self.original_max_position_embeddings
    low_wavelen = old / self.low_freq_factor
    high_wavelen = old / self.high_freq_factor
    wavelen = (2 * np.pi / inv).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv / self.factor, inv).astype(np.float32)
    smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
    smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class LinearRopeScaling(_Scaling):
  """Position interpolation (Chen et al., 2023, arXiv:2306.15595), `rope_type: linear`:
  every inverse frequency divided by `factor` (Gemma 3 4B's global layers use 8)."""
  rope_type = "linear"
  factor: float

  def __post_init__(self):
    object.__setattr__(self, "factor", _check_positive("factor", self.factor))

  def scale(self, inv: np.ndarray) -> np.ndarray:
    return (inv / np.float32(self.factor)).astype(np.float32)


ROPE_SCALINGS = {c.rope_type: c for c in (RopeScaling, LinearRopeScaling)}


def rope_scaling_from_dict(d: Mapping[str, Any]) -> RopeScaling:
  """An HF rope-scaling dict -> its RopeScaling class (a missing rope_type means llama3)."""
  rope_type = d.get("rope_type", d.get("type", "llama3"))
  if rope_type not in ROPE_SCALINGS:
    raise ValueError(f"rope_scaling.rope_type {rope_type!r} is not supported "
                     f"(supported: {', '.join(sorted(ROPE_SCALINGS))})")
  return ROPE_SCALINGS[rope_type].from_dict(d)


def _is_int(v) -> bool:
  return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder hyperparameters. Defaults are the `tiny` preset (Qwen2-style, runs on one CPU).

  Attributes:
    vocab_size, hidden, num_layers, num_heads, num_kv_heads, head_dim, intermediate: sizes
      (V, E, number of blocks, H, KVH, D, MLP width). num_heads % num_kv_heads == 0 (GQA).
    rope_theta: RoPE base. rope_scaling: None, a dict (`rope_type` 'llama3' (default) or
      'linear') or a RopeScaling/LinearRopeScaling; applies to the full-attention layers.
    rms_eps: RMSNorm epsilon. tie_embeddings: lm_head = embedding^T. qkv_bias: Qwen2 biases.
    dtype: compute dtype; param_dtype: storage dtype ('float32' | 'bfloat16' | 'float16').
    Qwen3 / Gemma 3 switches (defaults are Qwen2/Llama):
    qk_norm: RMSNorm over head_dim on q and k before RoPE (Qwen3, Gemma 3).
    norm_plus_one: every RMSNorm scales by (1 + w), w stored zero-centred (Gemma).
    post_norms: extra RMSNorms on the attention and MLP outputs before each residual add
      (Gemma 3's post_attention / post_feedforward norms; then `mlp_norm` is the pre-MLP one).
    embed_scale: token embeddings multiplied by sqrt(hidden) (Gemma; the tied head is not).
    mlp_activation: gate activation of the GLU MLP, a name in `layers.ACTIVATIONS`
      ('silu' = SwiGLU, 'gelu_tanh' = GeGLU with tanh-approximate GELU).
    query_pre_attn_scalar: queries scaled by its -1/2 power (None: head_dim ** -0.5).
    sliding_window: W, a sliding layer's query at position p sees keys at positions
      p - W < q <= p (positions, not slots, so padding inside a cache does not use it up).
    layer_types: None or a cycle of 'full' / 'sliding' (layer i has type
      layer_types[i % len]); None means all 'sliding' when sliding_window is set, else 'full'.
    rope_local_theta: RoPE base of the sliding layers, without rope_scaling (Gemma 3's
      rope_local_base_freq); None: the sliding layers use rope_theta and rope_scaling too.
    lora: None, or a `lora.LoraConfig` / its dict: the model then carries LoRA adapters.
    remat: 'none' | 'block' (`REMAT`): recompute each block's activations in the backward.
    prefill_chunk: tokens per row of a cached block (`prefill`: a rollout's window, an
      evaluation's prompt) that go through all layers at once: a longer block is written
      in chunks of at most this many, so its scores are [B, heads, chunk, S] and its MLP
      [B, chunk, F], not [B, heads, L, S] and [B, L, F]; 0 writes the whole block at once.
      Changes memory and speed, not values.
    attention_block: keys per block of the training (full) path's attention
      (`blocked_attention`: saves each row's output and log-sum-exp, not its [heads, L, L]
      probabilities); 0: the dense core. Changes memory and speed, not values.
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
  qk_norm: bool = False
  norm_plus_one: bool = False
  post_norms: bool = False
  embed_scale: bool = False
  mlp_activation: str = "silu"
  query_pre_attn_scalar: Optional[float] = None
  sliding_window: Optional[int] = None
  layer_types: Optional[Tuple[str, ...]] = None
  rope_local_theta: Optional[float] = None
  lora: Optional[Any] = None
  remat: str = "none"
  prefill_chunk: int = 256
  attention_block: int = 0

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
    for f in ("tie_embeddings", "qkv_bias", "qk_norm", "norm_plus_one", "post_norms",
              "embed_scale"):
      if not isinstance(getattr(self, f), (bool, np.bool_)):
        raise ValueError(f"ModelConfig.{f} must be a bool, got {getattr(self, f)!r}")
      object.__setattr__(self, f, bool(getattr(self, f)))
    rs = self.rope_scaling
    if rs is not None and not isinstance(rs, _Scaling):
      if not isinstance(rs, Mapping):
        raise ValueError(f"ModelConfig.rope_scaling must be None or a dict, got {rs!r}")
      object.__setattr__(self, "rope_scaling", rope_scaling_from_dict(rs))
    self._check_families()
    for f in ("dtype", "param_dtype"):
      v = getattr(self, f)
      try:
        name = jnp.dtype(v).name
      except TypeError:
        name = None
      if name not in DTYPES:
        raise ValueError(f"ModelConfig.{f} must be one of {DTYPES}, got {v!r}")
      object.__setattr__(self, f, name)
    if self.remat not in REMAT:
      raise ValueError(f"ModelConfig.remat must be one of {REMAT}, got {self.remat!r}")
    for f, zero in (("prefill_chunk", "the whole block"), ("attention_block", "the dense core")):
      v = getattr(self, f)
      if not _is_int(v) or v < 0:
        raise ValueError(f"ModelConfig.{f} must be an int >= 0 (0: {zero}), got {v!r}")
      object.__setattr__(self, f, int(v))

  def prefill_chunks(self, length: int) -> Tuple[int, int]:
    """(n, c): a cached block of `length` tokens is written in n chunks of c tokens a row,
    n = ceil(length / prefill_chunk) and c = ceil(length / n) <= prefill_chunk (balanced:
    1,093 tokens at 256 are 5 x 219, not 4 x 256 + 69); (1, length) when it fits or at 0."""
    if self.prefill_chunk <= 0 or length <= self.prefill_chunk:
      return 1, length
    n = -(-length // self.prefill_chunk)
    return n, -(-length // n)

  def computing_as(self, other: "ModelConfig") -> "ModelConfig":
    """This model computed as `other` is (its COMPUTE_FIELDS): a run loading another run's
    or a HF checkpoint's weights keeps its own remat, prefill chunks and attention blocks, which change memory
    and time, not the model, so they never make two configs differ."""
    return dataclasses.replace(self, **{f: getattr(other, f) for f in COMPUTE_FIELDS})

  def _check_families(self):
    """Validates the Qwen3 / Gemma 3 fields (see the class docstring)."""
    from agent_rl.models.layers import ACTIVATIONS  # layers imports nothing from here
    from agent_rl.models.lora import LoraConfig
    lc = self.lora
    if lc is not None and not isinstance(lc, LoraConfig):
      if not isinstance(lc, Mapping):
        raise ValueError(f"ModelConfig.lora must be None, a LoraConfig or a dict, got {lc!r}")
      object.__setattr__(self, "lora", LoraConfig.from_dict(lc))
    if self.mlp_activation not in ACTIVATIONS:
      raise ValueError(f"ModelConfig.mlp_activation must be one of {ACTIVATIONS.names()}, "
                       f"got {self.mlp_activation!r}")
    for f in ("query_pre_attn_scalar", "rope_local_theta"):
      v = getattr(self, f)
      if v is not None:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not v > 0:
          raise ValueError(f"ModelConfig.{f} must be None or a positive number, got {v!r}")
        object.__setattr__(self, f, float(v))
    w = self.sliding_window
    if w is not None and (not _is_int(w) or w <= 0):
      raise ValueError(f"ModelConfig.sliding_window must be None or a positive int, got {w!r}")
    lt = self.layer_types
    if lt is not None:
      if isinstance(lt, str) or not isinstance(lt, (tuple, list)) or not lt or any(
          t not in LAYER_TYPES for t in lt):
        raise ValueError(f"ModelConfig.layer_types must be a non-empty sequence of "
                         f"{LAYER_TYPES}, got {lt!r}")
      object.__setattr__(self, "layer_types", tuple(lt))
      if "sliding" in lt and w is None:
        raise ValueError("ModelConfig.layer_types has 'sliding' layers but sliding_window is None")

  def layer_type(self, i: int) -> str:
    """'full' or 'sliding' for layer i (see `layer_types`)."""
    if self.layer_types is None:
      return "sliding" if self.sliding_window is not None else "full"
    return self.layer_types[i % len(self.layer_types)]

  @property
  def has_sliding(self) -> bool:
    return any(self.layer_type(i) == "sliding" for i in range(self.num_layers))

  @property
  def query_scale(self) -> float:
    return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

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
    attn += 2 * d if self.qk_norm else 0
    block = attn + 3 * e * m + (4 if self.post_norms else 2) * e
    head = 0 if self.tie_embeddings else e * v
    if self.lora is not None:  # r * (in + out) per adapted projection
      sizes = dict(q=(e, h * d), k=(e, k * d), v=(e, k * d), o=(h * d, e), gate=(e, m),
                   up=(e, m), down=(m, e))
      block += sum(self.lora.rank * sum(sizes[t]) for t in self.lora.targets)
    return v * e + self.num_layers * block + e + head


def rope_inv_freq(cfg: ModelConfig, layer_type: str = "full") -> np.ndarray:
  """Inverse frequencies [D/2] float32 of a 'full' or 'sliding' layer, computed as HF does
  (float32; rope_scaling on the full layers, and on the sliding ones unless rope_local_theta)."""
  if layer_type not in LAYER_TYPES:
    raise ValueError(f"layer_type must be one of {LAYER_TYPES}, got {layer_type!r}")
  local = layer_type == "sliding" and cfg.rope_local_theta is not None
  theta = cfg.rope_local_theta if local else cfg.rope_theta
  d = cfg.head_dim
  inv = (1.0 / (np.float32(theta) ** (np.arange(0, d, 2, dtype=np.int64)
                                         .astype(np.float32) / np.float32(d))))
  inv = inv.astype(np.float32)
  if cfg.rope_scaling is None or local:
    return inv
  return cfg.rope_scaling.scale(inv)
