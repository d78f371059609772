"""Import Hugging Face Qwen2 / Llama / Qwen3 / Gemma 3 checkpoints (safetensors only).

`load_hf(path)` reads `config.json` and `model.safetensors` (or the shards listed in
`model.safetensors.index.json`) and returns a `Transformer` whose logits match
`transformers` (tested on tiny random configs). The families (config translators and
name tables, shared with `hf_export`) live in `hf_families.FAMILIES`. Pickle weights
(`.bin`, `.pt`, `.pth`, `.ckpt`) are never opened: unpickling can run arbitrary code.
"""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Any, Dict, Tuple

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

from agent_rl.models.config import ModelConfig
from agent_rl.models.hf_families import (FAMILIES, Converter, Family,  # noqa: F401 (re-exported)
                                         param_template)
from agent_rl.models.transformer import Transformer

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _pickle_files(path: str) -> list:
  return sorted(os.path.basename(f) for f in glob.glob(os.path.join(path, "*"))
                if f.endswith(PICKLE_SUFFIXES) and "training_args" not in f)


class _Tensors:
  """Lazy reader over one or several safetensors files (numpy, bf16 via ml_dtypes)."""

  def __init__(self, path: str):
    index = os.path.join(path, "model.safetensors.index.json")
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(index):
      weight_map = _read_json(index).get("weight_map")
      if not isinstance(weight_map, dict):
        raise ValueError(f"{index}: key 'weight_map' is missing or not a dict")
      self.files = {k: os.path.join(path, v) for k, v in weight_map.items()}
      for shard in sorted(set(self.files.values())):
        if not os.path.exists(shard):
          key = next(k for k, v in self.files.items() if v == shard)
          raise ValueError(f"{index}: shard {os.path.basename(shard)!r} (of {key!r}, ...) "
                           f"does not exist in {path!r}")
    elif os.path.exists(single):
      with safe_open(single, framework="numpy") as f:
        self.files = {k: single for k in f.keys()}
    else:
      pickled = _pickle_files(path)
      hint = (f"; found pickle weights {pickled}, which are never loaded (unpickling can run "
              "code): convert them to safetensors, e.g. transformers' "
              "`model.save_pretrained(dir, safe_serialization=True)`" if pickled else "")
      raise ValueError(f"no model.safetensors or model.safetensors.index.json in {path!r} "
                       f"(pickle checkpoints are not read){hint}")
    self._open: Dict[str, Any] = {}

  def keys(self):
    return self.files.keys()

  def file(self, key: str) -> str:
    return os.path.basename(self.files[key])

  def get(self, key: str) -> np.ndarray:
    fname = self.files[key]
    if fname not in self._open:
      self._open[fname] = safe_open(fname, framework="numpy")
    return self._open[fname].get_tensor(key)


def _read_json(path: str) -> dict:
  try:
    with open(path) as f:
      data = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON: {e}") from None
  if not isinstance(data, dict):
    raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
  return data


def config_from_hf(path: str, **overrides) -> Tuple[ModelConfig, Family]:
  """Reads `path/config.json` -> (ModelConfig, Family).

  Raises ValueError naming config.json and the key (missing file or key, unsupported
  value or `architectures` entry), KeyError for an unknown `model_type`.
  """
  if not os.path.isdir(path):
    raise ValueError(f"HF checkpoint directory {path!r} does not exist")
  cfg_file = os.path.join(path, "config.json")
  if not os.path.exists(cfg_file):
    raise ValueError(f"no config.json in {path!r}")
  hf = _read_json(cfg_file)
  if "model_type" not in hf:
    raise ValueError(f"{cfg_file}: key 'model_type' is missing")
  try:
    family = FAMILIES.get(hf["model_type"])
  except KeyError:
    raise KeyError(f"{cfg_file}: model_type {hf['model_type']!r} is not supported; known: "
                   f"{', '.join(FAMILIES.names())}") from None
  archs = hf.get("architectures") or []
  bad = [a for a in archs if a not in family.architectures]
  if bad:
    raise ValueError(f"{cfg_file}: architectures {bad} are not supported for model_type "
                     f"{family.name!r} (supported: {list(family.architectures)})")
  try:
    fields = family.config(hf)
    return ModelConfig(**fields, **family.fixed, **overrides), family
  except ValueError as e:
    raise ValueError(f"{cfg_file}: {e}") from None


def load_hf(path: str, dtype=jnp.float32, param_dtype=None) -> Transformer:
  """Loads an HF Qwen2/Llama/Qwen3/Gemma 3 safetensors checkpoint directory as a `Transformer`.

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
    tmpl, fmt = param_template(p)
    if tmpl not in family.weights:
      raise ValueError(f"{family.name}: no HF name for parameter {tmpl!r}")
    hf_tmpl, conv = family.weights[tmpl]
    key = hf_tmpl.format(**fmt)
    ours = tuple(var.get_value().shape)
    if key not in tensors.keys():
      raise ValueError(f"checkpoint is missing {key!r} (for {'/'.join(map(str, p))}, "
                       f"expected shape {conv.hf_shape(ours)}) in {path!r}")
    arr = tensors.get(key)
    want = conv.hf_shape(ours)
    if tuple(arr.shape) != want:
      raise ValueError(f"checkpoint {key!r} has shape {tuple(arr.shape)}, expected {want} "
                       f"(our {'/'.join(map(str, p))} is {ours}; in {tensors.file(key)}, "
                       "config.json disagrees with the weights)")
    var.set_value(jnp.asarray(conv.to_ours(arr, ours).astype(cfg.params_dtype)))
    used.add(key)
  ignore = list(family.ignore)
  if cfg.tie_embeddings:
    ignore.append(re.escape(family.weights["lm_head"][0]))
  extra = sorted(k for k in tensors.keys()
                 if k not in used and not any(re.fullmatch(pat, k) for pat in ignore))
  if extra:
    raise ValueError(f"checkpoint has unexpected keys {extra[:8]}"
                     f"{' ...' if len(extra) > 8 else ''} ({len(extra)} in all, first in "
                     f"{tensors.file(extra[0])}) for {family.name} as config.json describes it")
  return nnx.merge(graphdef, state)
