"""LoRA adapters on the decoder's dense projections (Hu et al., 2021, arXiv:2106.09685).

A target projection y = x W becomes y = x W + (alpha / r) (x A) B with A [in, r] and B
[r, out] (paper: W0 + BA with B initialized to zero, scaled by alpha / r), for the targets
q, k, v, o (attention) and gate, up, down (MLP), the `target_modules` names of PEFT
`q_proj ... down_proj`. `ModelConfig.lora = LoraConfig(...)` makes the `Transformer` carry
the adapters as `LoRAParam`s (an `nnx.Param` subclass), next to the base weight they
adapt: `nnx.state(model, LoRAParam)` is what a LoRA learner trains, and A / B carry the
base weight's logical axis names on their non-rank side, so they shard like it.

`attach` adds fresh adapters to a base model's params (e.g. `load_hf`'s); `merge` folds
them into the base weights (a plain model for `save_hf` / fast sampling), `unmerge` takes
them out again; `from_peft` / `to_peft` / `save_peft` map adapters to and from PEFT's names
and layouts (parity with `peft` tested on a tiny Qwen2, both directions).

Dropout (PEFT's `lora_dropout`): with `dropout = p > 0` the *training* forward, and only it,
drops the input of each LoRA branch: y = x W + scale * (drop(x) A) B, drop(x) = x * m / (1 - p)
with m ~ Bernoulli(1 - p) per element (inverted dropout, as `torch.nn.Dropout` in PEFT's
`lora.Linear`), a fresh mask per projection; the base product x W never sees it. The forward
stays a pure function: the full path takes an explicit `dropout_key` (the train step's key,
itself `fold_in(TrainState.rng, step)`, so masks change every update and resume bit-exactly)
and draws the mask of layer i, target t from `branch_key(key, i, t)`. Without a key (evaluation,
rollouts, the cached / decode paths, reference and teacher scoring, export) nothing drops, and
with p = 0 the key is ignored: the program has no RNG op at all.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agent_rl.models.dense import dense

ADAPTER_DTYPE = jnp.float32
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
# target -> (module attribute path inside a block, PEFT module name, number of input dims
# of our base weight: q/k/v/gate/up/down take [E]; o takes [H, D]).
_TARGET_INFO = {"q": ("attn", "self_attn.q_proj", 1), "k": ("attn", "self_attn.k_proj", 1),
                "v": ("attn", "self_attn.v_proj", 1), "o": ("attn", "self_attn.o_proj", 2),
                "gate": ("mlp", "mlp.gate_proj", 1), "up": ("mlp", "mlp.up_proj", 1),
                "down": ("mlp", "mlp.down_proj", 1)}


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """LoRA hyper-parameters (PEFT `LoraConfig` names in brackets).

  rank (r), alpha (lora_alpha): delta W = (alpha / rank) A B.
  dropout (lora_dropout): the probability p in [0, 1) of dropping an element of each LoRA
    branch's input in the training forward (see the module docstring); 0.0 (PEFT's default)
    drops nothing and adds no RNG op.
  targets (target_modules): a subset of TARGETS.
  """
  rank: int = 8
  alpha: float = 16.0
  dropout: float = 0.0
  targets: Tuple[str, ...] = ("q", "k", "v", "o")

  def __post_init__(self):
    r = self.rank
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r <= 0:
      raise ValueError(f"lora.rank must be a positive int, got {self.rank!r}")
    object.__setattr__(self, "rank", int(self.rank))
    if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or self.alpha <= 0:
      raise ValueError(f"lora.alpha must be a positive number, got {self.alpha!r}")
    object.__setattr__(self, "alpha", float(self.alpha))
    p = self.dropout
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not (
        0.0 <= p < 1.0):  # `not (...)` also rejects NaN
      raise ValueError(f"lora.dropout must be a number in [0, 1) (the probability of dropping "
                       f"an input element of a LoRA branch), got {self.dropout!r}")
    object.__setattr__(self, "dropout", float(p))
    t = self.targets
    if isinstance(t, str) or not isinstance(t, (tuple, list)) or not t or any(
        x not in TARGETS for x in t) or len(set(t)) != len(t):
      raise ValueError(f"lora.targets must be distinct names among {TARGETS}, got {t!r}")
    object.__setattr__(self, "targets", tuple(x for x in TARGETS if x in t))

  @property
  def scale(self) -> float:
    return self.alpha / self.rank

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "LoraConfig":
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
      raise ValueError(f"lora has unknown keys {unknown}; expected {sorted(names)}")
    return cls(**d)


class LoRAParam(nnx.Param):
  """An adapter weight (A or B): the only parameters a LoRA learner trains."""


def add_adapters(module: nnx.Module, name: str, cfg: LoraConfig, n_in: int,
                 rngs: nnx.Rngs) -> None:
  """Adds `{name}_lora_a` [*in, r] (normal(1/sqrt(in))) and `{name}_lora_b` [r, *out]
  (zeros, so the adapted model starts equal to the base) beside `module.{name}`."""
  base = getattr(module, name)
  shape = base.get_value().shape
  # Adapters are the trained weights: kept in float32 even over a bf16-stored frozen base
  # (Adam updates of ~lr * 1e-3 relative size vanish in bf16's 8-bit mantissa).
  dtype = ADAPTER_DTYPE
  axes = tuple(base.get_metadata()["out_sharding"])
  fan_in = math.prod(shape[:n_in])
  a = nnx.initializers.normal(stddev=fan_in ** -0.5)(rngs.params(), (*shape[:n_in], cfg.rank),
                                                      dtype)
  b = jnp.zeros((cfg.rank, *shape[n_in:]), dtype)
  setattr(module, f"{name}_lora_a", LoRAParam(a, out_sharding=axes[:n_in] + (None,),
                                              eager_sharding=False))
  setattr(module, f"{name}_lora_b", LoRAParam(b, out_sharding=(None,) + axes[n_in:],
                                              eager_sharding=False))


def uses_dropout(cfg) -> bool:
  """Whether a ModelConfig's training forward draws LoRA dropout masks (lora with p > 0)."""
  return cfg.lora is not None and cfg.lora.dropout > 0


def branch_key(key: jax.Array, layer: int, target: str) -> jax.Array:
  """The dropout key of target `target` in layer `layer` (layer may be traced, in a scan):
  fold_in(fold_in(key, layer), TARGETS.index(target)); a function of the step key alone, so
  the masks of a resumed run are the same as the uninterrupted run's."""
  return jax.random.fold_in(jax.random.fold_in(key, layer), TARGETS.index(target))


def dropout(x: jax.Array, key: jax.Array, rate: float) -> jax.Array:
  """Inverted dropout: x * m / (1 - rate), m ~ Bernoulli(1 - rate) per element of x [...]
  (`torch.nn.Dropout` in training mode), in x's dtype (the scaling in float32, so bf16 x are
  rounded once: 1 / 0.9 itself is not a bf16 number)."""
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  kept = (x.astype(jnp.float32) * (1.0 / (1.0 - rate))).astype(x.dtype)
  return jnp.where(keep, kept, jnp.zeros((), x.dtype))


def delta(module: nnx.Module, name: str, x: jax.Array, scale: float, out_dtype,
          key: Optional[jax.Array] = None) -> jax.Array:
  """scale * (drop(x) A) B for x [..., in] (in flattened) -> [..., out flattened] in out_dtype.

  key: the layer's dropout key (`Transformer.apply(dropout_key=...)`, training only) or None;
  with it and `module.lora_dropout` p > 0, drop(x) = `dropout(x, fold_in(key, target), p)`,
  else drop(x) = x. Only the branch input is dropped: the caller's base product uses x.
  """
  if key is not None and module.lora_dropout > 0:
    x = dropout(x, jax.random.fold_in(key, TARGETS.index(name)), module.lora_dropout)
  a = getattr(module, f"{name}_lora_a")[...]
  b = getattr(module, f"{name}_lora_b")[...]
  if a.ndim + b.ndim == getattr(module, name)[...].ndim + 4:
    return _row_delta(x, a, b, scale, out_dtype)
  h = dense(x, a.reshape(-1, a.shape[-1]))
  return dense(h, b.reshape(b.shape[0], -1), out_dtype=out_dtype) * jnp.asarray(scale, out_dtype)


def _row_delta(x, a, b, scale, out_dtype):
  """Per-row adapters (multi-agent LoRA, `agents.params.gather_rows`): a [B, *in, r] and
  b [B, r, *out], row i of x [B * ..., in] (row-major, rows leading) through adapter i: the
  batched-gather LoRA of S-LoRA / Punica (BGMV), float32 accumulation as `dense`."""
  rows, r = a.shape[0], a.shape[-1]
  xr = x.reshape(rows, -1, x.shape[-1])
  h = jnp.einsum("bmi,bir->bmr", xr, a.reshape(rows, -1, r).astype(x.dtype),
                 preferred_element_type=jnp.float32).astype(x.dtype)
  y = jnp.einsum("bmr,bro->bmo", h, b.reshape(rows, r, -1).astype(x.dtype),
                 preferred_element_type=jnp.float32)
  return (y * scale).astype(out_dtype).reshape(*x.shape[:-1], y.shape[-1])


def _as_dict(state) -> Dict[str, Any]:
  if isinstance(state, nnx.Module):
    state = nnx.state(state, nnx.Param)
  if isinstance(state, nnx.State):
    state = nnx.to_pure_dict(state)
  return jax.tree.map(lambda a: a, state)  # a fresh nested copy that can be edited


def _product(a, b) -> np.ndarray:
  """A [*in, r] @ B [r, *out] -> [*in, *out] in float32."""
  a32 = np.asarray(a, np.float32)
  b32 = np.asarray(b, np.float32)
  out = a32.reshape(-1, a32.shape[-1]) @ b32.reshape(b32.shape[0], -1)
  return out.reshape(*a32.shape[:-1], *b32.shape[1:])


def _to_state(cfg, params: Dict[str, Any]) -> nnx.State:
  from agent_rl.models.transformer import Transformer  # transformer imports this module
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
  nnx.replace_by_pure_dict(state, params)
  return state


def attach(cfg, base_state, seed: int = 0) -> nnx.State:
  """Params of `Transformer(cfg)` (cfg with lora) from a base model's params (e.g.
  `load_hf`'s): the base weights as they are, fresh adapters (A ~ normal(1/sqrt(in)), B = 0,
  so the adapted model starts equal to the base). Only the adapters are initialized."""
  if cfg.lora is None:
    raise ValueError("attach: ModelConfig.lora is None")
  params = _as_dict(base_state)
  key = jax.random.key(seed)
  for i, layer in params["layers"].items():
    for j, t in enumerate(cfg.lora.targets):
      where, _, n_in = _TARGET_INFO[t]
      mod = layer[where]
      if f"{t}_lora_a" in mod:
        raise ValueError(f"attach: layers/{i}/{where} already has {t} adapters")
      w = mod[t]
      fan_in = math.prod(w.shape[:n_in])
      k = jax.random.fold_in(key, int(i) * len(TARGETS) + j)
      mod[f"{t}_lora_a"] = (jax.random.normal(k, (*w.shape[:n_in], cfg.lora.rank), jnp.float32)
                            * fan_in ** -0.5).astype(ADAPTER_DTYPE)
      mod[f"{t}_lora_b"] = jnp.zeros((cfg.lora.rank, *w.shape[n_in:]), ADAPTER_DTYPE)
  return _to_state(cfg, params)


def merge(cfg, state) -> Tuple[Any, nnx.State]:
  """W <- W + scale * A B for every adapter; returns (cfg without lora, its params).

  state: a `Transformer`, its nnx.State or pure dict (with adapters). The sum is taken in
  float32 and stored in the base weight's dtype.
  """
  if cfg.lora is None:
    raise ValueError("merge: ModelConfig.lora is None (nothing to merge)")
  params = _as_dict(state)
  for layer in params["layers"].values():
    for t in cfg.lora.targets:
      mod = layer[_TARGET_INFO[t][0]]
      w = mod[t]
      merged = np.asarray(w, np.float32) + cfg.lora.scale * _product(mod.pop(f"{t}_lora_a"),
                                                                     mod.pop(f"{t}_lora_b"))
      mod[t] = jnp.asarray(merged.astype(np.asarray(w).dtype))
  base = cfg.replace(lora=None)
  return base, _to_state(base, params)


def unmerge(cfg, merged_state, adapters) -> nnx.State:
  """The inverse of `merge`: W <- W - scale * A B, adapters put back; returns the params of
  `Transformer(cfg)` (cfg with lora). adapters: `nnx.state(model, LoRAParam)` or its dict."""
  if cfg.lora is None:
    raise ValueError("unmerge: ModelConfig.lora is None")
  params = _as_dict(merged_state)
  ad = _as_dict(adapters)
  for i, layer in params["layers"].items():
    for t in cfg.lora.targets:
      where = _TARGET_INFO[t][0]
      mod, a_mod = layer[where], ad["layers"][i][where]
      a, b = a_mod[f"{t}_lora_a"], a_mod[f"{t}_lora_b"]
      w = np.asarray(mod[t])
      mod[t] = jnp.asarray((w.astype(np.float32) - cfg.lora.scale * _product(a, b)).astype(w.dtype))
      mod[f"{t}_lora_a"], mod[f"{t}_lora_b"] = a, b
  return _to_state(cfg, params)


def _peft_key(i: int, t: str, which: str) -> str:
  return f"base_model.model.model.layers.{i}.{_TARGET_INFO[t][1]}.lora_{which}.weight"


def to_peft(cfg, state) -> Dict[str, np.ndarray]:
  """Our adapters -> PEFT `adapter_model.safetensors` tensors: lora_A [r, in], lora_B [out, r]."""
  if cfg.lora is None:
    raise ValueError("to_peft: ModelConfig.lora is None")
  params = _as_dict(state)
  out = {}
  for i, layer in params["layers"].items():
    for t in cfg.lora.targets:
      mod = layer[_TARGET_INFO[t][0]]
      a, b = np.asarray(mod[f"{t}_lora_a"]), np.asarray(mod[f"{t}_lora_b"])
      out[_peft_key(int(i), t, "A")] = np.ascontiguousarray(a.reshape(-1, a.shape[-1]).T)
      out[_peft_key(int(i), t, "B")] = np.ascontiguousarray(b.reshape(b.shape[0], -1).T)
  return out


def from_peft(cfg, tensors: Mapping[str, Any], state) -> nnx.State:
  """`state` (params of `Transformer(cfg)`) with its adapters replaced by PEFT tensors
  (`adapter_model.safetensors` names, or a PeftModel's state_dict with `.default.`)."""
  if cfg.lora is None:
    raise ValueError("from_peft: ModelConfig.lora is None")
  named = {re.sub(r"\.lora_([AB])\.[^.]+\.weight$", r".lora_\1.weight", k): np.asarray(v)
           for k, v in tensors.items() if ".lora_" in k}
  params = _as_dict(state)
  used = set()
  for i, layer in params["layers"].items():
    for t in cfg.lora.targets:
      mod = layer[_TARGET_INFO[t][0]]
      for which, attr in (("A", f"{t}_lora_a"), ("B", f"{t}_lora_b")):
        key = _peft_key(int(i), t, which)
        if key not in named:
          raise ValueError(f"PEFT adapter is missing {key!r}")
        ours = np.asarray(mod[attr]).shape
        arr = named[key].T
        want = ((math.prod(ours[1:]), ours[0]) if which == "B" else
                (ours[-1], math.prod(ours[:-1])))
        if tuple(named[key].shape) != want:
          raise ValueError(f"PEFT {key!r} has shape {tuple(named[key].shape)}, expected {want} "
                           f"(our {attr} is {ours})")
        mod[attr] = jnp.asarray(arr.reshape(ours).astype(np.asarray(mod[attr]).dtype))
        used.add(key)
  extra = sorted(set(named) - used)
  if extra:
    raise ValueError(f"PEFT adapter has tensors for modules the LoraConfig does not target: "
                     f"{extra[:4]}")
  return _to_state(cfg, params)


def lora_config_from_peft(peft_cfg: Mapping[str, Any]) -> LoraConfig:
  """PEFT adapter_config.json dict -> LoraConfig (target_modules q_proj -> q, ...)."""
  names = {v[1].split(".")[-1]: k for k, v in _TARGET_INFO.items()}
  mods = peft_cfg.get("target_modules") or []
  bad = sorted(m for m in mods if m not in names)
  if bad:
    raise ValueError(f"adapter_config.json target_modules {bad} are not supported "
                     f"(supported: {sorted(names)})")
  return LoraConfig(rank=peft_cfg["r"], alpha=peft_cfg.get("lora_alpha", 8),
                    dropout=peft_cfg.get("lora_dropout", 0.0),
                    targets=tuple(names[m] for m in mods))


def peft_adapter_config(cfg, base_model_name_or_path: Optional[str] = None) -> Dict[str, Any]:
  """adapter_config.json contents for `cfg.lora` (plain LoRA, no bias, no rsLoRA)."""
  lc = cfg.lora
  return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lc.rank, "lora_alpha": lc.alpha,
          "lora_dropout": lc.dropout, "bias": "none", "use_rslora": False, "use_dora": False,
          "fan_in_fan_out": False, "inference_mode": True,
          "target_modules": [_TARGET_INFO[t][1].split(".")[-1] for t in lc.targets],
          "base_model_name_or_path": base_model_name_or_path}


def save_peft(path: str, cfg, state, base_model_name_or_path: Optional[str] = None) -> list:
  """Writes a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) that
  `peft.PeftModel.from_pretrained(base, path)` loads onto the base model; returns the files."""
  from safetensors.numpy import save_file
  tensors = to_peft(cfg, state)
  os.makedirs(path, exist_ok=True)
  save_file(tensors, os.path.join(path, "adapter_model.safetensors"), metadata={"format": "pt"})
  with open(os.path.join(path, "adapter_config.json"), "w") as f:
    json.dump(peft_adapter_config(cfg, base_model_name_or_path), f, indent=2)
  return ["adapter_config.json", "adapter_model.safetensors"]
