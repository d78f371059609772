"""IterPO: single-turn GRPO against a Q-function fitted on logged episodes' returns.

Paper: Jiang, Bhandari, Yang, Munos, Lu (Meta / FAIR), "Aligning LLMs Toward Multi-Turn
Conversational Outcomes Using Iterative PPO" (arXiv 2511.21638, Nov 2025; as "... Using
Iterative RLHF", with Iterative GRPO, LLA 2026, openreview 4LnkDDwLg8). What the abstracts
say (read): a learned multi-turn Q-function used as the reward model of a single-turn
RLHF problem turns the multi-turn RL problem into a sequence of single-turn ones; solving
that single-turn problem with token-level PPO / GRPO is an (approximate) policy-improvement
step of the multi-turn problem; Iterative PPO / GRPO alternates between fitting Q from
logged trajectories of the current policy and improving the policy ("batch online"
policy iteration). The estimator of Q (Monte Carlo returns, per one summary) and the
experiments' numbers were not reachable from here (abstracts and summaries only).

Our reading, on an EpisodeBatch (each turn t of episode i is one (state, action) sample):

  Q fit     the critic (`config.model.critic`: a value head on the policy trunk, `shared`,
            or its own decoder, `separate`) regresses every loss-mask token of turn t to
            the Monte Carlo return-to-go  G_t = sum_{j >= t} gamma^(j - t) r_j  of the
            logged episode (the value loss term, every iteration, on the batch it scores).
  Q(s, a)   the critic's value at the LAST loss-mask token of turn t: `values[:, p]` is V of
            the prefix through token p (train/policy.py), i.e. of (s_t, all of a_t): the
            turn-level MDP's Q(s_t, a_t). (CARL reads the FIRST token for V(s); credit/carl.py.)
  GRPO      A_t = (Q(s_t, a_t) - mean_j Q(s, a_j)) / (std_j Q(s, a_j) + eps) over the
            group of actions a_j sampled at the same state s: the valid turns of the same
            task group (`group_id`) whose state before the action is the same
            (`state_hash`, exact equality; GiGPO's anchor states, credit/gigpo.py).
            A state sampled once has nothing to compare with: A = 0 there. Zero-variance
            groups give 0. Each turn is then its own single-turn sample (windowed history).

Why this reading: the paper's single-turn problem samples G responses at each logged state
and scores them with Q. In a compiled rollout the G episodes of a task share their first
state (and any later state they reach alike), so those groups are G actions sampled at one
state, with no extra generation. The Q used is the critic as fitted on the episodes logged
up to the previous iteration (values are read at rollout time, before this batch's update
refits it): batch online policy iteration with a one-batch lag. `train.critic_prefit = n`
(train/prefit.py) gives the paper's order instead: n critic-only passes fit Q on this batch's
returns, the values are re-scored, and only then does this kernel read them
(`configs/iterpo_deal.py:tiny,fit_first`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.credit.base import Credit, register, turn_to_token
from agent_rl.credit.gae import _values
from agent_rl.credit.gigpo import anchor_ids, check_norm, discounted_returns, normalize
from agent_rl.credit.needs import Needs
from agent_rl.rollout.batch import EpisodeBatch


def turn_q_values(values: jax.Array, loss_mask: jax.Array, turn_index: jax.Array,
                  num_turns: int) -> tuple[jax.Array, jax.Array]:
  """Q(s_t, a_t): the critic value at each turn's last loss-mask token.

  values, loss_mask: `[N, L]` f32; turn_index: `[N, L]` i32 (-1 = prompt / observation /
  padding). Returns (q `[N, T]` f32, 0 where the turn has no loss-mask token; has `[N, T]`
  bool: the turn has one).
  """
  n, ln = values.shape
  tok_ok = (loss_mask > 0) & (turn_index >= 0)
  ti = jnp.clip(turn_index, 0, num_turns - 1)
  pos = jnp.where(tok_ok, jnp.arange(ln, dtype=jnp.int32)[None, :], -1)
  last = jnp.full((n, num_turns), -1, jnp.int32).at[jnp.arange(n)[:, None], ti].max(pos)
  has = last >= 0
  q = jnp.take_along_axis(values.astype(jnp.float32), jnp.maximum(last, 0), axis=1)
  return jnp.where(has, q, 0.0), has


def q_targets(reward: jax.Array, valid: jax.Array, loss_mask: jax.Array, turn_index: jax.Array,
              gamma: float = 1.0) -> jax.Array:
  """The Q-function's regression targets `[N, L]`: each loss-mask token of turn t gets the
  logged episode's return-to-go G_t = sum_{j >= t} gamma^(j - t) r_j (rewards of invalid
  turns are 0); 0 off the loss mask. reward, valid `[N, T]`; loss_mask, turn_index `[N, L]`."""
  g = discounted_returns(reward, valid, gamma)
  on = ((loss_mask > 0) & (turn_index >= 0)).astype(jnp.float32)
  return turn_to_token(g, turn_index, on)


def state_group_advantage(q: jax.Array, counted: jax.Array, group_id: jax.Array,
                          state_hash: jax.Array, *, norm: str = "mean_std_norm",
                          eps: float = 1e-6) -> jax.Array:
  """Single-turn GRPO of Q within (group_id, state_hash) groups of the counted turns.

  q: `[N, T]` f32 scores; counted: `[N, T]` bool (valid turns with a generated token);
  group_id `[N]`; state_hash `[N, T]` u32 (the state before the turn's action).
  norm: "mean_std_norm" ((q - mu) / (sigma + eps), Bessel sigma: GRPO) or "mean_norm".
  Returns A `[N, T]`: 0 for turns alone at their state, in zero-variance groups and on
  uncounted turns.
  """
  check_norm(norm)
  ids, m = anchor_ids(group_id, state_hash, counted)
  a = normalize(q, ids, m, counted, norm=norm, eps=eps, singleton="zero")
  return jnp.where(counted, a, 0.0)


@register("iterpo", needs=Needs(critic=True))
def iterpo(batch: EpisodeBatch, *, gamma: float = 1.0, norm: str = "mean_std_norm",
           eps: float = 1e-6) -> Credit:
  """IterPO turn advantages and Q targets (see the module docstring).

  Inputs: batch.reward/valid/state_hash `[N, T]`, group_id `[N]`, batch.values (the
  critic's, read at rollout time), loss_mask, turn_index `[N, L]`.
  gamma: the turn-level discount of the Q targets; norm, eps: the GRPO normalisation.
  Returns Credit(turn=A `[N, T]` (0 on padding, singleton states and turns without a
  generated token), returns=G_t on turn t's loss-mask tokens `[N, L]`: the critic's
  Q-regression targets).
  """
  check_norm(norm)
  _, t = batch.valid.shape
  q, has = turn_q_values(_values(batch, "iterpo"), batch.loss_mask, batch.turn_index, t)
  counted = batch.valid & has
  adv = state_group_advantage(q, counted, batch.group_id, batch.state_hash, norm=norm, eps=eps)
  return Credit(turn=adv, returns=q_targets(batch.reward, batch.valid, batch.loss_mask,
                                             batch.turn_index, gamma))
