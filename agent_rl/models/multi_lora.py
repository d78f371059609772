"""Multi-LoRA: K adapters over one frozen base, each batch row picking its own, in one forward
(gather-based batched LoRA, as S-LoRA, Sheng et al. 2023, arXiv:2311.03285, and Punica's
BGMV, Chen et al. 2023, arXiv:2310.18547: y_b = x_b W + scale * (x_b A[i_b]) B[i_b]).

Adapters are the `LoRAParam` state of a LoRA `Transformer` (`nnx.split(model, LoRAParam, ...)`)
stacked on a leading axis K. `forward` gathers each row's adapter (`A[idx]`: [B, in, r], tiny
next to the base) and vmaps the single-adapter model over rows: the base GEMMs stay one
[B*L, E] x [E, F] product (vmap of an unbatched weight folds the row axis into M), and only the
rank-r products become batched per row, which is the BGMV kernel. Several agents or roles
(e.g. by `agent_id`) thereby share one base model and one forward; the gradient of the gather
is a scatter-add, so adapters no row selected get exactly zero gradient.
"""
from __future__ import annotations

from typing import Any, Sequence, Tuple

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models.lora import LoRAParam


def split(model: nnx.Module) -> Tuple[Any, nnx.State, nnx.State]:
  """A LoRA `Transformer` -> (graphdef, adapters: its LoRAParam state, base: everything else)."""
  graphdef, adapters, base = nnx.split(model, LoRAParam, ...)
  if not jax.tree.leaves(adapters):
    raise ValueError("multi_lora.split: the model has no LoRA adapters (ModelConfig.lora is None)")
  return graphdef, adapters, base


def stack(adapters: Sequence[nnx.State]) -> nnx.State:
  """K adapter states (same structure) -> one state whose leaves are [K, *leaf shape]."""
  if not adapters:
    raise ValueError("multi_lora.stack: no adapters given")
  return jax.tree.map(lambda *xs: jnp.stack(xs), *adapters)


def num_adapters(stacked: nnx.State) -> int:
  return int(jax.tree.leaves(stacked)[0].shape[0])


def select(stacked: nnx.State, k: int) -> nnx.State:
  """Adapter k of a stacked state (the single-adapter state it was built from)."""
  return jax.tree.map(lambda a: a[k], stacked)


def forward(graphdef, base: nnx.State, stacked: nnx.State, adapter_ids: jax.Array,
            tokens: jax.Array, positions: jax.Array, valid: jax.Array) -> jax.Array:
  """Logits [B, L, V] f32 of every row under its own adapter, in one forward.

  graphdef, base: from `split` of a LoRA Transformer; stacked: `stack`ed adapters [K, ...];
  adapter_ids: [B] int32 in [0, K) (e.g. agent_id); tokens, positions: [B, L] int32; valid:
  [B, L] bool. Equals running the single-adapter model with adapter adapter_ids[b] on row b.
  """
  if adapter_ids.ndim != 1 or adapter_ids.shape[0] != tokens.shape[0]:
    raise ValueError(f"multi_lora.forward: adapter_ids must be [B={tokens.shape[0]}], "
                     f"got {adapter_ids.shape}")
  per_row = jax.tree.map(lambda a: a[adapter_ids], stacked)  # the gather: [B, *adapter]

  def row(ad, tok, pos, val):
    model = nnx.merge(graphdef, base, ad)
    return model(tok[None], pos[None], val[None])[0]

  return jax.vmap(row)(per_row, tokens, positions, valid)
