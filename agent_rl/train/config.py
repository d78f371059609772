"""The one base config of sane defaults; paper configs in configs/ are small deltas over it.

`base_config()` returns an ml_collections ConfigDict whose fields are type-locked (a wrong
type in `--config.x=y` fails at parse time, naming the field) and `validate(config)` checks
values, registry names and sizes at start-up, before anything is compiled.
"""
from __future__ import annotations

import ml_collections as mlc


def base_config() -> mlc.ConfigDict:
  c = mlc.ConfigDict()
  c.seed = 0
  c.scale = "tiny"  # documentation only: which scale a paper config was built at

  c.model = mlc.ConfigDict(dict(
      preset="tiny",
      # Overrides of the preset (0 / "" keep the preset's value).
      hidden=0, num_layers=0, num_heads=0, num_kv_heads=0, intermediate=0,
      init_from="",  # a HF safetensors dir or an agent_rl checkpoint dir ("" = random init)
      critic="none",  # none | shared (value head on the policy trunk) | separate
  ))
  c.tokenizer = mlc.ConfigDict(dict(
      path="",  # an existing sentencepiece .model; "" trains one on env text into workdir
      vocab_size=384,
  ))
  c.env = mlc.ConfigDict(dict(name="sokoban", kwargs=mlc.ConfigDict()))
  c.rollout = mlc.ConfigDict(dict(
      num_tasks=16, group_size=8, max_turns=5, max_action_tokens=16,
      temperature=1.0, top_p=1.0, top_k=0,
      history="concatenated",  # concatenated | windowed
      window_turns=2, window_tokens=256,
      strategy="plain", strategy_kwargs=mlc.ConfigDict(),
  ))
  c.credit = mlc.ConfigDict(dict(name="grpo", kwargs=mlc.ConfigDict()))
  c.loss = mlc.ConfigDict(dict(
      name="vanilla", agg_mode="token-mean", kwargs=mlc.ConfigDict(),
      entropy_coef=0.0,
      kl_coef=0.0,  # > 0 adds a KL-to-reference loss term (needs a reference model)
      kl_type="low_var_kl",
      kl_in_reward=0.0,  # > 0 subtracts beta * KL from turn rewards (fixed controller)
      value_coef=0.5, value_clip=0.5,
  ))
  c.optim = mlc.ConfigDict(dict(
      name="adamw", lr=3e-4, warmup_steps=0, schedule="constant", weight_decay=0.0,
      b1=0.9, b2=0.95, clip_norm=1.0, grad_accum=1, total_steps=0,
  ))
  c.train = mlc.ConfigDict(dict(
      iterations=20, epochs=1, minibatch_episodes=64,
      log_every=1, eval_every=5, ckpt_every=5, keep_checkpoints=3,
      halt_on_nan=True,
  ))
  c.sft = mlc.ConfigDict(dict(
      steps=0, batch_size=32, lr=1e-3, num_demos=512, world_model=False,
  ))
  c.eval = mlc.ConfigDict(dict(num_tasks=64, seed=10_000, greedy=True, k=4))
  c.mesh = mlc.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  return c


def validate(c: mlc.ConfigDict) -> None:
  """Checks values and registry names; raises ValueError naming the field."""
  from agent_rl import credit, envs, losses  # noqa: registries
  from agent_rl.models import PRESETS

  def need(cond: bool, field: str, msg: str) -> None:
    if not cond:
      raise ValueError(f"config.{field}: {msg}")

  need(c.model.preset in PRESETS, "model.preset",
       f"unknown preset {c.model.preset!r}; known: {', '.join(sorted(PRESETS))}")
  need(c.model.critic in ("none", "shared", "separate"), "model.critic",
       f"must be none|shared|separate, got {c.model.critic!r}")
  need(c.env.name in envs.ENVS, "env.name",
       f"unknown environment {c.env.name!r}; known: {', '.join(envs.ENVS.names())}")
  need(c.credit.name in credit.CREDIT, "credit.name",
       f"unknown credit kernel {c.credit.name!r}; known: {', '.join(credit.names())}")
  need(c.loss.name in losses.LOSSES, "loss.name",
       f"unknown loss {c.loss.name!r}; known: {', '.join(losses.LOSSES.names())}")
  need(c.loss.agg_mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"), "loss.agg_mode",
       f"unknown aggregation mode {c.loss.agg_mode!r}")
  from agent_rl.rollout.strategies import STRATEGIES
  need(c.rollout.strategy in STRATEGIES, "rollout.strategy",
       f"unknown rollout strategy {c.rollout.strategy!r}; known: {', '.join(STRATEGIES.names())}")
  need(c.rollout.history in ("concatenated", "windowed"), "rollout.history",
       f"must be concatenated|windowed, got {c.rollout.history!r}")
  for f in ("num_tasks", "group_size", "max_turns", "max_action_tokens"):
    need(c.rollout[f] >= 1, f"rollout.{f}", f"must be >= 1, got {c.rollout[f]}")
  need(c.rollout.temperature >= 0, "rollout.temperature", "must be >= 0")
  need(0 < c.rollout.top_p <= 1, "rollout.top_p", f"must be in (0, 1], got {c.rollout.top_p}")
  n = c.rollout.num_tasks * c.rollout.group_size
  need(c.train.minibatch_episodes >= 1 and n % c.train.minibatch_episodes == 0,
       "train.minibatch_episodes",
       f"{c.train.minibatch_episodes} must divide num_tasks*group_size = {n}")
  need(c.optim.lr > 0, "optim.lr", "must be > 0")
  need(c.optim.grad_accum >= 1, "optim.grad_accum", "must be >= 1")
  need(c.optim.schedule in ("constant", "cosine"), "optim.schedule",
       f"must be constant|cosine, got {c.optim.schedule!r}")
  need(c.train.iterations >= 0, "train.iterations", "must be >= 0")
  need(c.train.epochs >= 1, "train.epochs", "must be >= 1")
  need(c.sft.steps >= 0, "sft.steps", "must be >= 0")
  need(c.loss.kl_coef >= 0 and c.loss.kl_in_reward >= 0, "loss.kl_coef",
       "KL coefficients must be >= 0")


def scaled_config(arg: str | None):
  """(config, variant set) for `get_config(arg)`: `tiny` (default, one CPU) or `full`."""
  args = set((arg or "tiny").split(","))
  c = base_config()
  c.scale = "full" if "full" in args else "tiny"
  if c.scale == "tiny":
    c.model.preset = "tiny"
    c.model.hidden, c.model.num_layers, c.model.num_heads = 128, 2, 4
    c.model.num_kv_heads, c.model.intermediate = 2, 384
    c.tokenizer.vocab_size = 768
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 5, 8
    c.sft.steps, c.sft.batch_size, c.sft.num_demos, c.sft.lr = 100, 32, 256, 2e-3
    c.optim.lr = 2e-4
    c.train.iterations, c.train.minibatch_episodes = 30, 64
    c.train.eval_every, c.train.ckpt_every = 10, 10
    c.eval.num_tasks, c.eval.k = 64, 4
  else:
    c.model.preset = "qwen2.5-0.5b"
    c.tokenizer.vocab_size = 4096
    c.rollout.num_tasks, c.rollout.group_size = 8, 16
    c.rollout.max_turns, c.rollout.max_action_tokens = 5, 64
    c.sft.steps = 0
    c.optim.lr = 1e-6
    c.train.iterations, c.train.minibatch_episodes = 200, 32
    c.eval.num_tasks = 256
  return c, args
