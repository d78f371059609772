"""EpisodeBatch: the one data layout between rollout, credit kernels and the learner.

N episodes (= tasks x group size), T turns, L tokens (shared/DESIGN.md, "EpisodeBatch").

Turn level `[N, T]`:
  reward        f32   env reward received after turn t (already weighted by the config).
  done          bool  the episode ended at turn t.
  valid         bool  turn t exists (False after the episode ended: padding).
  success       bool  env reports task solved at turn t.
  valid_action  bool  the action of turn t parsed as a well-formed action.
  state_hash    u32   fingerprint of the env state *before* turn t's action (the anchor
                      state the action was taken in; equal states -> equal hashes).
  next_hash     u32   fingerprint of the state after turn t's action.
  agent_id      i32   which agent acted at turn t (0 for single-agent runs).
  milestone     bool  env flagged a milestone reached at turn t.
  fatal         bool  the turn was an erroneous step (tool error / step_error flag).
  agent_id, milestone and fatal are read from the env's `info` when it emits them (else 0).
  extras        dict[str, [N, T]]: every other env `info` key, one column per key with the
                env's dtype (e.g. FrozenLake's `fell`, the step limit's `truncated`, a
                `question_index`, `prm_score`, `skill_injected`), and each reward term as
                `reward_terms/<name>` f32 (names from `env.reward_names`, else the term's
                index `reward_terms/0`, ...). Padded turns hold 0. Credit kernels read them
                as `batch.extras["fell"]`; a pytree like the rest (empty dict when none).
Token level `[N, L]`:
  tokens        i32   the token sequence (prompt, actions, observations, padding).
  loss_mask     f32   1.0 on policy-generated tokens only.
  turn_index    i32   which turn a token belongs to; -1 for the prompt/padding.
  position      i32   rotary position of each token.
  logprobs      f32   behaviour log-probs (raw policy, temperature 1) on generated tokens.
  values, ref_logprobs, teacher_logprobs: optional f32 `[N, L]` (None when absent).
  attention_mask  bool (optional) the slot holds a real token (False on padding); the
                training forward passes it as `valid`. None means all real.
  sample_logprobs f32 (optional) log-probs under the distribution actually sampled from
                (temperature / top-k / top-p applied), for sampler importance corrections.
  segment_len   static int. 0: concatenated history, one sequence per episode row.
                > 0: windowed history: each row holds T per-turn samples of `segment_len`
                slots back to back (L = T * segment_len); sample t (turn t's context plus
                its action) is `[:, t*segment_len:(t+1)*segment_len]`, positions restart
                at 0 in each, and the learner runs the forward on the `[N*T, segment_len]`
                reshape (attention never crosses samples). turn_index / loss_mask keep
                their meaning, so turn-level credit broadcasts through turn_index as is.
Per episode `[N]`:
  group_id      i32   which task/group the episode belongs to, in [0, N).
  episode_key   u32 `[N, 2]`  the PRNG key data the episode was sampled with (exact replay).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class EpisodeBatch:
  # turn level [N, T]
  reward: jax.Array
  done: jax.Array
  valid: jax.Array
  success: jax.Array
  valid_action: jax.Array
  state_hash: jax.Array
  next_hash: jax.Array
  agent_id: jax.Array
  milestone: jax.Array
  fatal: jax.Array
  # token level [N, L]
  tokens: jax.Array
  loss_mask: jax.Array
  turn_index: jax.Array
  position: jax.Array
  logprobs: jax.Array
  # per episode [N]
  group_id: jax.Array
  episode_key: jax.Array
  # optional token level [N, L]
  values: Optional[jax.Array] = None
  ref_logprobs: Optional[jax.Array] = None
  teacher_logprobs: Optional[jax.Array] = None
  # rollout extras (added by the rollout room)
  attention_mask: Optional[jax.Array] = None
  sample_logprobs: Optional[jax.Array] = None
  # turn-level env extras [N, T] (see the module docstring)
  extras: Dict[str, jax.Array] = struct.field(default_factory=dict)
  segment_len: int = struct.field(pytree_node=False, default=0)

  @property
  def num_episodes(self) -> int:
    return self.reward.shape[0]

  @property
  def num_turns(self) -> int:
    return self.reward.shape[1]

  @property
  def num_tokens(self) -> int:
    return self.tokens.shape[1]


def from_turns(reward, valid, group_id, *, tokens_per_turn: int = 1,
               extras: Optional[Mapping[str, jax.Array]] = None, **turn_fields) -> EpisodeBatch:
  """Builds an EpisodeBatch from turn-level arrays alone (tests, credit benchmarks).

  Each valid turn gets `tokens_per_turn` generated tokens laid out back to back, so token
  level fields are consistent with the turn level ones: turn t of episode i owns tokens
  `[t * k, (t + 1) * k)` (k = tokens_per_turn), loss_mask is 1 there iff the turn is valid.

  Args:
    reward: `[N, T]` f32.
    valid: `[N, T]` bool.
    group_id: `[N]` i32.
    tokens_per_turn: k, the number of token slots per turn.
    extras: optional turn-level extras `{name: [N, T]}` (dtypes kept; see the docstring).
    **turn_fields: optional overrides of the other `[N, T]` fields (done, success, ...).
  """
  reward = jnp.asarray(reward, jnp.float32)
  valid = jnp.asarray(valid, bool)
  n, t = reward.shape
  last = jnp.sum(valid, axis=1) - 1
  done_default = (jnp.arange(t)[None, :] == last[:, None]) & valid
  zeros_b = jnp.zeros((n, t), bool)
  f = dict(
      done=done_default, success=zeros_b, valid_action=valid, milestone=zeros_b, fatal=zeros_b,
      state_hash=jnp.zeros((n, t), jnp.uint32), next_hash=jnp.zeros((n, t), jnp.uint32),
      agent_id=jnp.zeros((n, t), jnp.int32))
  unknown = sorted(set(turn_fields) - {x.name for x in dataclasses.fields(EpisodeBatch)})
  if unknown:
    raise TypeError(f"from_turns got {unknown}, which are not EpisodeBatch fields; turn "
                    f"fields: {sorted(f)} (put other env signals in extras=)")
  f.update({k: jnp.asarray(v) for k, v in turn_fields.items()})
  ex = {k: jnp.asarray(v) for k, v in (extras or {}).items()}
  for k, v in ex.items():
    if v.shape != (n, t):
      raise ValueError(f"from_turns extras[{k!r}] must be [N, T] = {(n, t)}, got {v.shape}")
  turn_of_token = jnp.repeat(jnp.arange(t), tokens_per_turn)  # [L]
  valid_tok = jnp.repeat(valid, tokens_per_turn, axis=1)  # [N, L]
  ln = t * tokens_per_turn
  return EpisodeBatch(
      reward=reward, valid=valid, **f,
      tokens=jnp.zeros((n, ln), jnp.int32),
      loss_mask=valid_tok.astype(jnp.float32),
      turn_index=jnp.where(valid_tok, turn_of_token[None, :], -1).astype(jnp.int32),
      position=jnp.broadcast_to(jnp.arange(ln, dtype=jnp.int32), (n, ln)),
      logprobs=jnp.zeros((n, ln), jnp.float32),
      group_id=jnp.asarray(group_id, jnp.int32),
      episode_key=jnp.zeros((n, 2), jnp.uint32), extras=ex)
