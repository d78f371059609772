"""Start-up memory report: per-device bytes of params, optimizer state, KV cache and
activations, computed from shapes and shardings before anything is compiled.

Params and optimizer state are exact (shard shapes of the abstract state under the mesh).
The KV cache is exact for the rollout's cache layout (K and V per layer, `[episodes, kv_heads,
length, head_dim]`, sharded over the batch and tensor axes). Activations of the train step
are an estimate of what backprop keeps alive without rematerialization (per layer and token:
the residual, norms, q/k/v, attention output, the three MLP projections, plus the `[heads,
L, L]` attention scores; and the logits with their softmax and gradient), so a config that
will not fit is refused with the numbers instead of dying in the allocator after minutes of
compilation.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import Mesh

from agent_rl.parallel.placement import local_size
from agent_rl.parallel.rules import Rules

GIB = 1024 ** 3


class MemoryBudgetError(ValueError):
  """The estimated per-device memory exceeds `config.mesh.memory_budget_gib`."""


def shard_bytes(shape, dtype, sharding) -> int:
  """Bytes one device holds of an array of `shape`/`dtype` under `sharding` (None: all)."""
  if sharding is not None and hasattr(sharding, "shard_shape"):
    shape = sharding.shard_shape(tuple(shape))
  return int(math.prod(shape)) * np.dtype(dtype).itemsize


def tree_bytes_per_device(tree: Any, shardings: Any = None) -> int:
  """Sum of `shard_bytes` over a pytree of arrays / ShapeDtypeStructs; `shardings` is a
  matching tree (default: each leaf's own `.sharding`, unsharded when it has none)."""
  leaves = jax.tree.leaves(tree)
  shs = (jax.tree.leaves(shardings) if shardings is not None
         else [getattr(x, "sharding", None) for x in leaves])
  if len(shs) != len(leaves):
    raise ValueError(f"shardings tree has {len(shs)} leaves, the array tree {len(leaves)}")
  return sum(shard_bytes(x.shape, x.dtype, s) for x, s in zip(leaves, shs))


def kv_cache_bytes(model_cfg: Any, episodes: int, length: int, mesh: Mesh, rules: Rules,
                   dtype=np.float32) -> int:
  """Per-device bytes of the rollout KV cache: 2 x layers x [episodes, kv_heads, length, head_dim]."""
  b = local_size(episodes, mesh, rules, "batch")
  kv = local_size(model_cfg.num_kv_heads, mesh, rules, "kv_heads")
  return 2 * model_cfg.num_layers * b * kv * length * model_cfg.head_dim * np.dtype(dtype).itemsize


def activation_bytes(model_cfg: Any, rows: int, length: int, mesh: Mesh, rules: Rules,
                     dtype=np.float32) -> int:
  """Estimated per-device activation bytes kept for backprop by one train step."""
  b = local_size(rows, mesh, rules, "batch")
  tokens = b * length
  h, hd = model_cfg.hidden, model_cfg.head_dim
  heads = local_size(model_cfg.num_heads, mesh, rules, "heads")
  kv = local_size(model_cfg.num_kv_heads, mesh, rules, "kv_heads")
  mlp = local_size(model_cfg.intermediate, mesh, rules, "mlp")
  vocab = local_size(model_cfg.vocab_size, mesh, rules, "vocab")
  per_token_layer = 4 * h + (2 * heads + 2 * kv) * hd + 3 * mlp
  scores = 2 * b * heads * length * length  # scores and probabilities
  per_layer = tokens * per_token_layer + scores
  logits = 3 * tokens * vocab
  return (model_cfg.num_layers * per_layer + logits) * np.dtype(dtype).itemsize


@dataclasses.dataclass(frozen=True)
class MemoryReport:
  mesh: Mapping[str, int]
  params: int
  optimizer: int
  kv_cache: int
  activations: int
  budget_gib: float = 0.0

  @property
  def total(self) -> int:
    # Rollout (KV cache) and update (activations) do not overlap in time.
    return self.params + self.optimizer + max(self.kv_cache, self.activations)

  def text(self) -> str:
    g = lambda n: f"{n / GIB:.3f} GiB"
    mesh = " x ".join(f"{k}={v}" for k, v in self.mesh.items())
    lines = [f"mesh: {mesh} ({math.prod(self.mesh.values())} devices)",
             "per-device memory (estimated before compiling):",
             f"  params            {g(self.params)}",
             f"  optimizer state   {g(self.optimizer)}",
             f"  rollout KV cache  {g(self.kv_cache)}",
             f"  train activations {g(self.activations)} (estimate)",
             f"  peak              {g(self.total)} = params + optimizer + max(KV cache, activations)"]
    if self.budget_gib:
      lines.append(f"  budget            {self.budget_gib:.3f} GiB (config.mesh.memory_budget_gib)")
    return "\n".join(lines)

  def check(self) -> None:
    """Raises MemoryBudgetError with the numbers when the peak exceeds the budget."""
    if self.budget_gib and self.total > self.budget_gib * GIB:
      raise MemoryBudgetError(
          f"config.mesh.memory_budget_gib: the estimated peak of {self.total / GIB:.3f} GiB per "
          f"device exceeds the budget of {self.budget_gib:.3f} GiB\n{self.text()}\n"
          "Shard more (mesh.fsdp / mesh.tensor), or reduce rollout.num_tasks * group_size or "
          "train.minibatch_episodes.")


def report(*, mesh: Mesh, rules: Rules, params: Any, params_shardings: Any, optimizer: Any,
           opt_shardings: Any, model_cfg: Any, episodes: int, cache_len: int, rows: int,
           length: int, budget_gib: float = 0.0, dtype=np.float32) -> MemoryReport:
  """Builds the report from abstract params / optimizer state and their shardings."""
  return MemoryReport(
      mesh=dict(mesh.shape), params=tree_bytes_per_device(params, params_shardings),
      optimizer=tree_bytes_per_device(optimizer, opt_shardings),
      kv_cache=kv_cache_bytes(model_cfg, episodes, cache_len, mesh, rules, dtype),
      activations=activation_bytes(model_cfg, rows, length, mesh, rules, dtype),
      budget_gib=float(budget_gib))


__all__ = ["MemoryReport", "MemoryBudgetError", "report", "kv_cache_bytes", "activation_bytes",
           "tree_bytes_per_device", "shard_bytes"]
