"""The multi-turn episode loop: one jitted program from tasks to an EpisodeBatch.

For pure-JAX environments the whole rollout compiles (purejaxrl's recipe, Lu et al. 2022):
`vmap` over episodes, `scan` over turns, a `while_loop` over tokens inside each turn.
Each turn:  act (generate <= max_tokens, stop at <|im_end|>/eos)  ->  env.step (vmapped)
->  record (turn-level fields, done)  ->  observe (append the observation for the next turn).
Finished episodes stop generating (masked); a turn in which no episode is alive is skipped.

Group sampling (GRPO, Shao et al. 2024; RAGEN's env groups): `tasks` has a leading
dimension of n_tasks; each task is reset once and copied to G members (same task, same
initial state), so N = n_tasks * G, `group_id = episode // G`, members contiguous.

History (`EpisodeConfig.history`): "concatenated" (one sequence and one KV cache per
episode) or "windowed" (each turn its own sample over the last turns); the two layouts are
small classes in history.py, chosen once per loop. The carry is a typed record
(carry.py: `EpisodeCarry`); env info keys beyond the fixed ones become turn-level extras.

The per-turn steps (`EpisodeLoop.start/act/record/observe/finish`) are shared with the host
bridge (bridge.py), which runs the same functions with a Python environment in between.
Rollout strategies that act inside the loop: the selective gate (gate.py) and TSR search
(search.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp

from agent_rl.envs.base import Text, fingerprint
from agent_rl.rollout import layout
from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.rollout.carry import EpisodeCarry, TurnRecord, extra_columns, extra_values
from agent_rl.rollout.branch import BranchConfig
from agent_rl.rollout.intervene import InterveneConfig
from agent_rl.rollout.gate import GateConfig, gate_groups
from agent_rl.rollout.history import HISTORY
from agent_rl.rollout.layout import TokenBuffer
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig

HISTORY_MODES = ("concatenated", "windowed")   # the layouts registered in history.py
assert set(HISTORY_MODES) == set(HISTORY.names()), HISTORY.names()


@dataclasses.dataclass(frozen=True)
class SearchConfig:
  """TSR trajectory search (ALGORITHMS.md §4.10), see search.py.

  mode: "best_of_n" (per episode keep the best of n candidate actions each turn),
    "beam" (per group keep the G best of G*n expansions by cumulative score) or "jitrl"
    (keep candidate i with probability softmax(Q^(s, a_i) / beta) from the experience library
    the rollout is given: JitRL's test-time policy, rollout/jitrl.py).
  num_candidates: n. heuristic: optional `env_state -> f32` added to the env reward, or the
    name of one registered in `search.HEURISTICS` (resolved against the env: config-settable).
  beta: jitrl's temperature (KL weight).
  """
  mode: str = "best_of_n"
  num_candidates: int = 4
  heuristic: Optional[Callable[[Any], jax.Array]] = None
  beta: float = 1.0

  def __post_init__(self):
    if self.mode not in ("best_of_n", "beam", "jitrl"):
      raise ValueError(f"SearchConfig.mode must be 'best_of_n', 'beam' or 'jitrl', got "
                       f"{self.mode!r}")
    if self.mode == "jitrl" and not (self.beta > 0 and self.beta < float("inf")):
      raise ValueError(f"SearchConfig.beta must be a finite float > 0, got {self.beta}")
    if self.num_candidates < 1:
      raise ValueError(f"SearchConfig.num_candidates must be >= 1, got {self.num_candidates}")


@dataclasses.dataclass(frozen=True)
class EpisodeConfig:
  """One rollout's configuration. history: "concatenated" | "windowed" (history.py), with
  window_turns / window_tokens for windowed and max_context for concatenated history."""
  sampler: SamplerConfig = SamplerConfig()
  max_turns: int = 5
  group_size: int = 1
  history: str = "concatenated"
  window_turns: int = 2
  window_tokens: int = 0
  max_context: int = 0
  gate: Optional[GateConfig] = None
  search: Optional[SearchConfig] = None
  branch: Optional[BranchConfig] = None  # branched groups (branch.py)
  intervene: Optional[InterveneConfig] = None  # teacher interventions (intervene.py)

  def __post_init__(self):
    if self.history not in HISTORY_MODES:
      raise ValueError(f"EpisodeConfig.history must be one of {HISTORY_MODES}, "
                       f"got {self.history!r}")
    for f in ("max_turns", "group_size"):
      if getattr(self, f) < 1:
        raise ValueError(f"EpisodeConfig.{f} must be >= 1, got {getattr(self, f)}")
    for f in ("window_turns", "window_tokens", "max_context"):
      if getattr(self, f) < 0:
        raise ValueError(f"EpisodeConfig.{f} must be >= 0, got {getattr(self, f)}")
    if self.intervene is not None and (self.search is not None or self.history != "windowed"):
      raise ValueError("EpisodeConfig.intervene needs history='windowed' and no TSR search "
                       f"(got history={self.history!r}, search={self.search})")
    if self.branch is not None and self.branch.max_turn >= self.max_turns:
      raise ValueError(f"EpisodeConfig.branch.max_turn ({self.branch.max_turn}) must be < "
                       f"max_turns ({self.max_turns}): a branch needs a turn after it")
    if self.gate is not None and self.gate.turn > self.max_turns:
      raise ValueError(f"EpisodeConfig.gate.turn ({self.gate.turn}) > max_turns ({self.max_turns})")



def action_length(env: Any, cfg: EpisodeConfig) -> int:
  """Tokens of the action the env reads: `env.action_len`, else the sampler's max_tokens."""
  return int(getattr(env, "action_len", None) or cfg.sampler.max_tokens)


def _where(mask, new, old):
  return jax.tree.map(lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b),
                      new, old)


class EpisodeLoop:
  """Static sizes plus the per-turn functions of one rollout configuration (pure methods).

  info_spec: the env's batched info `{key: array or ShapeDtypeStruct [N, ...]}` (compiled.py
  takes it from `jax.eval_shape` of env.step); it fixes the extras columns of the carry.
  clones: the rows come in runs of this many identical copies at the start of a turn (TSR's
  candidates, compiled._Resized); the windowed layout prefills one context per run.
  """
  clones = 1

  def __init__(self, policy: Policy, env: Any, cfg: EpisodeConfig, pieces: layout.PromptPieces,
               num_episodes: int, obs_len: int, info_spec: Optional[Mapping[str, Any]] = None,
               teacher: Optional[Policy] = None):
    if (teacher is None) != (cfg.intervene is None):
      raise ValueError("EpisodeConfig.intervene and a teacher policy go together (the rollout "
                       f"got intervene={cfg.intervene}, teacher={'a policy' if teacher else None})")
    if teacher is not None and policy.route is not None:
      raise ValueError("teacher interventions need one network for every row (agents.mode "
                       "shared); per-agent weights would need a teacher per agent")
    self.policy, self.env, self.cfg, self.pieces = policy, env, cfg, pieces
    self.teacher = teacher
    self.n, self.o = num_episodes, obs_len
    self.t, self.a = cfg.max_turns, cfg.sampler.max_tokens
    self.s, self.h, self.p = len(pieces.first), len(pieces.header), len(pieces.turn_prefix)
    self.bf, self.bo = self.s + self.o + self.h, self.p + self.o + self.h
    self.hist = self.bf + self.t * self.a + (self.t - 1) * self.bo  # slots of a full episode
    self.pad = pieces.pad_id
    self.action_len = action_length(env, cfg)
    self.history = HISTORY.get(cfg.history)(self)
    self.extras = extra_columns(info_spec or {}, num_episodes, getattr(env, "reward_names", None))

  # -- pieces of the policy ----------------------------------------------------------------
  def teacher_view(self) -> "EpisodeLoop":
    """The same loop with the teacher as its policy (its prefill and decode)."""
    view = object.__new__(type(self))
    view.__dict__.update(self.__dict__)
    view.policy, view.teacher = self.teacher, None
    return view

  def decode_fn(self, params):
    pol = self.policy

    def decode(tok, pos, cache, valid):
      logits, _, cache = pol.decode_step(pol.graphdef, params, tok, pos, cache, valid)
      return logits, cache
    return decode

  def prefill_last(self, params, tok, pos, valid, length, cache):
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

  def _first_agent(self, state) -> jax.Array:
    """`[N]` i32: who acts turn 0 (`env.first_agent(state)` of a multi-agent env, else 0)."""
    if hasattr(self.env, "first_agent"):
      return jax.vmap(self.env.first_agent)(state).astype(jnp.int32)
    return jnp.zeros((self.n,), jnp.int32)

  # -- the loop ----------------------------------------------------------------------------
  def start(self, params, state, obs: Text, keys: jax.Array,
            hash0: Optional[jax.Array] = None, agent0: Optional[jax.Array] = None) -> EpisodeCarry:
    """Writes the first prompt (the concatenated layout prefills it). `hash0 [N]` overrides
    the initial state fingerprint and `agent0 [N]` who acts turn 0 (host environments report
    their own)."""
    n, t = self.n, self.t
    on = jnp.ones((n,), bool)
    tok, valid, length = layout.pack_block(self.pieces.first, obs.tokens, obs.length,
                                           self.pieces.header, on, self.pad)
    zero = jnp.zeros((n,), jnp.int32)
    history = layout.write_block(TokenBuffer.empty((n, self.history.buffer_len), self.pad), zero,
                                 TokenBuffer.prompt(tok), length)
    return EpisodeCarry(
        env_state=state, obs=Text(obs.tokens.astype(jnp.int32), obs.length.astype(jnp.int32)),
        history=history, cursor=length,
        turn_start=jnp.zeros((n, t), jnp.int32).at[:, 0].set(self.s),
        turns=TurnRecord.zeros(n, t),
        extras={k: jnp.zeros((n, t), d) for k, (_, _, d) in self.extras.items()},
        action_symbols=jnp.zeros((n, t), jnp.uint32), alive=on, context_truncated=~on,
        gate_cut=~on, shared_turns=zero, teacher_turns=jnp.zeros((n, t), bool),
        episode_return=jnp.zeros((n,), jnp.float32),
        num_turns=zero,
        window_dropped_turns=zero, window_truncated_samples=zero, action_budget_hit=zero,
        state_hash=self._hash0(state, obs) if hash0 is None else hash0, sample_keys=keys,
        decode_steps=jnp.zeros((), jnp.int32),
        agent=self._first_agent(state) if agent0 is None else agent0.astype(jnp.int32),
        layout=self.history.start(self, params, tok, valid, length))

  def act(self, params, carry: EpisodeCarry, t, cand: Optional[jax.Array] = None,
          teacher_params=None):
    """Generates turn t's action (with the teacher's params when it may take over, see
    intervene.py). Returns (carry, action Text [N, action_len], active [N])."""
    c, active = self.history.act_budget(self, carry, carry.alive)
    keys = jax.vmap(jax.random.fold_in, (0, None))(c.sample_keys, t)
    if cand is not None:
      keys = jax.vmap(jax.random.fold_in)(keys, cand)
    if self.policy.route is not None:  # each row under its acting agent's weights
      params = self.policy.route(params, c.agent)
    c, gen = self.history.generate(self, params, c, t, active, keys, teacher_params)
    block = TokenBuffer(tokens=gen.tokens, loss_mask=gen.valid.astype(jnp.float32),
                        turn_index=jnp.where(gen.valid, t, -1).astype(jnp.int32),
                        logprobs=gen.logp_raw, sample_logprobs=gen.logp_sample)
    # The env reads the action without its stop token.
    alen = gen.length - gen.stopped.astype(jnp.int32)
    atok = jnp.where(jnp.arange(self.a)[None, :] < alen[:, None], gen.tokens, self.pad)
    c = c.replace(
        history=layout.write_block(c.history, c.cursor, block, gen.length),
        cursor=c.cursor + gen.length,
        action_budget_hit=c.action_budget_hit + (active & ~gen.stopped),
        decode_steps=c.decode_steps + gen.steps,
        action_symbols=c.action_symbols.at[:, t].set(jax.vmap(fingerprint)(atok, alen)))
    if self.action_len >= self.a:
      atok = jnp.pad(atok, ((0, 0), (0, self.action_len - self.a)), constant_values=self.pad)
    else:
      atok, alen = atok[:, :self.action_len], jnp.minimum(alen, self.action_len)
    return c, Text(tokens=atok, length=alen), active

  def record(self, carry: EpisodeCarry, t, active: jax.Array, out) -> EpisodeCarry:
    """Stores turn t's env outcome `(state, obs, reward, done, info)` for the active rows."""
    state, obs, reward, done, info = out
    c, m = carry, active
    unknown = sorted(set(extra_columns(info, self.n, getattr(self.env, "reward_names", None)))
                     - set(self.extras))
    if unknown:
      raise ValueError(f"env info emits {unknown}, absent when the rollout was built; every "
                       "step must emit the same info keys")
    zb = jnp.zeros((self.n,), bool)
    fixed = dict(reward=reward, done=done, valid=m, success=info["success"],
                 valid_action=info["valid_action"], state_hash=c.state_hash,
                 next_hash=info["state_hash"],
                 # A multi-agent env says who acts next; the acting agent is the loop's own.
                 agent_id=(c.agent if "next_agent" in info else
                           info.get("agent_id", jnp.zeros((self.n,), jnp.int32))),
                 milestone=info.get("milestone", zb), fatal=info.get("fatal", zb))
    extras = {k: c.extras[k].at[:, t].set(jnp.where(m, v, 0).astype(c.extras[k].dtype))
              for k, v in extra_values(info, self.extras).items()}
    c = c.replace(
        env_state=_where(m, state, c.env_state),
        obs=Text(jnp.where(m[:, None], obs.tokens.astype(jnp.int32), c.obs.tokens),
                 jnp.where(m, obs.length.astype(jnp.int32), c.obs.length)),
        turns=c.turns.write(t, m, fixed), extras=extras,
        state_hash=jnp.where(m, info["state_hash"].astype(jnp.uint32), c.state_hash),
        alive=m & ~done.astype(bool), num_turns=c.num_turns + m,
        agent=jnp.where(m, info.get("next_agent", c.agent), c.agent).astype(jnp.int32),
        episode_return=c.episode_return + jnp.where(m, reward, 0.0))
    if self.cfg.gate is not None:
      cut_g, _, _ = gate_groups(c.action_symbols, c.num_turns, self.cfg.group_size, self.cfg.gate)
      cut = jnp.repeat(cut_g, self.cfg.group_size) & (t == self.cfg.gate.turn - 1)
      c = c.replace(gate_cut=c.gate_cut | cut, alive=c.alive & ~cut)
    return c

  def observe(self, params, carry: EpisodeCarry, t) -> EpisodeCarry:
    """Appends the observation that follows turn t (call only for t < max_turns - 1)."""
    c, active = self.history.observe_budget(self, carry, carry.alive)
    tok, valid, length = layout.pack_block(self.pieces.turn_prefix, c.obs.tokens, c.obs.length,
                                           self.pieces.header, active, self.pad)
    return c.replace(
        turn_start=c.turn_start.at[:, t + 1].set(c.cursor),
        history=layout.write_block(c.history, c.cursor, TokenBuffer.prompt(tok), length),
        layout=self.history.observe(self, params, c, tok, valid, length, active),
        cursor=c.cursor + length)

  def finish(self, c: EpisodeCarry, group_id: jax.Array, episode_keys: jax.Array):
    """The EpisodeBatch and rollout metrics (cut groups get a zero loss mask)."""
    keep = (~c.gate_cut).astype(jnp.float32)
    tok = self.history.token_fields(self, c, keep)
    # Turns that are not the policy's own samples leave the loss: a branched copy's shared
    # prefix (trained through its root, branch.py) and the teacher's turns (intervene.py).
    off = (jnp.arange(self.t)[None, :] < c.shared_turns[:, None]) | c.teacher_turns
    tok["loss_mask"] = layout.off_loss(tok["loss_mask"], tok["turn_index"], off)
    batch = EpisodeBatch(**c.turns.as_dict(), **tok, extras=dict(c.extras),
                         group_id=group_id.astype(jnp.int32),
                         episode_key=episode_keys.astype(jnp.uint32),
                         segment_len=self.history.segment_len)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    metrics = {
        "rollout/episodes": f32(self.n),
        "rollout/gen_tokens": jnp.sum(c.history.loss_mask),
        "rollout/turns_mean": jnp.mean(f32(c.num_turns)),
        "rollout/return_mean": jnp.mean(c.episode_return),
        "rollout/success": jnp.mean(f32(jnp.any(c.turns.success, axis=1))),
        "rollout/done_frac": jnp.mean(f32(jnp.any(c.turns.done, axis=1))),
        "rollout/context_truncated": jnp.sum(f32(c.context_truncated)),
        "rollout/window_dropped_turns": jnp.sum(f32(c.window_dropped_turns)),
        "rollout/window_truncated_samples": jnp.sum(f32(c.window_truncated_samples)),
        "rollout/action_budget_hit": jnp.sum(f32(c.action_budget_hit)),
        "rollout/gate_cut_episodes": jnp.sum(f32(c.gate_cut)),
        "rollout/branched_episodes": jnp.sum(f32(c.shared_turns > 0)),
        "rollout/teacher_turns": jnp.sum(f32(c.teacher_turns)),
        "rollout/decode_steps": f32(c.decode_steps),
    }
    return batch, metrics
