"""Rows to agents: the rollout policy and the learner's forward for each parameter mode.

Every batch row acts as one agent (`agent [B]` int32: the episode loop's acting agent while
sampling, `EpisodeBatch.agent_id` of the row's turn in the learner). Per-agent parameters
(lora, separate) need one turn per row, i.e. windowed history (`rollout.history=windowed`):
in one concatenated transcript each agent would need its own KV cache of the whole episode.

  lora      `gather_rows` hands each row its adapter; one forward (base GEMMs shared).
  separate  every agent's forward over all rows (vmapped over the agent axis, its own caches
            `[K, ...]`), each row keeping its agent's logits / log-probs.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from agent_rl.agents.params import gather_rows, is_adapter, select_rows
from agent_rl.rollout.policy import Policy


def rollout_policy(mode: str, model_cfg: Any, lm_graphdef: Any, num: int) -> Policy:
  """The rollout Policy of a run's agents (shared: the plain Transformer policy)."""
  from agent_rl import models
  base = Policy.from_model(model_cfg, lm_graphdef)
  if mode == "shared":
    return base
  if mode == "lora":
    return dataclasses.replace(base, route=lambda params, agent: gather_rows(mode, params, agent))
  if mode != "separate":
    raise ValueError(f"config.agents.mode: unknown mode {mode!r}")

  def init_cache(cfg, batch, max_len):
    return jax.vmap(lambda _: models.init_cache(cfg, batch, max_len))(jnp.arange(num))

  def prefill(graphdef, routed, tokens, positions, valid, cache, rows=None):
    params, agent = routed
    run = lambda p, c: models.prefill(graphdef, p, tokens, positions, valid, c, rows=rows)
    out, hidden, cache = jax.vmap(run)(params, cache)
    return select_rows(out, agent), select_rows(hidden, agent), cache

  def decode_step(graphdef, routed, tokens, positions, cache, valid=None):
    params, agent = routed
    run = lambda p, c: models.decode_step(graphdef, p, tokens, positions, c, valid)
    logits, hidden, cache = jax.vmap(run)(params, cache)
    return select_rows(logits, agent), select_rows(hidden, agent), cache

  def forward(graphdef, routed, tokens, positions, valid):
    params, agent = routed
    logits, hidden = jax.vmap(lambda p: models.forward(graphdef, p, tokens, positions, valid))(
        params)
    return select_rows(logits, agent), select_rows(hidden, agent)

  return dataclasses.replace(base, init_cache=init_cache, prefill=prefill,
                             decode_step=decode_step, forward=forward,
                             route=lambda params, agent: (params, agent))


def route(mode: str, fn: Callable[[Any], Any], params: Any, agent: jax.Array, *,
          lm_only: bool = False) -> Any:
  """`fn(params)` -> a pytree of row outputs `[B, ...]`, each row b computed under agent
  `agent[b]`'s weights: shared, `fn(params)`; lora, `fn` of params whose stacked adapters are
  gathered per row (`[K, ...]` -> `[B, ...]`, one forward); separate, `fn` vmapped over the
  agent axis and each row's outputs taken from its agent (`select_rows`). lm_only: `params`
  is the policy LM's subtree (paths without the `lm` prefix), e.g. a KL reference."""
  if mode == "shared":
    return fn(params)
  agent = jnp.maximum(agent, 0)  # padded turns (-1) read agent 0; their rows are masked
  if mode == "lora":
    pre = (jax.tree_util.DictKey("lm"),) if lm_only else ()
    return fn(jax.tree_util.tree_map_with_path(
        lambda p, a: a[agent] if is_adapter(pre + p) else a, params))
  if mode != "separate":
    raise ValueError(f"config.agents.mode: unknown mode {mode!r}")
  return jax.tree.map(lambda x: select_rows(x, agent), jax.vmap(fn)(params))


def make_apply(mode: str, graphdef: Any, frozen: tuple = (), values_only: bool = False):
  """`apply(params, tokens, positions, valid, dropout_key=None, agent=None) -> TokenStats`
  (train.policy.make_apply's, with each row `[B]` of `agent` under its own agent's weights;
  values_only: the critic-only update's forward, `ActorCritic.value_stats`).
  frozen: agents that never train (agents/frozen.py; their rows are out of the loss). In the
  separate mode only the other agents' copies run (each copy reads every row, so a Hera
  router over two frozen workers costs one model's forward, not three); a frozen agent's
  rows then read agent 0 of the kept copies, and their outputs are masked by the loss."""
  from agent_rl.train.policy import make_apply as plain_apply
  base = plain_apply(graphdef, values_only)
  if mode == "shared":
    return base

  def apply(params, tok, pos, valid, dropout_key=None, agent=None):
    if agent is None or agent.shape != (tok.shape[0],):
      raise ValueError(f"agents.mode={mode!r}: the learner needs the acting agent of every row "
                       f"([{tok.shape[0]}] int32), got {None if agent is None else agent.shape}")
    if mode == "separate" and frozen:
      params, agent = _trained_copies(params, agent, frozen)
    return route(mode, lambda p: base(p, tok, pos, valid, dropout_key=dropout_key), params, agent)
  return apply


def _trained_copies(params: Any, agent: jax.Array, frozen: tuple) -> tuple[Any, jax.Array]:
  """Separate-mode params cut to the agents not frozen (a gather on the agent axis, whose
  gradient is zero on the frozen copies) and each row's agent renumbered among them."""
  num = jax.tree.leaves(params)[0].shape[0]
  keep = [k for k in range(num) if k not in frozen]
  if not keep:
    raise ValueError(f"config.agents.frozen: every agent ({num}) is frozen; nothing can train")
  idx = jnp.asarray(keep, jnp.int32)
  remap = jnp.zeros((num,), jnp.int32).at[idx].set(jnp.arange(len(keep), dtype=jnp.int32))
  return jax.tree.map(lambda x: x[idx], params), remap[jnp.maximum(agent, 0)]
