"""The reward model: the policy's decoder with a scalar `RewardHead`, and its scoring pass.

    model = RewardModel(cfg, rngs=nnx.Rngs(0))            # .lm (Transformer), .head (RewardHead)
    scores = score_batch(graphdef, params, batch)         # one jitted pass over an EpisodeBatch
    scores.outcome  # [N]    outcome RM: read at the episode's last generated token
    scores.turns    # [N, T] process RM: read at each turn's last generated token (0: no turn)

Where a score is read: a reward model judges what the agent *did*, so scores are read at the
last token of the agent's own text (`turn_index >= 0`), the end of an action — the outcome
score at the last action of the episode (an ORM, Cobbe et al. 2021, arXiv:2110.14168; the
Bradley-Terry RM of Ouyang et al. 2022 reads the last token of the completion), the per-turn
scores at the end of each turn's action (a PRM's per-step score, Lightman et al. 2023,
arXiv:2305.20050). The outcome score equals the last turn's score. Observation tokens follow
a turn's action, so the score of turn t sees the states before it and its action, not the
state it produced.

Both history layouts: concatenated rows (one sequence per episode) and windowed rows (T
samples of `segment_len` per row, each its own forward), like `train.learner`'s passes.
Params are the run's (born sharded or restored onto the run's mesh, `train.state.StateSpec`);
the batch is row-sharded by `Placement.batch`, so the pass is data-parallel with no weight copy.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models import ModelConfig, RewardHead, Transformer
from agent_rl.rollout.batch import EpisodeBatch


class RewardModel(nnx.Module):
  """`lm`: the decoder (the policy's architecture, so a policy run's `lm` params load into it);
  `head`: RewardHead, one scalar per read position."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.lm = Transformer(cfg, rngs=rngs)
    self.head = RewardHead(cfg.hidden, rngs=rngs)

  def scores_at(self, tokens, positions, valid, read) -> jax.Array:
    """tokens/positions [R, S] i32, valid [R, S] bool, read [N, K] i32 flat indices into the
    [N, L] = reshape of the rows (-1 = none) -> scores [N, K] f32 (0 where read is -1).

    Only the read positions are needed, so the decoder's last layer runs at those rows alone
    (`Transformer.apply(read=...)`): read k of episode n lies in forward row
    n * (R // N) + idx // S at column idx % S; each forward row gets a [K] read table (slot k
    holds episode read k when it lies in that row), so one static shape serves both layouts
    (concatenated: R = N; windowed: R = N * T).
    """
    n, k = read.shape
    r, s = tokens.shape
    idx = jnp.maximum(read, 0)
    row = jnp.arange(n, dtype=jnp.int32)[:, None] * (r // n) + idx // s  # [N, K]
    slot = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (n, k))
    table = jnp.zeros((r, k), jnp.int32).at[row, slot].set(idx % s)
    _, hidden, _ = self.lm.apply(tokens, positions, valid, read=table)  # [R, K, E]
    h = hidden[row, slot]  # [N, K, E]
    out = self.head(h.reshape(n * k, 1, -1), (read >= 0).reshape(n * k, 1))
    return out.reshape(n, k)


class RewardScores(NamedTuple):
  outcome: jax.Array  # [N] f32
  turns: jax.Array  # [N, T] f32, 0 on turns without tokens


def turn_last_index(turn_index: jax.Array, num_turns: int) -> jax.Array:
  """turn_index [N, L] i32 (-1 = not the agent's) -> [N, T] index of turn t's last token (-1
  when turn t has none)."""
  l = turn_index.shape[-1]
  pos = jnp.arange(l, dtype=jnp.int32)
  hit = turn_index[:, None, :] == jnp.arange(num_turns, dtype=jnp.int32)[None, :, None]
  return jnp.max(jnp.where(hit, pos, -1), axis=-1)


def outcome_index(turn_index: jax.Array) -> jax.Array:
  """turn_index [N, L] -> [N] index of the last agent token (-1 when there is none)."""
  pos = jnp.arange(turn_index.shape[-1], dtype=jnp.int32)
  return jnp.max(jnp.where(turn_index >= 0, pos, -1), axis=-1)


def rows_of(batch: EpisodeBatch):
  """(tokens, positions, valid) forward rows: [N, L], or [N*T, S] for windowed history."""
  tok, pos = batch.tokens, batch.position
  attn = batch.attention_mask if batch.attention_mask is not None else jnp.ones(tok.shape, bool)
  if batch.segment_len:
    tok, pos, attn = (x.reshape(-1, batch.segment_len) for x in (tok, pos, attn))
  return tok, pos, attn


def score_rows(graphdef, params, tokens, positions, valid, turn_index, num_turns: int
               ) -> RewardScores:
  """The pure scoring function. tokens/positions/valid: forward rows [R, S]; turn_index:
  [N, L] with N*L = R*S; -> RewardScores (outcome [N], turns [N, T])."""
  model = nnx.merge(graphdef, params)
  read = jnp.concatenate([turn_last_index(turn_index, num_turns),
                          outcome_index(turn_index)[:, None]], axis=1)
  s = model.scores_at(tokens, positions, valid, read)
  return RewardScores(outcome=s[:, -1], turns=s[:, :-1])


@functools.partial(jax.jit, static_argnums=0)
def score_batch(graphdef, params, batch: EpisodeBatch) -> RewardScores:
  """One jitted pass of the reward model over an EpisodeBatch -> RewardScores."""
  tok, pos, attn = rows_of(batch)
  return score_rows(graphdef, params, tok, pos, attn, batch.turn_index, batch.num_turns)


def reward_model_factory(model_cfg: ModelConfig, seed: int):
  """`() -> RewardModel`, deterministic (born-sharded init runs it twice)."""
  return lambda: RewardModel(model_cfg, rngs=nnx.Rngs(seed))
