"""Import Hugging Face Qwen2 / Llama checkpoints (safetensors only, never pickle).

`load_hf(path)` reads `config.json` and `model.safetensors` (or the shards listed in
`model.safetensors.index.json`) and returns a `Transformer` whose logits match
`transformers` (tested on tiny random configs). Each family is one `Family` entry in the
`FAMILIES` registry: a config translator plus a name table `our/param/path -> (HF key,
converter)`; converters know both layouts, so Gemma/Qwen3, export or LoRA merge are new
table rows, not new code paths.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable, Dict, Mapping, Tuple

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

from agent_rl.models.config import ModelConfig
from agent_rl.models.transformer import Transformer
from agent_rl.registry import Registry


@dataclasses.dataclass(frozen=True)
class Converter:
  """Maps an HF tensor to our layout; `hf_shape(ours)` is the HF shape that must be found."""
  name: str
  hf_shape: Callable[[Tuple[int, ...]], Tuple[int, ...]]
  to_ours: Callable[[np.ndarray, Tuple[int, ...]], np.ndarray]


# HF Linear weights are [out, in]; ours are [in, ...] with heads split out.
IDENTITY = Converter("identity", lambda s: tuple(s), lambda a, s: a)
TRANSPOSE = Converter("transpose", lambda s: (s[1], s[0]), lambda a, s: a.T)
# q/k/v: HF [N*D, E] -> ours [E, N, D].
HEADS_IN = Converter("heads_in", lambda s: (s[1] * s[2], s[0]), lambda a, s: a.T.reshape(s))
# o: HF [E, H*D] -> ours [H, D, E].
HEADS_OUT = Converter("heads_out", lambda s: (s[2], s[0] * s[1]), lambda a, s: a.T.reshape(s))
# q/k/v bias: HF [N*D] -> ours [N, D].
HEADS_BIAS = Converter("heads_bias", lambda s: (s[0] * s[1],), lambda a, s: a.reshape(s))


@dataclasses.dataclass(frozen=True)
class Family:
  """One checkpoint family: config translation, weight-name table, ignorable HF keys."""
  name: str
  config: Callable[[Mapping[str, Any]], Dict[str, Any]]
  weights: Mapping[str, Tuple[str, Converter]]
  ignore: Tuple[str, ...] = ()


FAMILIES = Registry("HF model family")

_LLAMA_WEIGHTS = {
    "embed/embedding": ("model.embed_tokens.weight", IDENTITY),
    "layers/{i}/attn_norm/scale": ("model.layers.{i}.input_layernorm.weight", IDENTITY),
    "layers/{i}/attn/q": ("model.layers.{i}.self_attn.q_proj.weight", HEADS_IN),
    "layers/{i}/attn/k": ("model.layers.{i}.self_attn.k_proj.weight", HEADS_IN),
    "layers/{i}/attn/v": ("model.layers.{i}.self_attn.v_proj.weight", HEADS_IN),
    "layers/{i}/attn/q_bias": ("model.layers.{i}.self_attn.q_proj.bias", HEADS_BIAS),
    "layers/{i}/attn/k_bias": ("model.layers.{i}.self_attn.k_proj.bias", HEADS_BIAS),
    "layers/{i}/attn/v_bias": ("model.layers.{i}.self_attn.v_proj.bias", HEADS_BIAS),
    "layers/{i}/attn/o": ("model.layers.{i}.self_attn.o_proj.weight", HEADS_OUT),
    "layers/{i}/mlp_norm/scale": ("model.layers.{i}.post_attention_layernorm.weight", IDENTITY),
    "layers/{i}/mlp/gate": ("model.layers.{i}.mlp.gate_proj.weight", TRANSPOSE),
    "layers/{i}/mlp/up": ("model.layers.{i}.mlp.up_proj.weight", TRANSPOSE),
    "layers/{i}/mlp/down": ("model.layers.{i}.mlp.down_proj.weight", TRANSPOSE),
    "final_norm/scale": ("model.norm.weight", IDENTITY),
    "lm_head": ("lm_head.weight", TRANSPOSE),
}
# Non-persistent rotary buffers of old exports; a tied checkpoint may still carry lm_head.
_COMMON_IGNORE = (r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq", r"model\.rotary_emb\..*")


def _rope_fields(hf: Mapping[str, Any]) -> Dict[str, Any]:
  """rope_theta / rope_scaling from a v4 (`rope_scaling`) or v5 (`rope_parameters`) config."""
  params = dict(hf.get("rope_parameters") or {})
  scaling = hf.get("rope_scaling")
  if scaling:
    params = {**params, **scaling}
  theta = params.pop("rope_theta", hf.get("rope_theta", 10000.0))
  rope_type = params.pop("rope_type", params.pop("type", "default"))
  if rope_type == "default":
    return dict(rope_theta=theta, rope_scaling=None)
  if rope_type != "llama3":
    raise ValueError(f"config.json rope_type {rope_type!r} is not supported "
                     "(supported: 'default', 'llama3')")
  keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
  missing = [k for k in keys if k not in params]
  if missing:
    raise ValueError(f"config.json llama3 rope scaling is missing {missing}")
  return dict(rope_theta=theta, rope_scaling={k: params[k] for k in keys})


def _common_config(hf: Mapping[str, Any]) -> Dict[str, Any]:
  for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size"):
    if key not in hf:
      raise ValueError(f"config.json is missing {key!r}")
  act = hf.get("hidden_act", "silu")
  if act != "silu":
    raise ValueError(f"config.json hidden_act {act!r} is not supported (only 'silu')")
  heads = hf["num_attention_heads"]
  return dict(vocab_size=hf["vocab_size"], hidden=hf["hidden_size"],
              num_layers=hf["num_hidden_layers"], num_heads=heads,
              num_kv_heads=hf.get("num_key_value_heads") or heads,
              head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
              intermediate=hf["intermediate_size"], rms_eps=hf.get("rms_norm_eps", 1e-6),
              tie_embeddings=bool(hf.get("tie_word_embeddings", False)), **_rope_fields(hf))


def _llama_config(hf: Mapping[str, Any]) -> Dict[str, Any]:
  if hf.get("mlp_bias", False):
    raise ValueError("config.json mlp_bias=true is not supported")
  return dict(_common_config(hf), qkv_bias=bool(hf.get("attention_bias", False)))


def _qwen2_config(hf: Mapping[str, Any]) -> Dict[str, Any]:
  if hf.get("use_sliding_window", False):
    raise ValueError("config.json use_sliding_window=true is not supported")
  return dict(_common_config(hf), qkv_bias=True)


FAMILIES.register("llama", Family("llama", _llama_config, _LLAMA_WEIGHTS, _COMMON_IGNORE))
FAMILIES.register("qwen2", Family("qwen2", _qwen2_config, _LLAMA_WEIGHTS, _COMMON_IGNORE))


class _Tensors:
  """Lazy reader over one or several safetensors files (numpy, bf16 via ml_dtypes)."""

  def __init__(self, path: str):
    index = os.path.join(path, "model.safetensors.index.json")
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(index):
      with open(index) as f:
        weight_map = json.load(f)["weight_map"]
      self.files = {k: os.path.join(path, v) for k, v in weight_map.items()}
    elif os.path.exists(single):
      with safe_open(single, framework="numpy") as f:
        self.files = {k: single for k in f.keys()}
    else:
      raise ValueError(f"no model.safetensors or model.safetensors.index.json in {path!r} "
                       "(pickle checkpoints are not read)")
    self._open: Dict[str, Any] = {}

  def keys(self):
    return self.files.keys()

  def get(self, key: str) -> np.ndarray:
    fname = self.files[key]
    if fname not in self._open:
      self._open[fname] = safe_open(fname, framework="numpy")
    return self._open[fname].get_tensor(key)


def config_from_hf(path: str, **overrides) -> Tuple[ModelConfig, Family]:
  """Reads `path/config.json` -> (ModelConfig, Family)."""
  if not os.path.exists(os.path.join(path, "config.json")):
    raise ValueError(f"no config.json in {path!r}")
  with open(os.path.join(path, "config.json")) as f:
    hf = json.load(f)
  family = FAMILIES.get(hf.get("model_type", "<missing model_type>"))
  return ModelConfig(**family.config(hf), **overrides), family


def _template(path: Tuple[Any, ...]) -> Tuple[str, Dict[str, int]]:
  """('layers', 3, 'attn', 'q') -> ('layers/{i}/attn/q', {'i': 3})."""
  parts, fmt = [], {}
  for p in path:
    if isinstance(p, int):
      parts.append("{i}")
      fmt["i"] = p
    else:
      parts.append(str(p))
  return "/".join(parts), fmt


def load_hf(path: str, dtype=jnp.float32, param_dtype=None) -> Transformer:
  """Loads an HF Qwen2/Llama safetensors checkpoint directory as a `Transformer`.

  Args:
    path: directory with config.json and model.safetensors (or a sharded index).
    dtype: compute dtype; param_dtype: storage dtype (defaults to `dtype`).
  Raises:
    ValueError naming the key (and both shapes) on missing, unexpected or mis-shaped weights.
  """
  cfg, family = config_from_hf(path, dtype=jnp.dtype(dtype).name,
                               param_dtype=jnp.dtype(param_dtype or dtype).name)
  abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract)
  tensors = _Tensors(path)
  used = set()
  for p, var in nnx.to_flat_state(state):
    tmpl, fmt = _template(p)
    if tmpl not in family.weights:
      raise ValueError(f"{family.name}: no HF name for parameter {tmpl!r}")
    hf_tmpl, conv = family.weights[tmpl]
    key = hf_tmpl.format(**fmt)
    ours = tuple(var.get_value().shape)
    if key not in tensors.keys():
      raise ValueError(f"checkpoint is missing {key!r} (for {'/'.join(map(str, p))}, "
                       f"expected shape {conv.hf_shape(ours)})")
    arr = tensors.get(key)
    want = conv.hf_shape(ours)
    if tuple(arr.shape) != want:
      raise ValueError(f"checkpoint {key!r} has shape {tuple(arr.shape)}, expected {want} "
                       f"(our {'/'.join(map(str, p))} is {ours})")
    var.set_value(jnp.asarray(conv.to_ours(arr, ours).astype(cfg.params_dtype)))
    used.add(key)
  ignore = list(family.ignore)
  if cfg.tie_embeddings:
    ignore.append(re.escape(family.weights["lm_head"][0]))
  extra = sorted(k for k in tensors.keys()
                 if k not in used and not any(re.fullmatch(pat, k) for pat in ignore))
  if extra:
    raise ValueError(f"checkpoint has unexpected keys {extra[:8]}"
                     f"{' ...' if len(extra) > 8 else ''} ({len(extra)} in all)")
  return nnx.merge(graphdef, state)
