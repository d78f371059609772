"""Agents that start from other runs and agents that never train (per-agent weights only).

    config.agents.init   = ",runs/weak,runs/strong"  # agent k's policy LM from run k ("" = the
                                                     # run's own init: seed or model.init_from)
    config.agents.frozen = "1,2"                     # these agents' weights never change

A multi-agent system often holds agents that are not trained: Hera's router (arXiv:2605.24598)
is trained over a pool of frozen worker policies, IB-RL's held-out counterparts are frozen
checkpoints, a proposer can be fixed while its solver learns. A frozen agent still acts in
every rollout (its rows route to its weights as before); it is out of training in two ways:
- its turns leave the loss (`freeze_rows`: loss mask 0 on its rows, so token-mean
  normalization counts the trained agents' tokens only), in RL and in SFT;
- its slice of every stacked leaf gets a zero update (`freeze_optimizer`: chained after the
  optimizer, so AdamW's weight decay cannot move it either; p + 0 = p, bit-identical).
`agents.init` needs the separate mode (a run's full weights become one agent's slice); each
named run must be a single-network run of the same model (checked at start-up, naming the
field). `agents.frozen` works with lora (the agent's adapter) and separate.
"""
from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from agent_rl.agents.params import is_stacked


def parse_init(spec: Any) -> tuple[str, ...]:
  """`agents.init` as one entry per agent ("" = the run's own init), or () when unset."""
  if not spec:
    return ()
  items = spec.split(",") if isinstance(spec, str) else list(spec)
  return tuple(str(s).strip() for s in items)


def parse_frozen(spec: Any) -> tuple[int, ...]:
  """`agents.frozen` as sorted distinct agent indices ("1,2" or a tuple)."""
  if spec in ("", None, ()):
    return ()
  items = spec.split(",") if isinstance(spec, str) else list(spec)
  try:
    out = sorted({int(str(s).strip()) for s in items if str(s).strip()})
  except ValueError:
    raise ValueError(f"config.agents.frozen: agent indices as '1,2' or a tuple of ints, got "
                     f"{spec!r}") from None
  if any(k < 0 for k in out):
    raise ValueError(f"config.agents.frozen: agent indices are >= 0, got {spec!r}")
  return tuple(out)


def validate(c: Any, need) -> None:
  """Config-only checks of `agents.init` / `agents.frozen` (counts are checked by `check`)."""
  init, frozen = parse_init(c.agents.get("init", "")), parse_frozen(c.agents.get("frozen", ""))
  if init:
    need(c.agents.mode == "separate", "agents.init",
         f"per-agent initial weights need agents.mode='separate' (a run's full weights become "
         f"one agent's copy), got {c.agents.mode!r}")
    for k, path in enumerate(init):
      if path:
        for f in ("config.json", "checkpoints"):
          need(os.path.exists(os.path.join(path, f)), "agents.init",
               f"agent {k}: {path!r} is not an agent_rl run directory (no {f})")
  if frozen:
    need(c.agents.mode != "shared", "agents.frozen",
         "needs per-agent weights (agents.mode=lora|separate): with 'shared' every agent is the "
         "same network")


def check(c: Any, num: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
  """(init, frozen) checked against the run's agent count K (errors name the field)."""
  init, frozen = parse_init(c.agents.get("init", "")), parse_frozen(c.agents.get("frozen", ""))
  if init and len(init) != num:
    raise ValueError(f"config.agents.init: {len(init)} entries for {num} agents; give one per "
                     "agent ('' keeps the run's own init), e.g. ',runs/a,runs/b'")
  bad = [k for k in frozen if k >= num]
  if bad:
    raise ValueError(f"config.agents.frozen: agents {bad} do not exist ({num} agents: 0..{num - 1})")
  return init, frozen


def freeze_rows(rows: Any, frozen: tuple[int, ...]) -> Any:
  """Learner / SFT rows (`objective.minibatch.Minibatch`, `agent [R]`) with the frozen agents'
  rows out of the loss (loss mask 0)."""
  if not frozen:
    return rows
  keep = ~jnp.isin(rows.agent, jnp.asarray(frozen, jnp.int32))
  return rows._replace(loss_mask=rows.loss_mask * keep[:, None].astype(rows.loss_mask.dtype))


def freeze_optimizer(optimizer: optax.GradientTransformation, mode: str,
                     frozen: tuple[int, ...]) -> optax.GradientTransformation:
  """`optimizer`, then a zero update on the frozen agents' slice of every stacked leaf (the
  other leaves and agents untouched; no optimizer state of its own)."""
  if not frozen:
    return optimizer
  pick = is_stacked(mode)
  idx = jnp.asarray(frozen, jnp.int32)

  def zero(path, u):
    if not pick(path) or not hasattr(u, "shape") or u.ndim == 0:
      return u
    keep = jnp.ones((u.shape[0],), u.dtype).at[idx].set(0)
    return u * keep.reshape((-1,) + (1,) * (u.ndim - 1))

  def update(updates, state, params=None):
    del params
    return jax.tree_util.tree_map_with_path(zero, updates), state

  return optax.chain(optimizer, optax.GradientTransformation(lambda _: optax.EmptyState(),
                                                             update))


def put_agent(lm_stacked: Any, k: int | None, lm_single: Any) -> Any:
  """Separate-mode policy-LM params with agent k's copy (every agent's: k=None) replaced by a
  single network's params (same structure, unstacked); every leaf keeps its sharding."""
  def one(s, x):
    var = isinstance(s, nnx.Variable)  # nnx state leaves: the agent axis is in their metadata
    sv, xv = (s.get_value(), x.get_value() if isinstance(x, nnx.Variable) else x) if var else (s, x)
    xv = jnp.asarray(xv, sv.dtype)
    new = jax.device_put(jnp.broadcast_to(xv, sv.shape) if k is None else sv.at[k].set(xv),
                         sv.sharding)
    return s.replace(new) if var else new
  return jax.tree.map(one, lm_stacked, lm_single, is_leaf=lambda v: isinstance(v, nnx.Variable))
