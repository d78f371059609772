"""Weights from elsewhere: another agent_rl run (a distillation teacher, or a warm start for
`config.model.init_from`) or a Hugging Face safetensors directory.

A run writes its resolved config to `WORKDIR/config.json` at start-up, so a later run can
rebuild the model from the workdir alone: preset and sizes from the config, vocabulary from
the run's `tokenizer.model`, weights from the best-by-eval checkpoint when there is one,
else the newest readable one (`RunCheckpoint.restore_params`).
Everything is restored straight onto the current mesh (shardings of the reader, not the writer).
"""
from __future__ import annotations

import json
import os
from typing import Any, NamedTuple, Optional

import jax
import ml_collections as mlc
from flax import nnx

from agent_rl.parallel.params import state_shardings
from agent_rl.parallel.placement import Placement
from agent_rl.train.checkpoint import RunCheckpoint
from agent_rl.train import provenance
from agent_rl.train.config import base_config, is_free_dict
from agent_rl.train.setup import model_config, model_factory
from agent_rl.train.state import state_spec

CONFIG_FILE = "config.json"


def save_run_config(c: mlc.ConfigDict, workdir: str) -> None:
  """At each start-up: the resolved config (WORKDIR/config.json) and which code runs it (a
  line of WORKDIR/code.jsonl: train/provenance.py)."""
  if jax.process_index() == 0:
    with open(os.path.join(workdir, CONFIG_FILE), "w") as f:
      f.write(c.to_json_best_effort(indent=2, sort_keys=True))
    provenance.record_start(workdir)


def load_run_config(workdir: str) -> mlc.ConfigDict:
  """The config a run wrote into its workdir, over today's defaults (new fields keep theirs)."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: not an agent_rl run directory (no {CONFIG_FILE})")
  with open(path) as f:
    saved = json.load(f)
  c = base_config()
  free: dict = {}
  try:
    c.update_from_flattened_dict(_flatten(saved, free=free))
    for key, value in free.items():  # kwargs dicts: whatever the run set, as it set it
      *parents, leaf = key.split(".")
      block = c
      for p in parents:
        block = block[p]
      block[leaf] = mlc.ConfigDict(value)
  except (KeyError, TypeError, AttributeError) as e:
    raise ValueError(f"{path}: cannot read field {e}") from None
  return c


def _flatten(d: dict, prefix: str = "", *, free: dict) -> dict:
  """Flat `a.b.c -> value` of the typed fields; the free kwargs dicts go to `free`."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and is_free_dict(k):
      free[f"{prefix}{k}"] = v
    elif isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}.", free=free))
    else:
      out[f"{prefix}{k}"] = tuple(v) if isinstance(v, list) else v
  return out


def run_tokenizer_path(workdir: str) -> str:
  c = load_run_config(workdir)
  return c.tokenizer.path or os.path.join(workdir, "tokenizer.model")


def checkpoint_dir(workdir: str) -> str:
  return os.path.join(workdir, "checkpoints")


class RunPolicy(NamedTuple):
  model_cfg: Any
  lm_graphdef: Any
  params: Any  # the policy LM's params, on the reader's mesh
  step: int  # the checkpoint step they come from
  meta: dict  # that checkpoint's meta (phase, iteration, ...)


AGENTS_FILE = "agents.json"  # the run's resolved agents (config.agents.num may say 0: the env's)


def save_run_agents(agents, workdir: str) -> None:
  if jax.process_index() == 0:
    with open(os.path.join(workdir, AGENTS_FILE), "w") as f:
      json.dump({"mode": agents.mode, "num": agents.num}, f)


def run_agents(workdir: str):
  """agents.Agents of a run (its params are stacked for lora / separate): WORKDIR/agents.json
  as the run resolved them, else (older runs) the saved config's."""
  from agent_rl.agents.config import Agents
  path = os.path.join(workdir, AGENTS_FILE)
  if os.path.exists(path):
    with open(path) as f:
      d = json.load(f)
    return Agents(str(d["mode"]), int(d["num"]))
  tc = load_run_config(workdir)
  return Agents(tc.agents.mode, max(int(tc.agents.num), 1))


def load_run_policy(workdir: str, vocab_size: int, place: Placement, *, which: str = "best",
                    step: Optional[int] = None, compute: Any = None) -> RunPolicy:
  """The policy of a finished or running agent_rl run, on `place`:
  the best-by-eval step (else the newest readable one; `which="latest"`: the newest; `step`:
  exactly that checkpoint step). The one
  path that restores a run's policy (evaluation, distillation teacher, `model.init_from`);
  only the policy LM's params are read (no optimizer state, no critic). `compute`: this
  process's ModelConfig, whose remat and prefill chunks the policy then computes with
  (ModelConfig.computing_as; None: the run's own)."""
  tc = load_run_config(workdir)
  mcfg = model_config(tc, vocab_size)
  if compute is not None:
    mcfg = mcfg.computing_as(compute)
  spec = state_spec(model_factory(tc, mcfg, run_agents(workdir)), place)
  d = checkpoint_dir(workdir)
  if not os.path.isdir(d):
    raise FileNotFoundError(f"{workdir}: no checkpoints/ directory")
  ck = RunCheckpoint(d, async_save=False, read_only=True)
  try:
    restored = ck.restore_params(spec.abstract_params(lm_only=True), which=which, lm_only=True,
                                 step=step)
  finally:
    ck.close()
  return RunPolicy(mcfg, spec.lm_graphdef, restored.params, restored.step, restored.meta)


def load_hf_policy(path: str, model_cfg: Any, place: Placement, *, seed: int = 0) -> Any:
  """LM params of a HF safetensors dir, checked against the run's model config, on `place`;
  with `model_cfg.lora`, fresh adapters (B = 0, A from `seed`) on the checkpoint's weights."""
  import dataclasses
  from agent_rl.models import load_hf
  from agent_rl.models.hf_import import config_from_hf
  hf_cfg, _ = config_from_hf(path, dtype=model_cfg.dtype, param_dtype=model_cfg.param_dtype)
  # How the run computes (remat, prefill chunks, LoRA adapters) is not part of the checkpoint.
  hf_cfg = dataclasses.replace(hf_cfg, lora=model_cfg.lora).computing_as(model_cfg)
  diff = [f"{f.name}={getattr(hf_cfg, f.name)!r} (run: {getattr(model_cfg, f.name)!r})"
          for f in dataclasses.fields(model_cfg)
          if getattr(hf_cfg, f.name) != getattr(model_cfg, f.name)]
  if diff:
    raise ValueError(f"config.model.init_from: {path} does not match the run's model: "
                     f"{', '.join(diff)}; set config.model.preset / sizes / tokenizer to match")
  params = nnx.split(load_hf(path, dtype=model_cfg.dtype, param_dtype=model_cfg.param_dtype))[1]
  if model_cfg.lora is not None:  # a HF checkpoint has no adapters: LoRA starts at the base
    from agent_rl.models import lora
    params = lora.attach(model_cfg, params, seed=seed)
  return jax.device_put(params, state_shardings(params, place.mesh, place.rules))


def init_agent_from(path: str, model_cfg: Any, place: Placement, field: str) -> Any:
  """The policy LM params of a single-network agent_rl run (its best step), checked against
  the run's model (errors name `field`)."""
  agents = run_agents(path)
  if agents.stacked:
    raise ValueError(f"{field}: the run in {path} holds agents {agents.tag!r} "
                     "(stacked per-agent weights); start from a single-network run")
  mcfg, _, params, _, _ = load_run_policy(path, model_cfg.vocab_size, place, compute=model_cfg)
  if mcfg != model_cfg:
    raise ValueError(f"{field}: the run in {path} has model {mcfg}, this run {model_cfg}")
  return params


def init_from(c: mlc.ConfigDict, model_cfg: Any, place: Placement) -> Any:
  """LM params named by `config.model.init_from` (an agent_rl workdir or a HF directory)."""
  path = c.model.init_from
  if os.path.exists(os.path.join(path, CONFIG_FILE)) and not os.path.exists(
      os.path.join(path, "model.safetensors")) and not os.path.exists(
      os.path.join(path, "model.safetensors.index.json")):
    return init_agent_from(path, model_cfg, place, "config.model.init_from")
  if os.path.isdir(path):
    return load_hf_policy(path, model_cfg, place, seed=int(c.seed))
  raise FileNotFoundError(f"config.model.init_from: {path!r} is not a directory")
