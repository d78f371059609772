"""Export a run's policy as a Hugging Face checkpoint directory (or a PEFT adapter).

    python -m agent_rl.export --workdir=RUN --out=DIR [--checkpoint=best|latest] \
        [--lora=merged|adapter]

A reward-model run (`python -m agent_rl.reward.train`) exports its decoder + head as the
family's `...ForSequenceClassification` (num_labels 1, TRL's reward-model layout; see
`export_reward_model`).

Restores the policy LM of RUN (best-by-eval checkpoint by default, else the newest readable
one) through the one path that restores a run's policy (`train.pretrained.load_run_policy`)
and writes `config.json` + safetensors with `models.save_hf`, plus the run's tokenizer files
(the HF directory's own `tokenizer.json` / chat template when the run used one, else the
run's sentencepiece `tokenizer.model`), so `transformers.AutoModelForCausalLM
.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load it as they are.

A LoRA run (`ModelConfig.lora` set) exports either the merged weights (`--lora=merged`, the
default: W + alpha/r A B folded in, a plain checkpoint) or a PEFT adapter directory
(`--lora=adapter`: `adapter_config.json` + `adapter_model.safetensors`, with
`base_model_name_or_path` = the run's `model.init_from` when that is a HF directory) that
`peft.PeftModel.from_pretrained` loads onto the base model.

The export restores onto one device (the first of `jax.devices()`), whatever mesh the run
trained on: checkpoints are read with the reader's shardings, and writing safetensors
gathers every weight on the host anyway.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Optional

import ml_collections as mlc

LORA_MODES = ("merged", "adapter")


def _merged(out: str, cfg, params, tokenizer, base: Optional[str]) -> Dict[str, Any]:
  from agent_rl.models import lora, save_hf
  if cfg.lora is not None:
    cfg, params = lora.merge(cfg, params)
  return save_hf(out, cfg, params, tokenizer=tokenizer)


def _adapter(out: str, cfg, params, tokenizer, base: Optional[str]) -> Dict[str, Any]:
  from agent_rl.models import lora
  from agent_rl.models.hf_export import _save_tokenizer
  if cfg.lora is None:
    raise ValueError("--lora=adapter: the run has no LoRA adapters (ModelConfig.lora is None); "
                     "export the full weights with --lora=merged")
  files = lora.save_peft(out, cfg, params, base_model_name_or_path=base or None)
  if tokenizer is not None:  # PEFT dirs conventionally carry the tokenizer too
    files += _save_tokenizer(out, tokenizer)
  return {"family": "peft", "files": files,
          "num_params": int(sum(v.size for v in lora.to_peft(cfg, params).values()))}


# --lora mode -> writer(out, model_cfg, params, tokenizer, base_model_dir) -> save summary.
WRITERS: Dict[str, Callable[..., Dict[str, Any]]] = {"merged": _merged, "adapter": _adapter}


def export_policy(out: str, model_cfg, params, tokenizer=None, *, lora_mode: str = "merged",
                  base: Optional[str] = None) -> Dict[str, Any]:
  """Writes `params` (the policy LM's nnx.State / pure dict of `Transformer(model_cfg)`) to
  `out` as a HF checkpoint (`lora_mode="merged"`; adapters, if any, folded in) or a PEFT
  adapter (`"adapter"`, model_cfg.lora must be set; `base` goes to base_model_name_or_path).
  Returns save_hf's {"family", "files", "num_params"} (for an adapter: the adapter's)."""
  if lora_mode not in WRITERS:
    raise ValueError(f"--lora must be one of {LORA_MODES}, got {lora_mode!r}")
  return WRITERS[lora_mode](out, model_cfg, params, tokenizer, base)


def _one_device_mesh(c: mlc.ConfigDict) -> mlc.ConfigDict:
  m = c.mesh.copy_and_resolve_references()
  m.data, m.fsdp, m.tensor, m.num_devices = -1, 1, 1, 1
  for a in ("data", "fsdp", "tensor"):
    m.dcn[a] = 1
  return m


def run_tokenizer(workdir: str, c: mlc.ConfigDict):
  """The tokenizer the run in `workdir` used (configured path, HF init_from dir, or the one
  it trained into the workdir)."""
  from agent_rl.tokenizers import load_tokenizer
  from agent_rl.train.setup import tokenizer_path
  path = tokenizer_path(c) or os.path.join(workdir, "tokenizer.model")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{workdir}: the run's tokenizer {path} does not exist (a "
                            f"configured tokenizer.path / model.init_from moved or deleted?)")
  return load_tokenizer(path)


def export_run(workdir: str, out: str, *, which: str = "best", lora_mode: str = "merged",
               agent: int = -1) -> Dict[str, Any]:
  """Exports the policy of the agent_rl run in `workdir` to `out` (module docstring).
  agent: for a run with per-agent weights (config.agents.mode lora | separate), which agent's
  policy (required there; -1 = the run has one network).
  Returns {"checkpoint_step", "out", "family", "files", "num_params", ...the step's meta}."""
  from agent_rl.parallel.placement import make_placement
  from agent_rl.train.pretrained import (checkpoint_dir, load_run_config, load_run_policy,
                                         run_agents)
  from agent_rl.train.setup import is_hf_checkpoint
  if which not in ("best", "latest"):
    raise ValueError(f"--checkpoint must be best|latest, got {which!r}")
  if lora_mode not in WRITERS:
    raise ValueError(f"--lora must be one of {LORA_MODES}, got {lora_mode!r}")
  if not os.path.isdir(workdir):
    raise FileNotFoundError(f"--workdir {workdir!r} is not a directory")
  c = load_run_config(workdir)  # names the missing WORKDIR/config.json
  if not os.path.isdir(checkpoint_dir(workdir)):
    raise FileNotFoundError(f"{checkpoint_dir(workdir)}: no checkpoints in this workdir")
  if c.model.init_from and not os.path.isdir(c.model.init_from):
    raise FileNotFoundError(f"{workdir}/config.json: model.init_from {c.model.init_from!r} "
                            "(the run's model config and tokenizer) is no longer a directory")
  if os.path.abspath(out) == os.path.abspath(workdir):
    raise ValueError(f"--out {out!r} is the run's workdir; choose a new directory")
  if _run_phase(workdir) == REWARD_PHASE:
    if agent not in (-1, 0):
      raise ValueError(f"--agent {agent}: {workdir} is a reward-model run (one network)")
    return export_reward_model(workdir, out, which=which, mesh=_one_device_mesh(c))
  ag = run_agents(workdir)
  if ag.stacked and not 0 <= agent < ag.num:
    raise ValueError(f"--agent: the run holds {ag.num} agents' weights (agents.mode="
                     f"{ag.mode!r}); pass --agent in [0, {ag.num})")
  if not ag.stacked and agent not in (-1, 0):
    raise ValueError(f"--agent {agent}: the run has one network (agents.mode=shared)")
  tok = run_tokenizer(workdir, c)
  place = make_placement(_one_device_mesh(c))
  with place.context():
    rp = load_run_policy(workdir, tok.vocab_size, place, which=which)
    if ag.stacked:  # agent k's slice is an ordinary (LoRA) policy
      from agent_rl.agents.params import select_agent
      rp = rp._replace(params=select_agent(ag.mode, rp.params, agent, lm_only=True))
    # PEFT's base_model_name_or_path must be loadable by transformers: a HF dir, not a run.
    base = c.model.init_from if is_hf_checkpoint(c.model.init_from) else None
    info = export_policy(out, rp.model_cfg, rp.params, tok, lora_mode=lora_mode, base=base)
  return {"checkpoint_step": rp.step, **rp.meta, "out": out, **info}


REWARD_PHASE = "reward_model"  # reward.train's checkpoint phase


def _run_phase(workdir: str):
  from agent_rl.train.checkpoint import RunCheckpoint
  from agent_rl.train.pretrained import checkpoint_dir
  ck = RunCheckpoint(checkpoint_dir(workdir), async_save=False, read_only=True)
  try:
    return ck.meta().get("phase")
  finally:
    ck.close()


def export_reward_model(workdir: str, out: str, *, which: str = "best", mesh=None
                        ) -> Dict[str, Any]:
  """A `reward.train` run's reward model (best held-out checkpoint by default) as a HF
  `...ForSequenceClassification` directory (`models.hf_export.save_hf_reward_model`: HF
  logits + config.json's `agent_rl_score_bias` = our score, read at the last non-pad token)
  with the run's tokenizer; `AutoModelForSequenceClassification.from_pretrained(out)` loads it."""
  from agent_rl.models.hf_export import save_hf_reward_model
  from agent_rl.parallel.placement import make_placement
  from agent_rl.reward.use import restore_reward_model
  from agent_rl.train.pretrained import load_run_config
  place = make_placement(mesh if mesh is not None else _one_device_mesh(load_run_config(workdir)))
  with place.context():
    from flax import nnx
    rm = restore_reward_model(workdir, place, which=which, field="--workdir")
    p = nnx.to_pure_dict(rm.source.params)
    info = save_hf_reward_model(out, rm.model_cfg, p["lm"], p["head"]["kernel"],
                                p["head"]["bias"], pad_token_id=rm.tokenizer.pad_id,
                                tokenizer=rm.tokenizer)
  return {"checkpoint_step": rm.source.step, "kind": rm.source.kind, "out": out, **info}


def main(argv):
  from absl import flags, logging
  del argv
  logging.set_verbosity(logging.WARNING)
  f = flags.FLAGS
  print(json.dumps(export_run(f.workdir, f.out, which=f.checkpoint, lora_mode=f.lora,
                              agent=f.agent), indent=2, default=str))


def _define_flags():
  from absl import flags
  flags.DEFINE_string("workdir", None, "the run's workdir (config.json, checkpoints/)")
  flags.DEFINE_string("out", None, "the directory to write the HF checkpoint / PEFT adapter to")
  flags.DEFINE_enum("checkpoint", "best", ["best", "latest"], "which checkpoint of the run")
  flags.DEFINE_enum("lora", "merged", list(LORA_MODES),
                    "LoRA runs: merged weights or a PEFT adapter directory")
  flags.DEFINE_integer("agent", -1, "runs with per-agent weights: which agent to export")
  flags.mark_flags_as_required(["workdir", "out"])


if __name__ == "__main__":
  from absl import app
  _define_flags()
  app.run(main)
