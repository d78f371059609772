"""Export to a Hugging Face checkpoint directory that `transformers` loads as it is.

`save_hf(path, cfg, params, tokenizer=None)` writes `config.json` (the family's own
`model_type` / `architectures`, v5 `rope_parameters` and `layer_types`), the weights as
safetensors (one `model.safetensors`, or shards + `model.safetensors.index.json` past
`max_shard_bytes`, as `save_pretrained` does) and, when given, the tokenizer's files. The
weight names and layouts come from the same `hf_families` tables `load_hf` reads, so an
export loads back bit for bit; `transformers.AutoModelForCausalLM.from_pretrained` on it
reproduces our logits (tested for llama, qwen2, qwen3 and gemma3_text).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any, Dict, Optional, Tuple

import jax
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from agent_rl.models.config import ModelConfig
from agent_rl.models.hf_families import Family, family_for, param_template
from agent_rl.models.transformer import Transformer

# Files of an HF tokenizer directory, copied when the tokenizer object names its directory.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json", "tokenizer.model", "chat_template.jinja",
                   "chat_template.json", "vocab.json", "merges.txt", "added_tokens.json")
DEFAULT_SHARD_BYTES = 5 * 1024 ** 3  # transformers' default max_shard_size ("5GB")


def _path_key(p) -> Any:
  for attr in ("key", "idx", "name"):
    if hasattr(p, attr):
      return getattr(p, attr)
  raise ValueError(f"unsupported pytree path entry {p!r}")


def _flat_params(params) -> Dict[Tuple[Any, ...], np.ndarray]:
  """A Transformer, its nnx.State, or the nested dict of arrays -> {path tuple: array}."""
  if isinstance(params, nnx.Module):
    params = nnx.state(params, nnx.Param)
  if isinstance(params, nnx.State):
    params = nnx.to_pure_dict(params)
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  return {tuple(_path_key(p) for p in path): leaf for path, leaf in leaves}


def _expected(cfg: ModelConfig) -> Dict[Tuple[Any, ...], Tuple[int, ...]]:
  abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
  return {tuple(p): tuple(v.get_value().shape)
          for p, v in nnx.to_flat_state(nnx.state(abstract, nnx.Param))}


def hf_tensors(cfg: ModelConfig, params, family: Family) -> Dict[str, np.ndarray]:
  """Our params -> {HF key: array in the HF layout}; params must match `cfg` exactly."""
  flat = _flat_params(params)
  want = _expected(cfg)
  name = lambda p: "/".join(map(str, p))
  missing = sorted(name(p) for p in want if p not in flat)
  extra = sorted(name(p) for p in flat if p not in want)
  if missing or extra:
    raise ValueError(f"params do not match the ModelConfig: missing {missing[:6]}, unexpected "
                     f"{extra[:6]}")
  out = {}
  for p, shape in want.items():
    arr = np.asarray(flat[p])
    if tuple(arr.shape) != shape:
      raise ValueError(f"param {name(p)} has shape {tuple(arr.shape)}, the ModelConfig says "
                       f"{shape}")
    tmpl, fmt = param_template(p)
    if tmpl not in family.weights:
      raise ValueError(f"{family.name}: no HF name for parameter {tmpl!r}")
    key, conv = family.weights[tmpl]
    out[key.format(**fmt)] = np.ascontiguousarray(conv.to_hf(arr))
  return out


def _shards(tensors: Dict[str, np.ndarray], max_bytes: int) -> list:
  """Greedy, in key order, as `save_pretrained` does; a tensor larger than max_bytes gets
  a shard of its own."""
  shards, cur, size = [], {}, 0
  for key in sorted(tensors):
    n = tensors[key].nbytes
    if cur and size + n > max_bytes:
      shards.append(cur)
      cur, size = {}, 0
    cur[key] = tensors[key]
    size += n
  return shards + [cur] if cur else shards


def _save_tokenizer(path: str, tokenizer) -> list:
  """Writes the tokenizer's files into `path`; returns their names."""
  save = getattr(tokenizer, "save", None)
  if callable(save):
    before = set(os.listdir(path))
    save(path)
    return sorted(set(os.listdir(path)) - before)
  src = getattr(tokenizer, "path", None)
  if isinstance(src, str) and os.path.isdir(src):
    copied = [f for f in TOKENIZER_FILES if os.path.isfile(os.path.join(src, f))]
    if "tokenizer.json" not in copied and "tokenizer.model" not in copied:
      raise ValueError(f"tokenizer directory {src!r} has neither tokenizer.json nor "
                       "tokenizer.model")
    for f in copied:
      shutil.copyfile(os.path.join(src, f), os.path.join(path, f))
    return copied
  proto = getattr(tokenizer, "model_proto", None)
  if isinstance(proto, (bytes, bytearray)):  # a sentencepiece model
    with open(os.path.join(path, "tokenizer.model"), "wb") as f:
      f.write(proto)
    return ["tokenizer.model"]
  raise ValueError(f"cannot export tokenizer {tokenizer!r}: it has no save(path), no `path` "
                   "directory with tokenizer.json, and no sentencepiece model_proto")



def _write(path: str, hf_config: Dict[str, Any], tensors: Dict[str, np.ndarray], tokenizer,
           max_shard_bytes: int) -> list:
  """Writes config.json, the (sharded) safetensors and the tokenizer's files; returns the
  names written."""
  if not isinstance(max_shard_bytes, int) or max_shard_bytes <= 0:
    raise ValueError(f"max_shard_bytes must be a positive int, got {max_shard_bytes!r}")
  os.makedirs(path, exist_ok=True)
  for stale in glob.glob(os.path.join(path, "model*.safetensors*")):
    os.remove(stale)
  shards = _shards(tensors, max_shard_bytes)
  files = ["config.json"]
  if len(shards) == 1:
    save_file(shards[0], os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    files.append("model.safetensors")
  else:
    weight_map = {}
    for i, shard in enumerate(shards):
      fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
      save_file(shard, os.path.join(path, fname), metadata={"format": "pt"})
      weight_map.update({k: fname for k in shard})
      files.append(fname)
    index = {"metadata": {"total_size": int(sum(a.nbytes for a in tensors.values()))},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
      json.dump(index, f, indent=2)
    files.append("model.safetensors.index.json")
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf_config, f, indent=2, sort_keys=True)
  if tokenizer is not None:
    files += _save_tokenizer(path, tokenizer)
  return files


def save_hf(path: str, cfg: ModelConfig, params, tokenizer=None, *, family: Optional[str] = None,
            max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> Dict[str, Any]:
  """Writes an HF checkpoint directory for `cfg` / `params` (+ the tokenizer's files).

  Args:
    path: output directory (created; earlier config/weight files in it are replaced).
    cfg: the ModelConfig; its switches pick the family (llama, qwen2, qwen3, gemma3_text)
      unless `family` names one.
    params: a `Transformer`, its `nnx.State` or the nested dict of arrays (dtype kept).
    tokenizer: None, an object with `save(path)`, one whose `path` is an HF tokenizer
      directory (e.g. `agent_rl.tokenizers.load_hf`), or a sentencepiece `Tokenizer`.
    max_shard_bytes: shard the weights past this size.
  Returns:
    {"family", "files", "num_params"} of what was written.
  Raises:
    ValueError naming the field / param when the config has no HF equivalent in that
    family or the params do not match it.
  """
  if not isinstance(cfg, ModelConfig):
    raise ValueError(f"save_hf needs a ModelConfig, got {type(cfg).__name__}")
  if cfg.lora is not None:
    raise ValueError("save_hf: ModelConfig.lora is set; fold the adapters in first with "
                     "`models.lora.merge(cfg, params)` (or export them with `lora.to_peft`)")
  fam = family_for(cfg, family)
  tensors = hf_tensors(cfg, params, fam)
  files = _write(path, fam.to_hf_config(cfg), tensors, tokenizer, max_shard_bytes)
  return {"family": fam.name, "files": files,
          "num_params": int(sum(a.size for a in tensors.values()))}


SCORE_BIAS_KEY = "agent_rl_score_bias"  # config.json: the reward head's bias (HF's has none)


def save_hf_reward_model(path: str, cfg: ModelConfig, lm_params, head_kernel, head_bias, *,
                         pad_token_id: int, tokenizer=None, family: Optional[str] = None,
                         max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> Dict[str, Any]:
  """A reward model (decoder + scalar head) as the family's `...ForSequenceClassification`
  with `num_labels=1`, the layout TRL's and the hub's reward models use, so
  `transformers.AutoModelForSequenceClassification.from_pretrained(path)` loads it.

  HF reads the score at the last non-pad token (`pad_token_id`, written to config.json) with
  `score = Linear(hidden, 1, bias=False)`: our head's kernel becomes `score.weight` [1, E] and
  its bias, which HF's layer cannot hold, is written as config.json's `agent_rl_score_bias`:
  HF logits + agent_rl_score_bias = our score (a Bradley-Terry RM's comparisons do not
  depend on it; a PRM's probability sigmoid(score) does). The LM head is not written.

  Args: lm_params: the decoder's params (as `save_hf`); head_kernel [E, 1], head_bias [1].
  Returns {"family", "files", "num_params", "architecture"}.
  """
  import transformers  # the class must exist in the installed version to be loadable
  if cfg.lora is not None:
    raise ValueError("save_hf_reward_model: ModelConfig.lora is set; merge the adapters first")
  fam = family_for(cfg, family)
  arch = fam.architectures[0].replace("ForCausalLM", "ForSequenceClassification")
  if not hasattr(transformers, arch):
    raise ValueError(f"cannot export a reward model of family {fam.name!r}: transformers "
                     f"{transformers.__version__} has no {arch}")
  kernel = np.asarray(head_kernel, np.float32)
  if kernel.shape != (cfg.hidden, 1):
    raise ValueError(f"head kernel has shape {kernel.shape}, the decoder's hidden is {cfg.hidden}")
  tensors = {k: v for k, v in hf_tensors(cfg, lm_params, fam).items()
             if not k.startswith("lm_head.")}
  tensors["score.weight"] = np.ascontiguousarray(kernel.T.astype(
      next(iter(tensors.values())).dtype))
  hf_config = dict(fam.to_hf_config(cfg), architectures=[arch], id2label={"0": "LABEL_0"},
                   label2id={"LABEL_0": 0}, pad_token_id=int(pad_token_id),
                   **{SCORE_BIAS_KEY: float(np.asarray(head_bias).reshape(-1)[0])})
  files = _write(path, hf_config, tensors, tokenizer, max_shard_bytes)
  return {"family": fam.name, "architecture": arch, "files": files,
          "num_params": int(sum(a.size for a in tensors.values()))}
