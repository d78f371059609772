"""Start-up memory report: per-device bytes of params, optimizer state, KV cache, prefill and
activations, computed from shapes and shardings before anything is compiled.

Params and optimizer state are exact (shard shapes of the abstract state under the mesh).
The KV cache is exact for the rollout's cache layout (K and V per layer, `[episodes, kv_heads,
length, head_dim]` in the compute dtype, sharded over the batch and tensor axes). A prefill's
temporaries (a windowed rollout prefills its whole window every turn) are an estimate of one
layer's working set for one chunk (`model.prefill_chunk`); XLA:CPU's compiled temporaries are
0.84-0.95x of it at the tiny benchmark windows, 0.9-1.4x at 2-layer Qwen2.5 shapes, 1.9x at
Qwen2.5-1.5B's 28 layers (more score buffers alive at once) and 0.46x for short float32
blocks (benchmarks/prefill_chunks.py, tests/parallel/test_memory.py). An evaluation rollout
has its own episode count (`eval.num_tasks` or `eval.slice_tasks`, times `eval.k`).
Activations of the train step are an estimate of what backprop keeps alive (per layer and
token: the residual, norms, q/k/v, attention output, the three MLP projections, plus the
`[heads, L, L]` attention scores, or a log-sum-exp a row with `model.attention_block`; with
`model.remat=block` only each block's input and one block; and the logits with their softmax
and gradient, or one log-prob chunk's), so a config that will not fit is refused with the
numbers instead of dying in the allocator after minutes of compilation. Beside them the update
holds weight-sized trees (`update_weight_bytes`: the gradients, and with block remat the
stacked layers and their gradient). Not counted: the compute-dtype copies of the weights.
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
                   dtype=None) -> int:
  """Per-device bytes of the rollout KV cache: 2 x layers x [episodes, kv_heads, length,
  head_dim] in `dtype` (default the compute dtype, as `models.init_cache`)."""
  dtype = model_cfg.compute_dtype if dtype is None else dtype
  b = local_size(episodes, mesh, rules, "batch")
  kv = local_size(model_cfg.num_kv_heads, mesh, rules, "kv_heads")
  return 2 * model_cfg.num_layers * b * kv * length * model_cfg.head_dim * np.dtype(dtype).itemsize


def _layer_terms(model_cfg: Any, mesh: Mesh, rules: Rules) -> tuple[int, int]:
  """(local heads, elements a token keeps in one layer: the residual and norms, q/k/v, the
  attention output and the three MLP projections), per device."""
  heads = local_size(model_cfg.num_heads, mesh, rules, "heads")
  kv = local_size(model_cfg.num_kv_heads, mesh, rules, "kv_heads")
  mlp = local_size(model_cfg.intermediate, mesh, rules, "mlp")
  return heads, 4 * model_cfg.hidden + (2 * heads + 2 * kv) * model_cfg.head_dim + 3 * mlp


def prefill_bytes(model_cfg: Any, episodes: int, length: int, mesh: Mesh, rules: Rules) -> int:
  """Estimated per-device temporaries of prefilling a `length`-token block into a cache of
  `length` slots (a window, the rollout's worst case), c tokens a row at a time
  (`model_cfg.prefill_chunks`): one layer's float32 scores and probabilities [b, heads, c, S] and mask [b, c, S],
  and the chunk's per-token activations (as `activation_bytes`' per layer) in the compute
  dtype."""
  b = local_size(episodes, mesh, rules, "batch")
  _, c = model_cfg.prefill_chunks(length)
  heads, per_token = _layer_terms(model_cfg, mesh, rules)
  scores = (2 * heads + 1) * b * c * length * 4
  return scores + b * c * per_token * np.dtype(model_cfg.compute_dtype).itemsize


def activation_bytes(model_cfg: Any, rows: int, length: int, mesh: Mesh, rules: Rules,
                     dtype=np.float32, logit_chunk: int = 0) -> int:
  """Estimated per-device activation bytes kept for backprop by one train step: each layer's
  per-token activations and [heads, L, L] scores (with `model_cfg.attention_block`, each
  row's log-sum-exp and one key block's scores), or with `model_cfg.remat == "block"` each
  block's input and one block recomputed at a time; and the logits, their softmax and
  gradient, of every token or, chunked (`logit_chunk` tokens: models.logprobs), of one chunk.
  """
  b = local_size(rows, mesh, rules, "batch")
  tokens = b * length
  h = model_cfg.hidden
  vocab = local_size(model_cfg.vocab_size, mesh, rules, "vocab")
  heads, per_token_layer = _layer_terms(model_cfg, mesh, rules)
  block = getattr(model_cfg, "attention_block", 0)
  if 0 < block < length:
    # Blocked core: a layer keeps each row's log-sum-exp; one block's scores and
    # probabilities are alive at a time, in one layer.
    attn, once = b * heads * length, 2 * b * heads * length * block
  else:
    attn, once = 2 * b * heads * length * length, 0  # scores and probabilities
  per_layer = tokens * per_token_layer + attn
  logits = 3 * (min(tokens, logit_chunk) if logit_chunk > 0 else tokens) * vocab
  if getattr(model_cfg, "remat", "none") == "block":
    layers = model_cfg.num_layers * tokens * h + per_layer
  else:
    layers = model_cfg.num_layers * per_layer
  return (layers + once + logits) * np.dtype(dtype).itemsize


def update_weight_bytes(params: int, remat: str = "none") -> int:
  """Weight-sized temporaries of a train step beside the activations: the gradient tree, and
  with `model.remat=block` the layers' weights stacked for the scan over blocks
  (`transformer._remat_blocks`) and their stacked gradient. `params`: per-device param bytes.
  (Qwen2.5-1.5B, block remat: XLA:CPU's gradient program is the activation estimate plus 2x
  the params to 0.2%; benchmarks/attention_blocks.py.)"""
  return params * (3 if remat == "block" else 1)


@dataclasses.dataclass(frozen=True)
class MemoryReport:
  """Per-device bytes; `prefill` and the evaluation's `eval_rollout` (its KV cache and
  prefill) are estimates, as `activations`."""
  mesh: Mapping[str, int]
  params: int
  optimizer: int
  kv_cache: int
  activations: int
  budget_gib: float = 0.0
  prefill: int = 0
  eval_rollout: int = 0
  update: int = 0

  @property
  def total(self) -> int:
    # Rollouts (KV cache and prefill), evaluation and the update do not overlap in time.
    return self.params + self.optimizer + max(self.kv_cache + self.prefill, self.eval_rollout,
                                              self.activations + self.update)

  def text(self) -> str:
    g = lambda n: f"{n / GIB:.3f} GiB"
    mesh = " x ".join(f"{k}={v}" for k, v in self.mesh.items())
    lines = [f"mesh: {mesh} ({math.prod(self.mesh.values())} devices)",
             "per-device memory (estimated before compiling):",
             f"  params            {g(self.params)}",
             f"  optimizer state   {g(self.optimizer)}",
             f"  rollout KV cache  {g(self.kv_cache)}",
             f"  rollout prefill   {g(self.prefill)} (estimate; model.prefill_chunk)",
             f"  eval rollout      {g(self.eval_rollout)} (estimate; KV cache + prefill)",
             f"  train activations {g(self.activations)} (estimate)",
             f"  update weights    {g(self.update)} (gradients; block remat: stacked layers "
             "and their gradients)",
             f"  peak              {g(self.total)} = params + optimizer + max(KV cache + "
             "prefill, eval rollout, activations + update weights)"]
    if self.budget_gib:
      lines.append(f"  budget            {self.budget_gib:.3f} GiB (config.mesh.memory_budget_gib)")
    return "\n".join(lines)

  def check(self) -> None:
    """Raises MemoryBudgetError with the numbers when the peak exceeds the budget."""
    if self.budget_gib and self.total > self.budget_gib * GIB:
      raise MemoryBudgetError(
          f"config.mesh.memory_budget_gib: the estimated peak of {self.total / GIB:.3f} GiB per "
          f"device exceeds the budget of {self.budget_gib:.3f} GiB\n{self.text()}\n"
          "Shard more (mesh.fsdp / mesh.tensor), or reduce rollout.num_tasks * group_size, "
          "eval.num_tasks * eval.k (or eval.slice_tasks), model.prefill_chunk, "
          "train.minibatch_episodes (or more train.microbatches; model.remat=block, "
          "model.attention_block for long rows).")


def report(*, mesh: Mesh, rules: Rules, params: Any, params_shardings: Any, optimizer: Any,
           opt_shardings: Any, model_cfg: Any, episodes: int, cache_len: int, rows: int,
           length: int, budget_gib: float = 0.0, eval_episodes: int = 0, logit_chunk: int = 0,
           dtype=np.float32) -> MemoryReport:
  """Builds the report from abstract params / optimizer state and their shardings.
  `dtype`: of the activation estimate; eval_episodes: the evaluation rollout's (0: none);
  logit_chunk: the train step's log-prob chunk in tokens (0: materialized logits)."""
  rollout = lambda n: (kv_cache_bytes(model_cfg, n, cache_len, mesh, rules),
                       prefill_bytes(model_cfg, n, cache_len, mesh, rules))
  kv, pre = rollout(episodes)
  params_bytes = tree_bytes_per_device(params, params_shardings)
  return MemoryReport(
      mesh=dict(mesh.shape), params=params_bytes,
      update=update_weight_bytes(params_bytes, getattr(model_cfg, "remat", "none")),
      optimizer=tree_bytes_per_device(optimizer, opt_shardings), kv_cache=kv, prefill=pre,
      eval_rollout=sum(rollout(eval_episodes)) if eval_episodes else 0,
      activations=activation_bytes(model_cfg, rows, length, mesh, rules, dtype, logit_chunk),
      budget_gib=float(budget_gib))


__all__ = ["MemoryReport", "MemoryBudgetError", "report", "kv_cache_bytes", "activation_bytes",
           "prefill_bytes", "update_weight_bytes", "tree_bytes_per_device", "shard_bytes"]
