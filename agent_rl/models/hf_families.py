"""Hugging Face checkpoint families: config translation both ways and weight-name tables.

One `Family` per HF `model_type` (llama, qwen2, qwen3, gemma3_text) in the `FAMILIES`
registry. A family holds the architecture switches it fixes (`fixed`: Qwen3 = q/k norm, no
biases; Gemma 3 = (1 + w) norms, sandwich norms, GeGLU, scaled embeddings), a translator
`config.json -> ModelConfig fields`, its inverse for export, and a table `our/param/path ->
(HF key, Converter)`; converters know both layouts, so `load_hf` and `save_hf` read the
same table. `family_for(cfg)` picks the family whose switches a config has.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from agent_rl.models.config import ROPE_SCALINGS, ModelConfig
from agent_rl.registry import Registry


@dataclasses.dataclass(frozen=True)
class Converter:
  """HF tensor <-> our layout. `hf_shape(ours)` is the HF shape that must be found;
  `to_ours(a, ours_shape)` and `to_hf(a)` convert arrays."""
  name: str
  hf_shape: Callable[[Tuple[int, ...]], Tuple[int, ...]]
  to_ours: Callable[[np.ndarray, Tuple[int, ...]], np.ndarray]
  to_hf: Callable[[np.ndarray], np.ndarray]


# HF Linear weights are [out, in]; ours are [in, ...] with heads split out.
IDENTITY = Converter("identity", lambda s: tuple(s), lambda a, s: a, lambda a: a)
TRANSPOSE = Converter("transpose", lambda s: (s[1], s[0]), lambda a, s: a.T, lambda a: a.T)
# q/k/v: HF [N*D, E] <-> ours [E, N, D].
HEADS_IN = Converter("heads_in", lambda s: (s[1] * s[2], s[0]), lambda a, s: a.T.reshape(s),
                     lambda a: a.reshape(a.shape[0], -1).T)
# o: HF [E, H*D] <-> ours [H, D, E].
HEADS_OUT = Converter("heads_out", lambda s: (s[2], s[0] * s[1]), lambda a, s: a.T.reshape(s),
                      lambda a: a.reshape(-1, a.shape[-1]).T)
# q/k/v bias: HF [N*D] <-> ours [N, D].
HEADS_BIAS = Converter("heads_bias", lambda s: (s[0] * s[1],), lambda a, s: a.reshape(s),
                       lambda a: a.reshape(-1))

# The architecture switches of ModelConfig that a family fixes.
SWITCHES = ("qkv_bias", "qk_norm", "norm_plus_one", "post_norms", "embed_scale",
            "mlp_activation")


@dataclasses.dataclass(frozen=True)
class Family:
  """One checkpoint family.

  config: config.json dict -> ModelConfig fields other than `fixed`.
  to_hf_config: ModelConfig -> config.json dict (raises ValueError if it cannot be said).
  weights: our param path template ('layers/{i}/attn/q') -> (HF key template, Converter).
  ignore: regexes of HF keys that may be present and are not read.
  architectures: accepted `architectures` entries of config.json (the first is written).
  fixed: SWITCHES values of this family.
  exportable: `family_for` may pick it for `save_hf` (not the multimodal Gemma 3 wrapper,
    whose vision tower we do not have; its text model exports as gemma3_text).
  """
  name: str
  config: Callable[[Mapping[str, Any]], Dict[str, Any]]
  to_hf_config: Callable[[ModelConfig], Dict[str, Any]]
  weights: Mapping[str, Tuple[str, Converter]]
  ignore: Tuple[str, ...]
  architectures: Tuple[str, ...]
  fixed: Mapping[str, Any]
  exportable: bool = True

  def fits(self, cfg: ModelConfig) -> bool:
    return all(getattr(cfg, k) == v for k, v in self.fixed.items())


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
_QK_NORM_WEIGHTS = {
    "layers/{i}/attn/q_norm/scale": ("model.layers.{i}.self_attn.q_norm.weight", IDENTITY),
    "layers/{i}/attn/k_norm/scale": ("model.layers.{i}.self_attn.k_norm.weight", IDENTITY),
}
# Gemma's four norms per block: input / post-attention / pre- and post-feedforward.
_GEMMA3_WEIGHTS = {
    **_LLAMA_WEIGHTS, **_QK_NORM_WEIGHTS,
    "layers/{i}/post_attn_norm/scale": ("model.layers.{i}.post_attention_layernorm.weight",
                                        IDENTITY),
    "layers/{i}/mlp_norm/scale": ("model.layers.{i}.pre_feedforward_layernorm.weight", IDENTITY),
    "layers/{i}/post_mlp_norm/scale": ("model.layers.{i}.post_feedforward_layernorm.weight",
                                       IDENTITY),
}
# Non-persistent rotary buffers of old exports.
_COMMON_IGNORE = (r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq", r"model\.rotary_emb\..*")
_HF_LAYER = {"full_attention": "full", "sliding_attention": "sliding"}
_OUR_LAYER = {v: k for k, v in _HF_LAYER.items()}


def _rope_from(params: Mapping[str, Any], default_theta: float) -> Dict[str, Any]:
  """One HF rope dict (rope_type, rope_theta, scaling keys) -> rope_theta, rope_scaling."""
  params = dict(params)
  theta = params.pop("rope_theta", default_theta)
  rope_type = params.pop("rope_type", params.pop("type", "default"))
  if rope_type == "default":
    return dict(rope_theta=theta, rope_scaling=None)
  if rope_type not in ROPE_SCALINGS:
    raise ValueError(f"config.json rope_type {rope_type!r} is not supported "
                     f"(supported: 'default', {', '.join(map(repr, sorted(ROPE_SCALINGS)))})")
  keys = [f.name for f in dataclasses.fields(ROPE_SCALINGS[rope_type])]
  missing = [k for k in keys if k not in params]
  if missing:
    raise ValueError(f"config.json {rope_type} rope scaling is missing {missing}")
  return dict(rope_theta=theta, rope_scaling=dict(rope_type=rope_type,
                                                  **{k: params[k] for k in keys}))


def _rope_fields(hf: Mapping[str, Any]) -> Dict[str, Any]:
  """rope_theta / rope_scaling from a v4 (`rope_scaling`) or v5 (`rope_parameters`) config."""
  params = dict(hf.get("rope_parameters") or {})
  params = {**params, **(hf.get("rope_scaling") or {})}
  return _rope_from(params, hf.get("rope_theta", 10000.0))


def _require(hf: Mapping[str, Any], *keys: str):
  for key in keys:
    if key not in hf:
      raise ValueError(f"config.json is missing {key!r}")


def _sizes(hf: Mapping[str, Any]) -> Dict[str, Any]:
  _require(hf, "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "intermediate_size")
  heads = hf["num_attention_heads"]
  return dict(vocab_size=hf["vocab_size"], hidden=hf["hidden_size"],
              num_layers=hf["num_hidden_layers"], num_heads=heads,
              num_kv_heads=hf.get("num_key_value_heads") or heads,
              head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
              intermediate=hf["intermediate_size"], rms_eps=hf.get("rms_norm_eps", 1e-6),
              tie_embeddings=bool(hf.get("tie_word_embeddings", False)))


def _activation(hf: Mapping[str, Any], key: str, names: Mapping[str, str]) -> None:
  act = hf.get(key, next(iter(names)))
  if act not in names:
    raise ValueError(f"config.json {key} {act!r} is not supported (only {sorted(names)})")


def _layer_types(hf: Mapping[str, Any], num_layers: int) -> Dict[str, Any]:
  """sliding_window / layer_types from `layer_types` (v5) or Qwen's use_sliding_window +
  max_window_layers (v4: layers i >= max_window_layers slide)."""
  types = hf.get("layer_types")
  window = hf.get("sliding_window")
  if "use_sliding_window" in hf and not hf["use_sliding_window"]:
    window = None
  if types is None:
    if window is None:
      return dict(sliding_window=None, layer_types=None)
    first = hf.get("max_window_layers", 0)
    types = ["sliding_attention" if i >= first else "full_attention" for i in range(num_layers)]
  bad = sorted({t for t in types if t not in _HF_LAYER})
  if bad or len(types) != num_layers:
    raise ValueError(f"config.json layer_types must list {num_layers} of {sorted(_HF_LAYER)}, "
                     f"got {len(types)} entries{', unknown ' + str(bad) if bad else ''}")
  ours = tuple(_HF_LAYER[t] for t in types)
  if "sliding" not in ours:
    return dict(sliding_window=None, layer_types=None)
  if window is None:
    raise ValueError("config.json layer_types has sliding_attention layers but sliding_window "
                     "is null")
  # The shortest cycle that spells the per-layer list: Gemma 3's 26 or 34 layers read back as
  # its 6-cycle, so a checkpoint's config equals the preset's.
  period = next(p for p in range(1, len(ours) + 1)
                if all(ours[i] == ours[i % p] for i in range(len(ours))))
  return dict(sliding_window=window, layer_types=ours[:period])


def _llama_config(hf: Mapping[str, Any]) -> Dict[str, Any]:
  if hf.get("mlp_bias", False):
    raise ValueError("config.json mlp_bias=true is not supported")
  if hf.get("attention_bias", False):
    raise ValueError("config.json attention_bias=true (biases on q/k/v/o) is not supported")
  _activation(hf, "hidden_act", {"silu": "silu"})
  return dict(_sizes(hf), **_rope_fields(hf))


def _qwen_config(hf: Mapping[str, Any]) -> Dict[str, Any]:
  _activation(hf, "hidden_act", {"silu": "silu"})
  if hf.get("attention_bias", False) and hf.get("model_type") == "qwen3":
    raise ValueError("config.json attention_bias=true is not supported for qwen3")
  sizes = _sizes(hf)
  return dict(sizes, **_rope_fields(hf), **_layer_types(hf, sizes["num_layers"]))


# Gemma3TextConfig's defaults: the hub's multimodal configs (gemma-3-4b-it and up) list only
# the text_config keys that differ from them.
_GEMMA3_TEXT_DEFAULTS = dict(vocab_size=262_208, hidden_size=2304, intermediate_size=9216,
                             num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                             head_dim=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                             query_pre_attn_scalar=256, sliding_window=4096,
                             hidden_activation="gelu_pytorch_tanh")


def _gemma3_config(hf: Mapping[str, Any]) -> Dict[str, Any]:
  hf = {**_GEMMA3_TEXT_DEFAULTS, **hf}
  _activation(hf, "hidden_activation", {"gelu_pytorch_tanh": "gelu_tanh"})
  for key in ("final_logit_softcapping", "attn_logit_softcapping"):
    if hf.get(key) is not None:  # null in every released Gemma 3 config
      raise ValueError(f"config.json {key}={hf[key]} is not supported (Gemma 3 uses null)")
  for key in ("use_bidirectional_attention", "attention_bias"):
    if hf.get(key):
      raise ValueError(f"config.json {key}=true is not supported")
  sizes = _sizes(hf)
  params = hf.get("rope_parameters") or {}
  if "full_attention" in params:  # v5: one rope dict per layer type
    full, local = params["full_attention"], params.get("sliding_attention") or {}
  else:  # v4: rope_theta (+ rope_scaling) global, rope_local_base_freq local
    full = {"rope_theta": hf.get("rope_theta", 1_000_000.0), **(hf.get("rope_scaling") or {})}
    local = {"rope_theta": hf.get("rope_local_base_freq", 10_000.0)}
  if local.get("rope_type", "default") != "default":
    raise ValueError(f"config.json sliding_attention rope_type {local['rope_type']!r} is not "
                     "supported (only 'default')")
  if "layer_types" not in hf:
    pattern = hf.get("sliding_window_pattern", 6)
    hf = dict(hf, layer_types=["sliding_attention" if (i + 1) % pattern else "full_attention"
                               for i in range(sizes["num_layers"])])
  return dict(sizes, **_rope_from(full, 1_000_000.0),
              rope_local_theta=local.get("rope_theta", 10_000.0),
              query_pre_attn_scalar=hf.get("query_pre_attn_scalar", 256),
              **_layer_types(hf, sizes["num_layers"]))


def _gemma3_mm_config(hf: Mapping[str, Any]) -> Dict[str, Any]:
  """Gemma3ForConditionalGeneration: the text decoder's config is `text_config`."""
  text = hf.get("text_config")
  if not isinstance(text, Mapping):
    raise ValueError("config.json key 'text_config' is missing or not a dict")
  text = dict(text)
  text.setdefault("tie_word_embeddings", hf.get("tie_word_embeddings", True))
  return _gemma3_config(text)


# --- export: ModelConfig -> config.json ---------------------------------------------------


def _rope_dict(cfg: ModelConfig) -> Dict[str, Any]:
  rs = cfg.rope_scaling
  return {"rope_theta": cfg.rope_theta,
          **(rs.hf_dict() if rs is not None else {"rope_type": "default"})}


def _hf_layer_types(cfg: ModelConfig) -> list:
  return [_OUR_LAYER[cfg.layer_type(i)] for i in range(cfg.num_layers)]


def _no_gemma_fields(cfg: ModelConfig, family: str):
  for f in ("query_pre_attn_scalar", "rope_local_theta"):
    if getattr(cfg, f) is not None:
      raise ValueError(f"cannot export to {family}: ModelConfig.{f} has no {family} equivalent")


def _base_hf(cfg: ModelConfig, family: "Family") -> Dict[str, Any]:
  return dict(architectures=[family.architectures[0]], model_type=family.name,
              vocab_size=cfg.vocab_size, hidden_size=cfg.hidden,
              intermediate_size=cfg.intermediate, num_hidden_layers=cfg.num_layers,
              num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
              head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_eps,
              tie_word_embeddings=cfg.tie_embeddings, dtype=cfg.param_dtype,
              max_position_embeddings=32768)


def _llama_to_hf(cfg: ModelConfig) -> Dict[str, Any]:
  _no_gemma_fields(cfg, "llama")
  if cfg.has_sliding:
    raise ValueError("cannot export to llama: it has no sliding-window layers")
  return dict(_base_hf(cfg, FAMILIES.get("llama")), hidden_act="silu", attention_bias=False,
              mlp_bias=False, rope_parameters=_rope_dict(cfg))


def _qwen_to_hf(name: str) -> Callable[[ModelConfig], Dict[str, Any]]:
  def to_hf(cfg: ModelConfig) -> Dict[str, Any]:
    _no_gemma_fields(cfg, name)
    sliding = cfg.has_sliding
    return dict(_base_hf(cfg, FAMILIES.get(name)), hidden_act="silu", attention_bias=False,
                rope_parameters=_rope_dict(cfg), use_sliding_window=sliding,
                sliding_window=cfg.sliding_window if sliding else None,
                max_window_layers=cfg.num_layers, layer_types=_hf_layer_types(cfg))
  return to_hf


def _int_if_whole(v: float):
  return int(v) if float(v).is_integer() else float(v)


def _gemma3_to_hf(cfg: ModelConfig) -> Dict[str, Any]:
  if cfg.rope_local_theta is None and cfg.rope_scaling is not None and cfg.has_sliding:
    raise ValueError("cannot export to gemma3_text: its sliding layers never use rope_scaling; "
                     "set ModelConfig.rope_local_theta")
  local = cfg.rope_local_theta or cfg.rope_theta
  return dict(_base_hf(cfg, FAMILIES.get("gemma3_text")), hidden_activation="gelu_pytorch_tanh",
              # transformers' strict config wants an int where the value is integral.
              query_pre_attn_scalar=_int_if_whole(cfg.query_pre_attn_scalar or cfg.head_dim),
              sliding_window=cfg.sliding_window, layer_types=_hf_layer_types(cfg),
              rope_parameters={"full_attention": _rope_dict(cfg),
                               "sliding_attention": {"rope_type": "default",
                                                     "rope_theta": local}},
              final_logit_softcapping=None, attn_logit_softcapping=None, attention_bias=False,
              pad_token_id=0, bos_token_id=2, eos_token_id=1)


def _text_only(cfg: ModelConfig) -> Dict[str, Any]:
  raise ValueError("cannot export to gemma3 (multimodal): there is no vision tower; the text "
                   "decoder exports as gemma3_text")


_PLAIN = dict(qk_norm=False, norm_plus_one=False, post_norms=False, embed_scale=False,
              mlp_activation="silu")
FAMILIES.register("llama", Family("llama", _llama_config, _llama_to_hf, _LLAMA_WEIGHTS,
                                  _COMMON_IGNORE, ("LlamaForCausalLM",),
                                  dict(_PLAIN, qkv_bias=False)))
FAMILIES.register("qwen2", Family("qwen2", _qwen_config, _qwen_to_hf("qwen2"), _LLAMA_WEIGHTS,
                                  _COMMON_IGNORE, ("Qwen2ForCausalLM",),
                                  dict(_PLAIN, qkv_bias=True)))
FAMILIES.register("qwen3", Family("qwen3", _qwen_config, _qwen_to_hf("qwen3"),
                                  {**_LLAMA_WEIGHTS, **_QK_NORM_WEIGHTS}, _COMMON_IGNORE,
                                  ("Qwen3ForCausalLM",), dict(_PLAIN, qkv_bias=False,
                                                              qk_norm=True)))
_GEMMA3_FIXED = dict(qkv_bias=False, qk_norm=True, norm_plus_one=True, post_norms=True,
                     embed_scale=True, mlp_activation="gelu_tanh")
FAMILIES.register("gemma3_text", Family(
    "gemma3_text", _gemma3_config, _gemma3_to_hf, _GEMMA3_WEIGHTS, _COMMON_IGNORE,
    ("Gemma3ForCausalLM",), _GEMMA3_FIXED))
# The hub's gemma-3-4b/12b/27b checkpoints: the text decoder under `language_model.`, beside
# a SigLIP vision tower and projector that are not read.
FAMILIES.register("gemma3", Family(
    "gemma3", _gemma3_mm_config, _text_only,
    {k: ("language_model." + v, conv) for k, (v, conv) in _GEMMA3_WEIGHTS.items()},
    (r"vision_tower\..*", r"multi_modal_projector\..*",
     r"language_model\.model\.rotary_emb\..*"),
    ("Gemma3ForConditionalGeneration",), _GEMMA3_FIXED, exportable=False))


def param_template(path: Tuple[Any, ...]) -> Tuple[str, Dict[str, int]]:
  """('layers', 3, 'attn', 'q') -> ('layers/{i}/attn/q', {'i': 3}), a `weights` table key."""
  parts, fmt = [], {}
  for p in path:
    if isinstance(p, int):
      parts.append("{i}")
      fmt["i"] = p
    else:
      parts.append(str(p))
  return "/".join(parts), fmt


def family_for(cfg: ModelConfig, name: Optional[str] = None) -> Family:
  """The family `name` (checked against cfg), or the one whose switches `cfg` has."""
  if name is not None:
    family = FAMILIES.get(name)
    if not family.fits(cfg):
      diff = {k: getattr(cfg, k) for k, v in family.fixed.items() if getattr(cfg, k) != v}
      raise ValueError(f"ModelConfig does not fit HF family {name!r}: {diff} should be "
                       f"{ {k: family.fixed[k] for k in diff} }")
    return family
  for fname in FAMILIES.names():
    if FAMILIES.get(fname).exportable and FAMILIES.get(fname).fits(cfg):
      return FAMILIES.get(fname)
  raise ValueError(f"no HF family has this ModelConfig's switches "
                   f"{ {k: getattr(cfg, k) for k in SWITCHES} }; known: {FAMILIES.names()}")
