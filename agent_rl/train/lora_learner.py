"""A LoRA learner: only the adapters (and a critic head, which LoRA does not cover) train.

With `config.model.lora.rank > 0` the policy LM carries `LoRAParam` adapters beside frozen
base weights (`agent_rl.models.lora`). Two things make the base frozen and cheap:
- `stop_base_gradient(params)` wraps the loss's params, so the backward never computes base
  weight gradients (they are constant zeros XLA folds away; `grad/norm` is the adapters').
- `freeze_base(optimizer)` routes the frozen leaves to `optax.set_to_zero()` (no state) with
  `optax.multi_transform`: the optimizer state holds moments for the trainable leaves only, so
  Adam costs 2 x adapter size instead of 2 x model size, and the base stays bit-identical
  (p + 0 = p in every dtype), which is also why it may be stored in bf16.
The TrainState keeps the whole params tree (base + adapters), so checkpoints and resume are the
ordinary ones and a restored policy is the adapter-carrying model (merge it for export).
LoRA dropout (`lora.dropout > 0`) needs nothing here: the losses pass their step key to the
forward (`train.policy.make_apply(...)(..., dropout_key=key)`), whose masks therefore follow
`TrainState.rng` and `step` and resume exactly; rollouts and scoring never pass one.
"""
from __future__ import annotations

from typing import Any

import jax
import optax

from agent_rl.agents.params import path_names

TRAIN, FROZEN = "train", "frozen"


def is_trainable(path) -> bool:
  """A params leaf trains under LoRA when it is an adapter (`*_lora_a` / `*_lora_b`) or lies
  outside the policy LM (`lm`), e.g. a value head; every other LM weight is frozen."""
  names = path_names(path)
  if not names or names[0] != "lm":
    return True
  return any(n.endswith(("_lora_a", "_lora_b")) for n in names)


def labels(params: Any) -> Any:
  """The params tree with each leaf replaced by TRAIN or FROZEN (optax.multi_transform labels)."""
  return jax.tree_util.tree_map_with_path(lambda p, _: TRAIN if is_trainable(p) else FROZEN,
                                          params)


def freeze_base(optimizer: optax.GradientTransformation) -> optax.GradientTransformation:
  """`optimizer` on the trainable leaves, zero updates and no state for the frozen base."""
  return optax.multi_transform({TRAIN: optimizer, FROZEN: optax.set_to_zero()}, labels)


def stop_base_gradient(params: Any) -> Any:
  """params with `lax.stop_gradient` on the frozen leaves (apply inside the loss)."""
  return jax.tree_util.tree_map_with_path(
      lambda p, x: x if is_trainable(p) else jax.lax.stop_gradient(x), params)


def frozen_loss(loss_fn):
  """`loss_fn(params, mb, key, **kw)` that differentiates only the trainable leaves."""
  return lambda params, mb, key, **kw: loss_fn(stop_base_gradient(params), mb, key, **kw)


def state_bytes(tree: Any) -> int:
  """Bytes of the arrays (or ShapeDtypeStructs) in a pytree (e.g. an optimizer state)."""
  return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(tree) if hasattr(x, "dtype"))
