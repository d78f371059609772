"""The one token sampler: temperature / top-k / top-p / greedy draws and the token decode loop.

Every sampled token in the codebase comes from here: the rollout's turns (`EpisodeLoop.act`
via `agent_rl.rollout.sampler`, which re-exports this module), the host bridge, TSR search
and the standalone prompt sampler `agent_rl.models.generate` that `benchmarks/generate.py`
times. One code path means the benchmark measures what RL runs.

Why this lives in `models/` and not in `rollout/`: the import graph points rollout -> models
(`rollout.Policy.from_model` uses the Transformer's prefill/decode_step), never the reverse,
and the standalone `models.generate` needs the sampler. The sampler itself needs nothing of
the model (it takes a `decode` callable and an opaque cache), so it sits at the bottom, in
the lower room; `rollout/sampler.py` keeps the rollout's import path.

Sampling is one-uniform inverse-CDF: for each row one u ~ U(0, 1] picks the first token whose
cumulative probability reaches u * total (Devroye, 1986, "Non-Uniform Random Variate
Generation", ch. III), one cumsum instead of the V uniforms a Gumbel-max draw needs (Holtzman
et al., 2020, arXiv:1904.09751 for nucleus/top-p; Fan et al., 2018 for top-k). The full-V
cumsum is kept (an earlier demo sampler used a two-level block CDF, cheaper on CPU) because
a different summation order rounds differently and would change the tokens every existing
rollout and replay draws for a given key.

Two log-probs are returned for every generated token:
  logp_raw     log softmax(logits)[token], the raw policy at temperature 1. This is the
               behaviour log-prob the PPO/GRPO ratio needs (it equals what a training-time
               `forward` gives on the stored tokens).
  logp_sample  log-prob under the distribution actually sampled from (temperature, top-k,
               top-p applied; 0 for greedy), for importance corrections of the sampler.

Randomness is per row (`keys [B]` typed or `[B, 2]` uint32): a row's tokens depend only on its
own key, so the same episode samples the same tokens whatever batch it is in (host bridge,
TSR expansion, replays from `episode_key`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Tuple

import jax
import jax.numpy as jnp
from flax import struct


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
  """How one turn is sampled.

  temperature: > 0; divides the logits before top-k/top-p.
  top_p: nucleus mass in (0, 1]; 1 disables it.
  top_k: keep the k most likely tokens; 0 disables it.
  greedy: argmax decoding (temperature/top-k/top-p ignored; logp_sample = 0).
  max_tokens: the per-turn token budget.
  stop_tokens: generation of a row stops after it emits any of these (the stop token is kept).
  """
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  greedy: bool = False
  max_tokens: int = 32
  stop_tokens: Tuple[int, ...] = ()

  def __post_init__(self):
    if not self.temperature > 0:
      raise ValueError(f"SamplerConfig.temperature must be > 0, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"SamplerConfig.top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"SamplerConfig.top_k must be >= 0, got {self.top_k}")
    if self.max_tokens < 1:
      raise ValueError(f"SamplerConfig.max_tokens must be >= 1, got {self.max_tokens}")
    object.__setattr__(self, "stop_tokens", tuple(int(s) for s in self.stop_tokens))


def sampling_logprobs(logits: jax.Array, cfg: SamplerConfig) -> jax.Array:
  """`[..., V]` log-probs of the sampling distribution (-inf outside top-k / top-p).

  The dense reference of what `sample` draws from; used by tests and by importance
  corrections. Ties at the top-k / top-p boundary are broken by token id (stable sort).
  """
  logits = logits.astype(jnp.float32)
  if cfg.greedy:
    top = jnp.argmax(logits, axis=-1)
    return jnp.where(jnp.arange(logits.shape[-1]) == top[..., None], 0.0, -jnp.inf)
  x = logits / cfg.temperature
  if cfg.top_k or cfg.top_p < 1:
    order = jnp.argsort(-x, axis=-1, stable=True)
    xs = jnp.take_along_axis(x, order, axis=-1)
    keep = _keep_sorted(xs, cfg)
    rank = jnp.argsort(order, axis=-1)
    x = jnp.where(jnp.take_along_axis(keep, rank, axis=-1), x, -jnp.inf)
  return jax.nn.log_softmax(x, axis=-1)


def _keep_sorted(xs: jax.Array, cfg: SamplerConfig) -> jax.Array:
  """Which entries of descending-sorted scaled logits `xs [..., K]` survive top-k/top-p."""
  keep = jnp.ones(xs.shape, bool)
  if cfg.top_k:
    keep &= jnp.arange(xs.shape[-1]) < cfg.top_k
  if cfg.top_p < 1:
    p = jax.nn.softmax(jnp.where(keep, xs, -jnp.inf), axis=-1)
    before = jnp.cumsum(p, axis=-1) - p  # mass strictly before each token
    keep &= before < cfg.top_p  # smallest prefix whose mass reaches top_p (always >= 1 token)
  return keep


def sample(logits: jax.Array, keys: jax.Array, cfg: SamplerConfig):
  """Draws one token per row.

  Args:
    logits: `[B, V]` raw policy logits (-inf entries are never drawn).
    keys: `[B]` typed or `[B, 2]` uint32 per-row PRNG keys.
  Returns:
    tokens `[B] int32`, logp_sample `[B] f32`, logp_raw `[B] f32`.
  """
  logits = logits.astype(jnp.float32)
  logp_all = jax.nn.log_softmax(logits, axis=-1)
  if cfg.greedy:
    tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return tok, jnp.zeros(tok.shape, jnp.float32), _take(logp_all, tok)
  # u in (0, 1]: the first index whose cdf reaches u * total always has positive mass.
  u = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)
  x = logits / cfg.temperature
  if cfg.top_k or cfg.top_p < 1:
    if cfg.top_k and cfg.top_p == 1:
      xs, order = jax.lax.top_k(x, min(cfg.top_k, x.shape[-1]))  # O(V log k), no full sort
    else:
      order = jnp.argsort(-x, axis=-1, stable=True)
      xs = jnp.take_along_axis(x, order, axis=-1)
    keep = _keep_sorted(xs, cfg)
    logq = jax.nn.log_softmax(jnp.where(keep, xs, -jnp.inf), axis=-1)
    j = _inverse_cdf(jnp.exp(logq), u)
    tok = jnp.take_along_axis(order, j[:, None], axis=-1)[:, 0].astype(jnp.int32)
    return tok, _take(logq, j), _take(logp_all, tok)
  logq = jax.nn.log_softmax(x, axis=-1)
  tok = _inverse_cdf(jnp.exp(logq), u)
  return tok, _take(logq, tok), _take(logp_all, tok)


def _inverse_cdf(p: jax.Array, u: jax.Array) -> jax.Array:
  """First index of `p [B, K]` whose cdf reaches `u [B] * total` (clipped for rounding)."""
  cdf = jnp.cumsum(p, axis=-1)
  j = jnp.sum(cdf < (u * cdf[:, -1])[:, None], axis=-1)
  return jnp.minimum(j, p.shape[-1] - 1).astype(jnp.int32)


def _take(x: jax.Array, idx: jax.Array) -> jax.Array:
  return jnp.take_along_axis(x, idx[:, None], axis=-1)[:, 0]


@struct.dataclass
class Generation:
  """One generated turn, `A = cfg.max_tokens` slots per row.

  tokens `[B, A] int32` (pad after the end), valid `[B, A] bool` (token was generated),
  logp_raw / logp_sample `[B, A] f32` (0 off `valid`), length `[B] int32` generated tokens
  including the stop token, stopped `[B] bool` (ended on a stop token, not the budget),
  steps: int32 scalar, decode steps actually run (the loop exits once every row ended).
  """
  tokens: jax.Array
  valid: jax.Array
  logp_raw: jax.Array
  logp_sample: jax.Array
  length: jax.Array
  stopped: jax.Array
  steps: jax.Array


def decode_loop(decode: Callable[..., Tuple[jax.Array, Any]], logits: jax.Array, cache: Any,
                positions: jax.Array, active: jax.Array, keys: jax.Array, cfg: SamplerConfig,
                pad_id: int = 0) -> Tuple[Generation, Any]:
  """Samples up to `cfg.max_tokens` tokens per row from an explicit KV cache.

  Every sampled token is written into the cache (its K/V are needed by later turns),
  including the stop token; rows that ended (or were never `active`) write invalid
  padding slots. The loop stops as soon as every row has ended, so a turn costs
  `max(length)` decode steps, not `max_tokens`.

  Args:
    decode: `(tokens [B], positions [B], cache, valid [B]) -> (logits [B, V], cache)`.
    logits: `[B, V]` next-token logits after the prompt (from prefill).
    cache: the model's KV cache after the prompt (any pytree `decode` understands).
    positions: `[B] int32` rotary position of the first generated token.
    active: `[B] bool` rows that generate at all.
    keys: `[B]` typed or `[B, 2]` uint32 per-row keys for this turn (token i uses
      fold_in(key, i)).
  Returns:
    (Generation, the cache after the last written token).
  """
  b, a = logits.shape[0], cfg.max_tokens
  stop = jnp.asarray(cfg.stop_tokens or (-1,), jnp.int32)
  bufs = (jnp.full((b, a), pad_id, jnp.int32), jnp.zeros((b, a), bool),
          jnp.zeros((b, a), jnp.float32), jnp.zeros((b, a), jnp.float32))

  def cond(c):
    i, alive = c[0], c[3]
    return (i < a) & jnp.any(alive)

  def body(c):
    i, logits, cache, alive, pos, stopped, bufs = c
    step_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, i)
    tok, lq, lp = sample(logits, step_keys, cfg)
    tok = jnp.where(alive, tok, pad_id)
    logits, cache = decode(tok, pos, cache, alive)
    # Column i is written once (i only grows), so an O(B) slice update into the zero/pad
    # buffers stores exactly what a masked O(B * A) select over the whole buffer would.
    cols = (tok, alive, jnp.where(alive, lp, 0.0), jnp.where(alive, lq, 0.0))
    bufs = tuple(jax.lax.dynamic_update_slice(buf, col[:, None].astype(buf.dtype), (0, i))
                 for buf, col in zip(bufs, cols))
    hit = alive & jnp.any(tok[:, None] == stop[None, :], axis=-1)
    return (i + 1, logits, cache, alive & ~hit, pos + alive, stopped | hit, bufs)

  init = (jnp.int32(0), logits, cache, active, positions.astype(jnp.int32),
          jnp.zeros((b,), bool), bufs)
  steps, _, cache, _, _, stopped, (toks, valid, lp, lq) = jax.lax.while_loop(cond, body, init)
  gen = Generation(tokens=toks, valid=valid, logp_raw=lp, logp_sample=lq,
                   length=jnp.sum(valid, axis=1).astype(jnp.int32), stopped=stopped, steps=steps)
  return gen, cache
