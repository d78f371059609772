"""TRIAL-style hindsight teacher: the same network, its context holding privileged text.

TRIAL / StepOPSD-style credit (ALGORITHMS.md, `losses.distill.hindsight_gap_advantages`): a
teacher that sees what the student could not (the goal's hidden attributes, where the hidden
objects are: `env.privileged_text(task)`; a host game's expert plan from the rollout's start,
`TextHostEnv.privileged_plans`) scores the student's sampled tokens; the gap
log pi_T(y_t) - log pi(y_t) reweights the task advantages. The teacher is the current policy
itself (no second model): only its context differs.

The privileged text is a *prefix* of every row: `[priv (P, right-padded), episode tokens]`.
Pad slots are masked keys and the episode's positions are shifted by the text's true length,
so each row equals the unpadded concatenation `priv[:len] + tokens` (tested against it), and
the student's token t sits at column P + t of the teacher's row: one static slice maps the
teacher's log-probs back, no re-rendering of prompts or observations. (Putting the text in
front of the chat template's first token, rather than inside its system message, is our
choice: it keeps that slice static for any template.)

Episode -> task: episode i of a plain rollout plays task `i // G` (members contiguous,
rollout.episode). Strategies that drop or reorder groups (starpo_s, dapo) break that map, so
`config.hindsight` is checked against them at start-up (train.config).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text
from agent_rl.losses.distill import hindsight_gap_advantages
from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.train import host_games

# Strategies whose episodes keep the rollout's order (episode i plays task i // G).
ORDER_KEEPING = ("plain", "selective_gate", "tsr", "branch")


def episode_privileged(env, tasks, group_size: int) -> Text:
  """`Text [N, P]`: each episode's privileged text (task i // G's)."""
  return _per_episode(jax.vmap(env.privileged_text)(tasks), group_size)


def _per_episode(priv: Text, group_size: int) -> Text:
  rep = lambda x: jnp.repeat(jnp.asarray(x), group_size, axis=0)  # noqa: E731
  return Text(tokens=rep(priv.tokens), length=rep(priv.length))


def host_episode_privileged(env, tasks, reset_keys, group_size: int, width: int) -> Text:
  """`Text [N, width]`: a host env's privileged text of each episode, its task's expert plan
  from the rollout's start (`TextHostEnv.privileged_plans`: the plan depends on the reset
  seed, not only the task). tasks `[n_tasks]`, reset_keys `[n_tasks, 2]`: the rollout's."""
  return _per_episode(env.privileged_plans(np.asarray(tasks), np.asarray(reset_keys), width),
                      group_size)


def prefixed_rows(tok, pos, attn, priv: Text):
  """Rows `[R, P + S]` with the privileged prefix; R = N * reps (windowed segments repeat
  their episode's text). tok, pos: [R, S] int32; attn [R, S] bool; priv [N, P]."""
  reps = tok.shape[0] // priv.tokens.shape[0]
  ptok = jnp.repeat(priv.tokens, reps, axis=0).astype(tok.dtype)
  plen = jnp.repeat(priv.length, reps, axis=0).astype(jnp.int32)
  p = ptok.shape[1]
  cols = jnp.arange(p, dtype=jnp.int32)[None, :]
  pmask = cols < plen[:, None]
  full_tok = jnp.concatenate([jnp.where(pmask, ptok, 0), tok], axis=1)
  full_pos = jnp.concatenate([jnp.broadcast_to(cols, ptok.shape), pos + plen[:, None]], axis=1)
  full_attn = jnp.concatenate([pmask, attn.astype(bool)], axis=1)
  return full_tok, full_pos.astype(jnp.int32), full_attn


@functools.partial(jax.jit, static_argnums=0)
def row_logprobs(lm_graphdef, params, tok, pos, attn, priv: Text) -> jax.Array:
  """`[R, S]` log-probs of rows `tok [R, S]` under the policy with the privileged prefix."""
  from agent_rl.train.policy import policy_token_stats  # pulls in the models room
  full_tok, full_pos, full_attn = prefixed_rows(tok, pos, attn, priv)
  lp, _ = policy_token_stats(lm_graphdef, params, full_tok, full_pos, full_attn)
  return lp[:, priv.tokens.shape[1]:] * attn


@functools.partial(jax.jit, static_argnums=0, static_argnames=("mode", "chunks"))
def privileged_logprobs(lm_graphdef, params, batch: EpisodeBatch, priv: Text,
                        mode: str = "shared", chunks: int = 1) -> jax.Array:
  """`[N, L]` log-probs of the batch's tokens under the policy with the privileged prefix;
  with per-agent weights (`mode` lora | separate) each row under its acting agent's; `chunks`
  slices of the prefixed rows at a time (`learner.map_row_chunks`)."""
  from agent_rl.agents.routing import route
  from agent_rl.train.learner import _rows, map_row_chunks, row_agents
  from agent_rl.train.policy import policy_token_stats  # pulls in the models room
  tok, pos, attn, restore = _rows(batch)
  full = prefixed_rows(tok, pos, attn, priv)
  lp = map_row_chunks(lambda t, q, a, g: route(
      mode, lambda p: policy_token_stats(lm_graphdef, p, t, q, a)[0], params, g, lm_only=True),
      chunks, *full, row_agents(batch))
  return restore(lp[:, priv.tokens.shape[1]:])


def reweight(rows, teacher_logprobs: jax.Array, *, mode: str, beta: float, gap_clip: float,
             normalize: bool):
  """The learner rows with hindsight-reweighted advantages (`hindsight_gap_advantages`), and
  metrics: the mean gap on loss tokens and the mean |A' - A|."""
  tlp = teacher_logprobs.reshape(rows.old_logprobs.shape)
  adv = hindsight_gap_advantages(rows.advantages, rows.old_logprobs, tlp, rows.loss_mask,
                                 mode=mode, beta=beta, gap_clip=gap_clip, normalize=normalize)
  m = rows.loss_mask.astype(jnp.float32)
  den = jnp.maximum(jnp.sum(m), 1.0)
  metrics = {"hindsight/gap": jnp.sum((tlp - rows.old_logprobs) * m) / den,
             "hindsight/adv_change": jnp.sum(jnp.abs(adv - rows.advantages) * m) / den}
  return rows._replace(advantages=adv), metrics


def validate_hindsight(c, need) -> None:
  """`config.hindsight` at start-up: a known mode, sane numbers, an order-keeping strategy."""
  h = c.hindsight
  need(h.mode in ("", "weight", "bonus"), "hindsight.mode",
       f"must be '' (off) | weight | bonus, got {h.mode!r}")
  if not h.mode:
    return
  need(h.beta > 0, "hindsight.beta", f"must be > 0, got {h.beta}")
  need(h.gap_clip > 0, "hindsight.gap_clip", f"must be > 0, got {h.gap_clip}")
  need(c.rollout.strategy in ORDER_KEEPING, "hindsight.mode",
       f"needs a rollout strategy that keeps episodes in task order ({', '.join(ORDER_KEEPING)});"
       f" rollout.strategy is {c.rollout.strategy!r}")


@functools.partial(jax.jit, static_argnums=(0, 2))
def _episode_privileged_jit(env, tasks, group_size):
  return episode_privileged(env, tasks, group_size)


def rescore(run, lm_params, tasks, k_roll, batch: EpisodeBatch, rows):
  """The RL phase's hindsight step: privileged log-probs of the batch under the current
  policy, then the reweighted rows (`config.hindsight`) and their metrics. k_roll: the
  iteration's rollout key (a host env's plans start where the rollout's resets did)."""
  c, env = run.c, run.setup.env
  if callable(getattr(env, "privileged_plans", None)):
    reset_keys = host_games.rollout_reset_keys(c, run.strategy, k_roll)
    priv = host_episode_privileged(env, tasks, reset_keys, c.rollout.group_size,
                                   c.env.host.privileged_tokens)
  else:
    priv = _episode_privileged_jit(env, tasks, c.rollout.group_size)
  tlp = privileged_logprobs(run.spec.lm_graphdef, lm_params, batch, priv,
                            mode=run.setup.agents.mode, chunks=run.forward_chunks)
  h = c.hindsight
  rows, metrics = reweight(rows, tlp, mode=h.mode, beta=h.beta, gap_clip=h.gap_clip,
                           normalize=h.normalize)
  # How much the teacher read (0 where a host game had no plan: teacher = student there).
  return rows, {**metrics, "hindsight/privileged_tokens": jnp.mean(priv.length.astype(jnp.float32))}


def check_env(c, env) -> None:
  """At start-up: a hindsight run's env must provide the privileged text (a host env: its
  games' expert plans)."""
  if c.hindsight.mode and not any(callable(getattr(env, f, None))
                                  for f in ("privileged_text", "privileged_plans")):
    raise ValueError(f"config.hindsight.mode={c.hindsight.mode!r}: env {c.env.name!r} has no "
                     "privileged_text(task) (the text the hindsight teacher reads)")
