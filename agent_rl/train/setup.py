"""Builds what a run needs from its config: tokenizer, environment, prompt pieces, model.

The tokenizer of the tiny runs is trained here on the environment's own text (instruction,
rendered states of sampled tasks, well-formed answers and the chat scaffolding, plus the
SPA world-model turns when `config.sft.world_model` is on), so it is compact on exactly the
text the agent reads and writes; nothing is downloaded.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import ml_collections as mlc

from agent_rl import envs, models
from agent_rl.envs.tasks import plan_format, sample_tasks
from agent_rl.data.world_model import spa_plans
from agent_rl.rollout.layout import PromptPieces, chat_pieces
from agent_rl.tokenizers import ByteTokenizer, Tokenizer, load_tokenizer, train_tokenizer

SYSTEM_PROMPT = "You are a helpful agent."


def env_corpus(env_name: str, env_kwargs: dict, num_tasks: int = 64, seed: int = 0, *,
               world_model: bool = False) -> list[str]:
  """Text an environment shows and expects: its instruction, states and answers.

  world_model: also the SPA turns of the solver plans (think block with structured states,
    `agent_rl.data.world_model`), so the tokenizer is compact on world-model SFT text too.
    Off, the corpus (hence the trained tokenizer) is exactly what it was without SPA.
  """
  env = envs.make(env_name, tokenizer=ByteTokenizer(), **env_kwargs)
  # The prompt scaffolding appears in every sequence: weight it so BPE merges it into few
  # tokens (each training sequence starts with it, so it dominates the context length).
  texts = [env.instruction, "system\n" + SYSTEM_PROMPT, "user\n", "assistant\n"] * 32
  tasks = sample_tasks(env, range(seed, seed + num_tasks))
  plans = []
  for i in range(num_tasks):
    task = jax.tree.map(lambda x: x[i], tasks)
    texts.append(env.render_text(task))
    if hasattr(env, "episode_texts"):  # pages past the first (MiniShop's results and items)
      texts += env.episode_texts(task)
    try:
      plan = env.solve(task)
    except Exception:  # noqa: BLE001 — an unsolvable sample only loses corpus text
      plan = []
    plans.append(plan[:8])
    texts += [plan_format(env).format(a) for a in plan[:8]]
  if world_model:
    texts += [t for turns in spa_plans(env_name, env, tasks, plans, 8) for t in turns]
  return texts


def tokenizer_path(c: mlc.ConfigDict) -> str:
  """`config.tokenizer.path` (a sentencepiece .model or a HF tokenizer directory); when it is
  empty and `model.init_from` is a HF checkpoint directory, that checkpoint's own tokenizer."""
  if c.tokenizer.path:
    return c.tokenizer.path
  d = c.model.init_from
  if d and os.path.isfile(os.path.join(d, "tokenizer.json")):
    return d
  return ""


def build_tokenizer(c: mlc.ConfigDict, workdir: str):
  """Loads the configured tokenizer (`tokenizer_path`), or trains one on env text into the
  workdir (reused)."""
  path = tokenizer_path(c)
  if path:
    return load_tokenizer(path)
  path = os.path.join(workdir, "tokenizer.model")
  if not os.path.exists(path):
    from agent_rl.envs.host import build as host_envs
    texts = (host_envs.corpus(c) if host_envs.is_host(c.env.name) else
             env_corpus(c.env.name, dict(c.env.kwargs), world_model=bool(c.sft.world_model)))
    symbols = env_symbols(c)
    try:
      train_tokenizer(texts, path, c.tokenizer.vocab_size, hard_vocab_limit=False,
                      extra_symbols=symbols)
    except ValueError as e:  # e.g. too small for the env's symbols: name the config field
      raise ValueError(f"config.tokenizer.vocab_size ({len(symbols)} env symbols): {e}") from e
  return Tokenizer.load(path)


def env_symbols(c: mlc.ConfigDict) -> tuple:
  """The env's `tokenizer_symbols` when `tokenizer.env_symbols` is on (else ()); an env
  without them is an error naming the field."""
  if not c.tokenizer.get("env_symbols", False):
    return ()
  from agent_rl.envs.host import build as host_envs
  if host_envs.is_host(c.env.name):
    raise ValueError(f"config.tokenizer.env_symbols: host env {c.env.name!r} has no "
                     "tokenizer_symbols; set it to False")
  env = envs.make(c.env.name, tokenizer=ByteTokenizer(), **dict(c.env.kwargs))
  symbols = tuple(getattr(env, "tokenizer_symbols", ()))
  if not symbols:
    raise ValueError(f"config.tokenizer.env_symbols: env {c.env.name!r} names no "
                     "tokenizer_symbols (MiniShop does: its item ids); set it to False")
  return symbols


@dataclasses.dataclass(frozen=True)
class Setup:
  tokenizer: Any
  env: Any
  pieces: PromptPieces
  model_cfg: models.ModelConfig
  agents: Any = None  # agents.Agents: the run's agents (mode, count), from config and env


def build(c: mlc.ConfigDict, workdir: str) -> Setup:
  from agent_rl.envs.host import build as host_envs
  tok = build_tokenizer(c, workdir)
  env = (host_envs.make_env(c, tok) if host_envs.is_host(c.env.name) else  # a worker pool
         envs.make(c.env.name, tokenizer=tok, **dict(c.env.kwargs)))
  pieces = chat_pieces(tok, env.instruction, SYSTEM_PROMPT)
  mcfg = model_config(c, tok.vocab_size)
  from agent_rl.agents.config import resolve
  return Setup(tokenizer=tok, env=env, pieces=pieces, model_cfg=mcfg, agents=resolve(c, env))


def eval_variants(c: mlc.ConfigDict, setup: Setup) -> tuple:
  """`(name, env, pieces)` of each `config.eval.variant_kwargs` panel: the run's env with
  those kwargs over `env.kwargs` (errors name the panel)."""
  out = []
  for name, over in sorted(dict(c.eval.variant_kwargs).items()):
    if not hasattr(over, "items") or not name or "/" in name:
      raise ValueError(f"config.eval.variant_kwargs.{name}: must map a panel name (no '/') to "
                       f"a dict of env kwargs, got {over!r}")
    try:
      env = envs.make(c.env.name, tokenizer=setup.tokenizer, **{**dict(c.env.kwargs), **dict(over)})
    except (TypeError, ValueError) as e:
      raise ValueError(f"config.eval.variant_kwargs.{name}: {e}") from None
    out.append((name, env, chat_pieces(setup.tokenizer, env.instruction, SYSTEM_PROMPT)))
  return tuple(out)


LOGIT_CHUNK_ELEMENTS = 2 ** 24  # f32 logits per chunk of the learner's log-probs (64 MiB)
SMALL_VOCAB = 8192  # at or below, a minibatch's logits are about one block's MLP activations


def logprob_chunk(configured: int, vocab_size: int) -> int:
  """Tokens per log-prob chunk: `model.logprob_chunk`, or for -1 (auto) materialized logits
  (0) when V <= 8,192, else max(256, 2**24 // V). Measured on the main job (V = 768, 64 x 392
  tokens a minibatch): one RL update took 3.1-3.4 s chunked vs 2.4-2.8 s materialized, so
  chunking pays only where the logits dominate memory (real vocabularies)."""
  if configured != -1:
    return configured
  return 0 if vocab_size <= SMALL_VOCAB else max(256, LOGIT_CHUNK_ELEMENTS // vocab_size)


def model_factory(c: mlc.ConfigDict, model_cfg: models.ModelConfig, agents=None):
  """`() -> ActorCritic` of the run (policy LM + the configured critic), seeded by config.seed;
  with `agents` (agents.Agents) of a stacked mode, its K agents' leaves stacked
  (agents.params.stacked_factory)."""
  from flax import nnx
  from agent_rl.agents.params import stacked_factory
  from agent_rl.train.policy import ActorCritic
  chunk = logprob_chunk(int(c.model.logprob_chunk), model_cfg.vocab_size)
  make = lambda seed: ActorCritic(model_cfg, c.model.critic, logprob_chunk=chunk,
                                  rngs=nnx.Rngs(seed))
  if agents is None:
    return lambda: make(c.seed)
  return stacked_factory(make, agents.mode, agents.num, int(c.seed))


def is_hf_checkpoint(path: str) -> bool:
  """A Hugging Face checkpoint directory (safetensors weights), not an agent_rl workdir."""
  return bool(path) and any(os.path.exists(os.path.join(path, f)) for f in
                            ("model.safetensors", "model.safetensors.index.json"))


def model_config(c: mlc.ConfigDict, vocab_size: int) -> models.ModelConfig:
  """The preset of `config.model` with its non-zero size / non-empty dtype overrides and the
  tokenizer's vocab; with `model.init_from` a HF checkpoint, that checkpoint's own config
  (family, sizes, vocabulary), with the dtype / remat overrides."""
  if is_hf_checkpoint(c.model.init_from):
    from agent_rl.models.hf_import import config_from_hf
    kw = {k: c.model[k] for k in ("dtype", "param_dtype") if c.model.get(k)}
    cfg, _ = config_from_hf(c.model.init_from, **kw)
    return dataclasses.replace(cfg, lora=_lora(c), **_compute_fields(c))
  over = {k: int(c.model[k]) for k in ("hidden", "num_layers", "num_heads", "num_kv_heads",
                                       "intermediate") if c.model[k]}
  if "hidden" in over and "num_heads" in over:
    over["head_dim"] = over["hidden"] // over["num_heads"]
  over.update({k: c.model[k] for k in ("dtype", "param_dtype") if c.model.get(k)})
  over.update(_compute_fields(c))
  over["lora"] = _lora(c)
  return models.get_preset(c.model.preset, vocab_size=vocab_size, **over)


def _compute_fields(c: mlc.ConfigDict) -> dict:
  """How the run computes (`models.config.COMPUTE_FIELDS`: remat, prefill_chunk,
  attention_block) from `config.model`, ModelConfig's defaults where an older run's config
  lacks them."""
  from agent_rl.models.config import COMPUTE_FIELDS
  return {f: c.model.get(f, getattr(models.ModelConfig, f)) for f in COMPUTE_FIELDS}


def _lora(c: mlc.ConfigDict):
  """`config.model.lora` as a LoraConfig (None when off or absent in an older run's config)."""
  if "lora" not in c.model:
    return None
  from agent_rl.train.config import lora_config
  return lora_config(c)
