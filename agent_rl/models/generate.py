"""Standalone prompt sampling: prefill a prompt, then the rollout's own token decode loop.

`generate` is a thin driver over `agent_rl.models.sampler` (the one sampler; see its
docstring for why it lives in this room): it does for a plain prompt what
`rollout.EpisodeLoop.act` does for a turn (window mode): prefill into a fresh cache,
computing logits only at each row's last prompt token (`prefill(..., rows=last)`), then
`decode_loop` with per-row keys, stop tokens and the same top-k / top-p / greedy draw.
So `benchmarks/generate.py`, which times `generate`, measures the code path RL samples with.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models.cache import init_cache
from agent_rl.models.inference import decode_step, prefill
from agent_rl.models.sampler import Generation, SamplerConfig, decode_loop


@functools.partial(jax.jit, static_argnums=(0, 5))
def generate(graphdef, state, prompt: jax.Array, prompt_valid: jax.Array, key: jax.Array,
             cfg: SamplerConfig) -> Generation:
  """Samples up to `cfg.max_tokens` continuation tokens of a (left- or right-padded) prompt.

  The cache holds exactly P + max_tokens slots: every sampled token is written to it, as in
  the rollout, where later turns attend to it.

  Args:
    graphdef, state: `nnx.split(Transformer)`.
    prompt: [B, P] int32; prompt_valid: [B, P] bool (each row needs >= 1 valid token).
    key: one PRNG key (typed or raw); row r samples with `jax.random.split(key, B)[r]`.
    cfg: static `SamplerConfig` (temperature / top-k / top-p / greedy, max_tokens, stops).
  Returns:
    `Generation` with `[B, cfg.max_tokens]` tokens / valid / logp_raw (temperature-1
    behaviour log-probs) / logp_sample (under the sampled distribution), length, stopped.
  """
  if not isinstance(cfg, SamplerConfig):
    raise TypeError(f"generate: cfg must be a SamplerConfig, got {type(cfg).__name__}")
  if prompt.ndim != 2 or prompt_valid.shape != prompt.shape:
    raise ValueError(f"generate: prompt [B, P] and prompt_valid [B, P] must match, got "
                     f"{prompt.shape} and {prompt_valid.shape}")
  model_cfg = nnx.merge(graphdef, state).cfg
  b, p = prompt.shape
  prompt_valid = prompt_valid.astype(jnp.bool_)
  # Positions count valid tokens only, so left and right padding give the same rotary phases.
  positions = jnp.maximum(jnp.cumsum(prompt_valid, axis=1) - 1, 0).astype(jnp.int32)
  cache = init_cache(model_cfg, b, p + cfg.max_tokens, model_cfg.compute_dtype)
  last = jnp.max(jnp.where(prompt_valid, jnp.arange(p), 0), axis=1).astype(jnp.int32)
  logits, _, cache = prefill(graphdef, state, prompt.astype(jnp.int32), positions,
                             prompt_valid, cache, last)

  def decode(tok, pos, cache, valid):
    logits, _, cache = decode_step(graphdef, state, tok, pos, cache, valid)
    return logits, cache

  next_pos = jnp.sum(prompt_valid, axis=1).astype(jnp.int32)
  gen, _ = decode_loop(decode, logits, cache, next_pos, jnp.ones((b,), bool),
                       jax.random.split(key, b), cfg)
  return gen
