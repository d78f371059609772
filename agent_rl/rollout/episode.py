"""The multi-turn episode loop: one jitted program from tasks to an EpisodeBatch.

For pure-JAX environments the whole rollout compiles (purejaxrl's recipe, Lu et al. 2022):
`vmap` over episodes, `scan` over turns, a `while_loop` over tokens inside each turn.
Each turn:  act (generate <= max_tokens, stop at <|im_end|>/eos)  ->  env.step (vmapped)
->  record (turn-level fields, done)  ->  observe (append the observation for the next turn).
Finished episodes stop generating (masked); a turn in which no episode is alive is skipped.

Group sampling (GRPO, Shao et al. 2024; RAGEN's env groups): `tasks` has a leading
dimension of n_tasks; each task is reset once and copied to G members (same task, same
initial state), so N = n_tasks * G, `group_id = episode // G`, members contiguous.

History modes (`EpisodeConfig.history`), both on the packed history buffer of layout.py:
  "concat"  the episode is one sequence; the KV cache carries across turns and each
            observation block is appended by prefill. Positions count real tokens only.
            Budget `max_context` (real tokens, 0 = the static maximum): an episode whose
            next turn would not fit ends there (`truncated`, counted in the metrics).
  "window"  verl-agent's step-independent mode: turn t is its own sample whose context is
            first + the last `window_turns` turns + the current observation, truncated to
            `window_tokens` by dropping the oldest turns (dropped turns are counted). Each
            turn prefills a fresh cache. Token arrays are `[N, T * Lw]`, sample t at
            `[:, t*Lw:(t+1)*Lw]` (`EpisodeBatch.segment_len = Lw`).

The per-turn steps (`EpisodeLoop.start/act/record/observe/finish`) are shared with the host
bridge (bridge.py), which runs the same functions with a Python environment in between.
Rollout strategies that act inside the loop: the selective gate (gate.py) and TSR search
(search.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from agent_rl.envs.base import Text, fingerprint
from agent_rl.rollout import layout
from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.rollout.gate import GateConfig, gate_groups
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig, generate

HISTORY_MODES = ("concat", "window")
_TURN_FIELDS = dict(reward=jnp.float32, done=bool, valid=bool, success=bool, valid_action=bool,
                    state_hash=jnp.uint32, next_hash=jnp.uint32, agent_id=jnp.int32,
                    milestone=bool, fatal=bool)
_BUF = dict(tokens=jnp.int32, loss_mask=jnp.float32, turn_index=jnp.int32,
            logprobs=jnp.float32, sample_logprobs=jnp.float32)


@dataclasses.dataclass(frozen=True)
class SearchConfig:
  """TSR trajectory search (ALGORITHMS.md §4.10), see search.py.

  mode: "best_of_n" (per episode keep the best of n candidate actions each turn) or
    "beam" (per group keep the G best of G*n expansions by cumulative score).
  num_candidates: n. heuristic: optional `env_state -> f32` added to the env reward.
  """
  mode: str = "best_of_n"
  num_candidates: int = 4
  heuristic: Optional[Callable[[Any], jax.Array]] = None

  def __post_init__(self):
    if self.mode not in ("best_of_n", "beam"):
      raise ValueError(f"SearchConfig.mode must be 'best_of_n' or 'beam', got {self.mode!r}")
    if self.num_candidates < 1:
      raise ValueError(f"SearchConfig.num_candidates must be >= 1, got {self.num_candidates}")


@dataclasses.dataclass(frozen=True)
class EpisodeConfig:
  sampler: SamplerConfig = SamplerConfig()
  max_turns: int = 5
  group_size: int = 1
  history: str = "concat"
  window_turns: int = 2
  window_tokens: int = 0
  max_context: int = 0
  gate: Optional[GateConfig] = None
  search: Optional[SearchConfig] = None

  def __post_init__(self):
    if self.history not in HISTORY_MODES:
      raise ValueError(f"EpisodeConfig.history must be one of {HISTORY_MODES}, got {self.history!r}")
    for f in ("max_turns", "group_size"):
      if getattr(self, f) < 1:
        raise ValueError(f"EpisodeConfig.{f} must be >= 1, got {getattr(self, f)}")
    for f in ("window_turns", "window_tokens", "max_context"):
      if getattr(self, f) < 0:
        raise ValueError(f"EpisodeConfig.{f} must be >= 0, got {getattr(self, f)}")
    if self.gate is not None and self.gate.turn > self.max_turns:
      raise ValueError(f"EpisodeConfig.gate.turn ({self.gate.turn}) > max_turns ({self.max_turns})")


def _where(mask, new, old):
  return jax.tree.map(lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b),
                      new, old)


class EpisodeLoop:
  """Static sizes plus the per-turn functions of one rollout configuration (pure methods)."""

  def __init__(self, policy: Policy, env: Any, cfg: EpisodeConfig, pieces: layout.PromptPieces,
               num_episodes: int, obs_len: int):
    self.policy, self.env, self.cfg, self.pieces = policy, env, cfg, pieces
    self.n, self.o = num_episodes, obs_len
    self.t, self.a = cfg.max_turns, cfg.sampler.max_tokens
    self.s, self.h, self.p = len(pieces.first), len(pieces.header), len(pieces.turn_prefix)
    self.bf, self.bo = self.s + self.o + self.h, self.p + self.o + self.h
    self.hist = self.bf + self.t * self.a + (self.t - 1) * self.bo  # slots of a full episode
    self.concat = cfg.history == "concat"
    self.pad = pieces.pad_id
    self.action_len = int(getattr(env, "action_len", None) or self.a)
    if self.concat:
      self.lb = min(self.hist, cfg.max_context) if cfg.max_context else self.hist
      if self.lb < self.bf + self.a:
        raise ValueError(f"EpisodeConfig.max_context={cfg.max_context} cannot hold the first "
                         f"prompt and one action ({self.bf + self.a} tokens)")
    else:
      self.lb = self.hist
      k = min(cfg.window_turns, self.t - 1)
      self.lw = cfg.window_tokens or self.s + k * (self.bo + self.a) + self.bo + self.a
      self.ctx = self.lw - self.a
      if self.s + self.bo > self.ctx:
        raise ValueError(f"EpisodeConfig.window_tokens={cfg.window_tokens} cannot hold the first "
                         f"prompt, one observation and one action ({self.s + self.bo + self.a})")

  # -- pieces of the policy ----------------------------------------------------------------
  def _decode(self, params):
    pol = self.policy

    def decode(tok, pos, cache, valid):
      logits, _, cache = pol.decode_step(pol.graphdef, params, tok, pos, cache, valid)
      return logits, cache
    return decode

  def _prefill_last(self, params, tok, pos, valid, length, cache):
    """Prefills a block; returns the logits `[N, V]` at each row's last block token."""
    rows = jnp.maximum(length - 1, 0)
    if self.policy.prefill_rows:
      last, _, cache = self.policy.prefill(self.policy.graphdef, params, tok, pos, valid, cache,
                                           rows=rows)
      return last, cache
    logits, _, cache = self.policy.prefill(self.policy.graphdef, params, tok, pos, valid, cache)
    return jnp.take_along_axis(logits, rows[:, None, None], axis=1)[:, 0], cache

  def _hash0(self, state, obs: Text):
    """Fingerprint of the initial state: the env's own `state_hash` when it has one."""
    if hasattr(self.env, "state_hash"):
      return jax.vmap(self.env.state_hash)(state).astype(jnp.uint32)
    live = jnp.arange(obs.tokens.shape[-1])[None, :] < obs.length[:, None]
    return jax.vmap(fingerprint)(jnp.where(live, obs.tokens, -1), obs.length)

  # -- the loop ----------------------------------------------------------------------------
  def start(self, params, state, obs: Text, keys: jax.Array,
            hash0: Optional[jax.Array] = None) -> dict:
    """Writes the first prompt (and prefills it in concat mode). `hash0 [N]` overrides the
    initial state fingerprint (host environments report their own)."""
    n, t = self.n, self.t
    buf = {k: jnp.full((n, self.lb), self.pad if k == "tokens" else (-1 if k == "turn_index" else 0), d)
           for k, d in _BUF.items()}
    on = jnp.ones((n,), bool)
    tok, valid, length = layout.pack_block(self.pieces.first, obs.tokens, obs.length,
                                           self.pieces.header, on, self.pad)
    zero = jnp.zeros((n,), jnp.int32)
    buf = layout.write_block(buf, zero, self._obs_channels(tok), length)
    c = dict(env=state, obs_tok=obs.tokens.astype(jnp.int32), obs_len=obs.length.astype(jnp.int32),
             buf=buf, cursor=length, turn_start=jnp.zeros((n, t), jnp.int32).at[:, 0].set(self.s),
             turns={k: jnp.zeros((n, t), d) for k, d in _TURN_FIELDS.items()},
             sym=jnp.zeros((n, t), jnp.uint32), alive=on, truncated=~on, cut=~on,
             score=jnp.zeros((n,), jnp.float32), nturns=zero, dropped=zero, dropped_samples=zero,
             budget_hit=zero, hash=self._hash0(state, obs) if hash0 is None else hash0, keys=keys,
             decode_steps=jnp.zeros((), jnp.int32))
    if self.concat:
      pos = jnp.broadcast_to(jnp.arange(self.bf, dtype=jnp.int32), (n, self.bf))
      c["logits"], c["cache"] = self._prefill_last(params, tok, pos, valid, length,
                                                   self.policy.cache(n, self.hist))
    else:
      c["seg"] = {k: jnp.full((n, t, self.lw), self.pad if k == "tokens" else
                              (-1 if k == "turn_index" else 0), d)
                  for k, d in dict(_BUF, attention_mask=bool).items()}
    return c

  def _obs_channels(self, tok):
    z = jnp.zeros(tok.shape, jnp.float32)
    return dict(tokens=tok, loss_mask=z, turn_index=jnp.full(tok.shape, -1, jnp.int32),
                logprobs=z, sample_logprobs=z)

  def act(self, params, carry: dict, t, cand: Optional[jax.Array] = None):
    """Generates turn t's action. Returns (carry, action Text [N, action_len], active [N])."""
    c = dict(carry)
    active = c["alive"]
    if self.concat and self.cfg.max_context:
      fits = c["cursor"] + self.a <= self.lb
      c["truncated"] = c["truncated"] | (active & ~fits)
      active = active & fits
    keys = jax.vmap(jax.random.fold_in, (0, None))(c["keys"], t)
    if cand is not None:
      keys = jax.vmap(jax.random.fold_in)(keys, cand)
    decode = self._decode(params)
    if self.concat:
      gen, c["cache"] = generate(decode, c["logits"], c["cache"], c["cursor"], active, keys,
                                 self.cfg.sampler, self.pad)
    else:
      j0, dropped = layout.window_start(c["turn_start"], c["cursor"], t, self.cfg.window_turns,
                                        self.s, self.ctx)
      ctx, cvalid, clen = layout.window_context(c["buf"]["tokens"], c["turn_start"], c["cursor"],
                                                j0, self.s, self.ctx, self.pad)
      pos = jnp.broadcast_to(jnp.arange(self.ctx, dtype=jnp.int32), (self.n, self.ctx))
      last, cache = self._prefill_last(params, ctx, pos, cvalid, clen,
                                       self.policy.cache(self.n, self.lw))
      gen, _ = generate(decode, last, cache, clen, active, keys, self.cfg.sampler, self.pad)
      c["seg"] = self._write_segment(c["seg"], t, ctx, clen, gen, active)
      c["dropped"] = c["dropped"] + jnp.where(active, dropped, 0)
      c["dropped_samples"] = c["dropped_samples"] + (active & (dropped > 0))
    block = dict(tokens=gen.tokens, loss_mask=gen.valid.astype(jnp.float32),
                 turn_index=jnp.where(gen.valid, t, -1).astype(jnp.int32),
                 logprobs=gen.logp_raw, sample_logprobs=gen.logp_sample)
    c["buf"] = layout.write_block(c["buf"], c["cursor"], block, gen.length)
    c["cursor"] = c["cursor"] + gen.length
    c["budget_hit"] = c["budget_hit"] + (active & ~gen.stopped)
    c["decode_steps"] = c["decode_steps"] + gen.steps
    # The env reads the action without its stop token.
    alen = gen.length - gen.stopped.astype(jnp.int32)
    atok = jnp.where(jnp.arange(self.a)[None, :] < alen[:, None], gen.tokens, self.pad)
    c["sym"] = c["sym"].at[:, t].set(jax.vmap(fingerprint)(atok, alen))
    if self.action_len >= self.a:
      atok = jnp.pad(atok, ((0, 0), (0, self.action_len - self.a)), constant_values=self.pad)
    else:
      atok, alen = atok[:, :self.action_len], jnp.minimum(alen, self.action_len)
    return c, Text(tokens=atok, length=alen), active

  def _write_segment(self, seg, t, ctx, clen, gen, active):
    s = jnp.arange(self.lw)[None, :]
    ctx_full = jnp.pad(ctx, ((0, 0), (0, self.a)), constant_values=self.pad)
    in_ctx = (s < clen[:, None]) & active[:, None]
    in_act = (s >= clen[:, None]) & (s < (clen + gen.length)[:, None]) & active[:, None]
    ai = jnp.clip(s - clen[:, None], 0, self.a - 1)
    take = lambda x: jnp.take_along_axis(x, ai, axis=1)
    vals = dict(
        tokens=jnp.where(in_ctx, ctx_full, jnp.where(in_act, take(gen.tokens), self.pad)),
        loss_mask=in_act.astype(jnp.float32),
        turn_index=jnp.where(in_act, t, -1).astype(jnp.int32),
        logprobs=jnp.where(in_act, take(gen.logp_raw), 0.0),
        sample_logprobs=jnp.where(in_act, take(gen.logp_sample), 0.0),
        attention_mask=in_ctx | in_act)
    return {k: seg[k].at[:, t].set(v.astype(seg[k].dtype)) for k, v in vals.items()}

  def record(self, carry: dict, t, active: jax.Array, out) -> dict:
    """Stores turn t's env outcome `(state, obs, reward, done, info)` for the active rows."""
    state, obs, reward, done, info = out
    c = dict(carry)
    m = active
    c["env"] = _where(m, state, c["env"])
    c["obs_tok"] = jnp.where(m[:, None], obs.tokens.astype(jnp.int32), c["obs_tok"])
    c["obs_len"] = jnp.where(m, obs.length.astype(jnp.int32), c["obs_len"])
    zb = jnp.zeros((self.n,), bool)
    new = dict(reward=reward, done=done, valid=m, success=info["success"],
               valid_action=info["valid_action"], state_hash=c["hash"],
               next_hash=info["state_hash"], agent_id=info.get("agent_id", jnp.zeros((self.n,), jnp.int32)),
               milestone=info.get("milestone", zb), fatal=info.get("fatal", zb))
    c["turns"] = {k: c["turns"][k].at[:, t].set(jnp.where(m, new[k], 0).astype(d))
                  for k, d in _TURN_FIELDS.items()}
    c["hash"] = jnp.where(m, info["state_hash"].astype(jnp.uint32), c["hash"])
    c["alive"] = m & ~done.astype(bool)
    c["nturns"] = c["nturns"] + m
    c["score"] = c["score"] + jnp.where(m, reward, 0.0)
    if self.cfg.gate is not None:
      cut_g, _, _ = gate_groups(c["sym"], c["nturns"], self.cfg.group_size, self.cfg.gate)
      cut = jnp.repeat(cut_g, self.cfg.group_size) & (t == self.cfg.gate.turn - 1)
      c["cut"] = c["cut"] | cut
      c["alive"] = c["alive"] & ~cut
    return c

  def observe(self, params, carry: dict, t) -> dict:
    """Appends the observation that follows turn t (call only for t < max_turns - 1)."""
    c = dict(carry)
    active = c["alive"]
    if self.concat and self.cfg.max_context:
      need = self.p + c["obs_len"] + self.h + self.a
      fits = c["cursor"] + need <= self.lb
      c["truncated"] = c["truncated"] | (active & ~fits)
      active = active & fits
      c["alive"] = active
    tok, valid, length = layout.pack_block(self.pieces.turn_prefix, c["obs_tok"], c["obs_len"],
                                           self.pieces.header, active, self.pad)
    c["turn_start"] = c["turn_start"].at[:, t + 1].set(c["cursor"])
    c["buf"] = layout.write_block(c["buf"], c["cursor"], self._obs_channels(tok), length)
    if self.concat:
      pos = c["cursor"][:, None] + jnp.arange(self.bo, dtype=jnp.int32)[None, :]
      last, c["cache"] = self._prefill_last(params, tok, pos, valid, length, c["cache"])
      c["logits"] = jnp.where(active[:, None], last, c["logits"])
    c["cursor"] = c["cursor"] + length
    return c

  def finish(self, c: dict, group_id: jax.Array, episode_keys: jax.Array):
    """The EpisodeBatch and rollout metrics (cut groups get a zero loss mask)."""
    keep = (~c["cut"]).astype(jnp.float32)
    if self.concat:
      b = c["buf"]
      slots = jnp.arange(self.lb, dtype=jnp.int32)[None, :]
      attn = slots < c["cursor"][:, None]
      tok = dict(tokens=b["tokens"], loss_mask=b["loss_mask"] * keep[:, None],
                 turn_index=b["turn_index"], logprobs=b["logprobs"],
                 sample_logprobs=b["sample_logprobs"], attention_mask=attn,
                 position=jnp.broadcast_to(slots, attn.shape))
      seg_len = 0
    else:
      s = c["seg"]
      flat = lambda x: x.reshape(self.n, self.t * self.lw)
      tok = {k: flat(v) for k, v in s.items()}
      tok["loss_mask"] = tok["loss_mask"] * keep[:, None]
      tok["position"] = jnp.broadcast_to(jnp.tile(jnp.arange(self.lw, dtype=jnp.int32), self.t),
                                         tok["tokens"].shape)
      seg_len = self.lw
    turns = c["turns"]
    batch = EpisodeBatch(**turns, **tok, group_id=group_id.astype(jnp.int32),
                         episode_key=episode_keys.astype(jnp.uint32), segment_len=seg_len)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    metrics = {
        "rollout/episodes": f32(self.n),
        "rollout/gen_tokens": jnp.sum(c["buf"]["loss_mask"]),
        "rollout/turns_mean": jnp.mean(f32(c["nturns"])),
        "rollout/return_mean": jnp.mean(c["score"]),
        "rollout/success": jnp.mean(f32(jnp.any(turns["success"], axis=1))),
        "rollout/done_frac": jnp.mean(f32(jnp.any(turns["done"], axis=1))),
        "rollout/context_truncated": jnp.sum(f32(c["truncated"])),
        "rollout/window_dropped_turns": jnp.sum(f32(c["dropped"])),
        "rollout/window_truncated_samples": jnp.sum(f32(c["dropped_samples"])),
        "rollout/action_budget_hit": jnp.sum(f32(c["budget_hit"])),
        "rollout/gate_cut_episodes": jnp.sum(f32(c["cut"])),
        "rollout/decode_steps": f32(c["decode_steps"]),
    }
    return batch, metrics
