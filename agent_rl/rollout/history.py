"""History layouts of the episode loop: what the policy sees at each turn.

Two layouts, registered by their config name (`EpisodeConfig.history`) and chosen once per
loop; each owns the per-turn steps that differ between them and its own slot of the carry
(`EpisodeCarry.layout`). Both write the packed episode history of layout.py.

  concatenated  the episode is one sequence; the KV cache carries across turns and each
                observation block is appended by prefill. Positions count real tokens
                only. Budget `max_context` (real tokens, 0 = the static maximum): an
                episode whose next turn would not fit ends there (`context_truncated`).
  windowed      verl-agent's step-independent mode: turn t is its own sample whose context
                is first + the last `window_turns` turns + the current observation,
                truncated to `window_tokens` by dropping the oldest turns (counted). Each
                turn prefills a fresh cache. Token arrays are `[N, T * Lw]`, sample t at
                `[:, t*Lw:(t+1)*Lw]` (`EpisodeBatch.segment_len = Lw`).

A layout's methods take the loop (episode.py) for its sizes and policy: `n` changes when TSR
views the same loop at n * k rows, the layout's own sizes do not.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from agent_rl.registry import Registry
from agent_rl.rollout import intervene, layout
from agent_rl.rollout.carry import map_rows
from agent_rl.rollout.layout import TokenBuffer
from agent_rl.rollout.sampler import generate

HISTORY = Registry("history layout")


@struct.dataclass
class ConcatState:
  """Concatenated history's carry: logits at each row's last token `[N, V]`, the KV cache."""
  logits: jax.Array
  cache: Any


@HISTORY.register("concatenated")
class ConcatenatedHistory:
  """One sequence per episode, one KV cache across turns."""
  segment_len = 0

  def __init__(self, loop):
    cfg = loop.cfg
    if loop.policy.route is not None:
      raise ValueError("per-agent parameters (config.agents.mode lora|separate) need "
                       "rollout.history='windowed': in one concatenated transcript every agent "
                       "would need its own KV cache of the whole episode")
    self.budget = cfg.max_context
    self.buffer_len = min(loop.hist, cfg.max_context) if cfg.max_context else loop.hist
    if self.buffer_len < loop.bf + loop.a:
      raise ValueError(f"EpisodeConfig.max_context={cfg.max_context} cannot hold the first "
                       f"prompt and one action ({loop.bf + loop.a} tokens)")

  def start(self, loop, params, tok, valid, length) -> ConcatState:
    pos = jnp.broadcast_to(jnp.arange(loop.bf, dtype=jnp.int32), (loop.n, loop.bf))
    logits, cache = loop.prefill_last(params, tok, pos, valid, length,
                                      loop.policy.cache(loop.n, loop.hist))
    return ConcatState(logits=logits, cache=cache)

  def _fits(self, c, active, need):
    """Rows whose next `need` tokens fit the budget; the others end here, truncated."""
    if not self.budget:
      return c, active
    fits = c.cursor + need <= self.buffer_len
    return c.replace(context_truncated=c.context_truncated | (active & ~fits)), active & fits

  def act_budget(self, loop, c, active):
    return self._fits(c, active, loop.a)

  def generate(self, loop, params, c, t, active, keys, teacher_params=None):
    st = c.layout
    gen, cache = generate(loop.decode_fn(params), st.logits, st.cache, c.cursor, active, keys,
                          loop.cfg.sampler, loop.pad)
    return c.replace(layout=st.replace(cache=cache)), gen

  def observe_budget(self, loop, c, active):
    c, active = self._fits(c, active, loop.p + c.obs.length + loop.h + loop.a)
    return (c.replace(alive=active) if self.budget else c), active

  def observe(self, loop, params, c, tok, valid, length, active) -> ConcatState:
    """Prefills the observation block at the cursor (c is the carry before the write)."""
    pos = c.cursor[:, None] + jnp.arange(loop.bo, dtype=jnp.int32)[None, :]
    last, cache = loop.prefill_last(params, tok, pos, valid, length, c.layout.cache)
    return ConcatState(logits=jnp.where(active[:, None], last, c.layout.logits), cache=cache)

  def token_fields(self, loop, c, keep) -> dict:
    b = c.history
    slots = jnp.arange(self.buffer_len, dtype=jnp.int32)[None, :]
    attn = slots < c.cursor[:, None]
    return dict(tokens=b.tokens, loss_mask=b.loss_mask * keep[:, None], turn_index=b.turn_index,
                logprobs=b.logprobs, sample_logprobs=b.sample_logprobs, attention_mask=attn,
                position=jnp.broadcast_to(slots, attn.shape))


@HISTORY.register("windowed")
class WindowedHistory:
  """Each turn a sample of its own over the last `window_turns` turns (fresh cache)."""

  def __init__(self, loop):
    cfg = loop.cfg
    self.buffer_len = loop.hist
    self.turns = cfg.window_turns
    k = min(cfg.window_turns, loop.t - 1)
    self.segment_len = cfg.window_tokens or loop.s + k * (loop.bo + loop.a) + loop.bo + loop.a
    self.ctx = self.segment_len - loop.a
    if loop.s + loop.bo > self.ctx:
      raise ValueError(f"EpisodeConfig.window_tokens={cfg.window_tokens} cannot hold the first "
                       f"prompt, one observation and one action ({loop.s + loop.bo + loop.a})")

  def start(self, loop, params, tok, valid, length) -> TokenBuffer:
    """The per-turn samples `[N, T, Lw]`, empty."""
    return TokenBuffer.empty((loop.n, loop.t, self.segment_len), loop.pad, attention=True)

  def act_budget(self, loop, c, active):
    return c, active

  def _sample(self, loop, params, ctx, cvalid, clen, t, active, keys):
    """`loop.policy` generates an action after the window context (a fresh cache).

    TSR's candidate rows (`loop.clones` = k > 1: rows i*k .. i*k+k-1 are clones of episode i,
    search.expand) share one context, so it is prefilled once per episode and the logits and
    cache are repeated k times: the prefill (the turn's largest buffers, attention scores
    `[rows, H, Lw, Lw]`) runs on n rows, not n * k (MiniShop's tiny TSR: 15.4 -> 4.0 GB of
    rollout temporaries). Routed per-agent params are per row, so they prefill every clone."""
    k = loop.clones if loop.policy.route is None else 1
    n, pctx, pvalid, plen = loop.n // k, ctx[::k], cvalid[::k], clen[::k]
    pos = jnp.broadcast_to(jnp.arange(self.ctx, dtype=jnp.int32), (n, self.ctx))
    last, cache = loop.prefill_last(params, pctx, pos, pvalid, plen,
                                    loop.policy.cache(n, self.segment_len, turn=t))
    if k > 1:
      last, cache = map_rows((last, cache), n, lambda x: jnp.repeat(x, k, axis=0))
    gen, _ = generate(loop.decode_fn(params), last, cache, clen, active, keys, loop.cfg.sampler,
                      loop.pad)
    return gen

  def _intervene(self, loop, teacher_params, c, ctx, cvalid, clen, t, active, keys, gen):
    """The teacher takes over the rows whose action it finds unlikely (intervene.py)."""
    tl = loop.teacher_view()
    t_logp = intervene.action_logprobs(tl.policy, teacher_params, ctx, clen, gen,
                                       self.segment_len, loop.pad)
    take = active & (intervene.gap(gen.logp_raw, t_logp, gen.valid, gen.length)
                     > loop.cfg.intervene.threshold)
    t_gen = self._sample(tl, teacher_params, ctx, cvalid, clen, t, take,
                         intervene.teacher_keys(keys))
    return (c.replace(teacher_turns=c.teacher_turns.at[:, t].set(take)),
            intervene.take_over(take, t_gen, gen))

  def generate(self, loop, params, c, t, active, keys, teacher_params=None):
    j0, dropped = layout.window_start(c.turn_start, c.cursor, t, self.turns, loop.s, self.ctx)
    ctx, cvalid, clen = layout.window_context(c.history.tokens, c.turn_start, c.cursor, j0,
                                              loop.s, self.ctx, loop.pad)
    gen = self._sample(loop, params, ctx, cvalid, clen, t, active, keys)
    if loop.teacher is not None:
      c, gen = self._intervene(loop, teacher_params, c, ctx, cvalid, clen, t, active, keys, gen)
    return c.replace(
        layout=self._write_sample(loop, c.layout, t, ctx, clen, gen, active),
        window_dropped_turns=c.window_dropped_turns + jnp.where(active, dropped, 0),
        window_truncated_samples=c.window_truncated_samples + (active & (dropped > 0))), gen

  def _write_sample(self, loop, seg: TokenBuffer, t, ctx, clen, gen, active) -> TokenBuffer:
    """Sample t = its context `[N, ctx]` followed by the generated action."""
    s = jnp.arange(self.segment_len)[None, :]
    ctx_full = jnp.pad(ctx, ((0, 0), (0, loop.a)), constant_values=loop.pad)
    in_ctx = (s < clen[:, None]) & active[:, None]
    in_act = (s >= clen[:, None]) & (s < (clen + gen.length)[:, None]) & active[:, None]
    ai = jnp.clip(s - clen[:, None], 0, loop.a - 1)
    take = lambda x: jnp.take_along_axis(x, ai, axis=1)
    vals = TokenBuffer(
        tokens=jnp.where(in_ctx, ctx_full, jnp.where(in_act, take(gen.tokens), loop.pad)),
        loss_mask=in_act.astype(jnp.float32),
        turn_index=jnp.where(in_act, t, -1).astype(jnp.int32),
        logprobs=jnp.where(in_act, take(gen.logp_raw), 0.0),
        sample_logprobs=jnp.where(in_act, take(gen.logp_sample), 0.0),
        attention_mask=in_ctx | in_act)
    return jax.tree.map(lambda dst, v: dst.at[:, t].set(v.astype(dst.dtype)), seg, vals)

  def observe_budget(self, loop, c, active):
    return c, active

  def observe(self, loop, params, c, tok, valid, length, active) -> TokenBuffer:
    return c.layout

  def token_fields(self, loop, c, keep) -> dict:
    seg = c.layout
    flat = lambda x: x.reshape(loop.n, loop.t * self.segment_len)
    tok = {name: flat(getattr(seg, name)) for name in
           ("tokens", "loss_mask", "turn_index", "logprobs", "sample_logprobs", "attention_mask")}
    tok["loss_mask"] = tok["loss_mask"] * keep[:, None]
    tok["position"] = jnp.broadcast_to(
        jnp.tile(jnp.arange(self.segment_len, dtype=jnp.int32), loop.t), tok["tokens"].shape)
    return tok
