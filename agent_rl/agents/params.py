"""Several agents' parameters over one network: the three modes of issue 21, as one layout.

  shared    one network; the agents differ only by their role prompts (the env renders a
            role's instructions into its observation). Nothing is stacked.
  lora      one frozen base with K LoRA adapters (`models.lora`): every adapter leaf is stacked
            on a leading agent axis `[K, *leaf]`; a batch row acting as agent k reads adapter k
            (the gather of `route`, S-LoRA / Punica's BGMV: Sheng et al. 2023,
            arXiv:2311.03285), so all agents' rows run in one batched forward whose base GEMMs
            are shared.
  separate  K full copies (policy LM and critic) stacked on a leading agent axis and vmapped
            over it; each row selects its agent's outputs. Every agent reads every row: K x the
            forward FLOPs of one model (what K models cost when each reads its rows, at static
            shapes), K x the parameters and optimizer state.

A stacked leaf keeps its logical axis names with `None` prepended (the agent axis is
replicated), so the mesh rules shard the rest as before and checkpoints are ordinary orbax
trees. Agent k of a stacked state is initialized from its own seed (`seed + k * 1009`), so
agents do not start identical (the adapters' A; B is zero, as LoRA's init).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

MODES = ("shared", "lora", "separate")
SEED_STRIDE = 1009  # agent k's init seed is seed + k * SEED_STRIDE


def path_names(path) -> list[str]:
  """The key names of a pytree path (nnx.State / dict keys, attributes, indices) as strings."""
  return [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]


def is_adapter(path) -> bool:
  """A leaf of the policy LM's LoRA adapters (`lm/.../*_lora_a|b`)."""
  names = path_names(path)
  return bool(names) and names[0] == "lm" and any(n.endswith(("_lora_a", "_lora_b"))
                                                  for n in names)


def is_stacked(mode: str) -> Callable[[Any], bool]:
  """`path -> bool`: the leaves of an ActorCritic state that carry the agent axis."""
  if mode == "lora":
    return is_adapter
  if mode == "separate":
    return lambda path: True
  return lambda path: False


def stack_states(mode: str, states: Sequence[nnx.State]) -> nnx.State:
  """K states of the same module (one per agent) -> one state: the mode's leaves stacked
  `[K, *leaf]` (names `(None, *names)`), every other leaf agent 0's."""
  pick = is_stacked(mode)

  def one(path, *vs):
    v0 = vs[0]
    if not isinstance(v0, nnx.Variable) or not pick(path):
      return v0
    names = v0.get_metadata().get("out_sharding")
    meta = {} if names is None else {"out_sharding": (None, *names)}
    return v0.replace(jnp.stack([v.get_value() for v in vs]), **meta)

  return jax.tree_util.tree_map_with_path(one, *states,
                                          is_leaf=lambda x: isinstance(x, nnx.Variable))


def stacked_factory(make: Callable[[int], nnx.Module], mode: str, num: int,
                    seed: int) -> Callable[[], nnx.Module]:
  """`() -> module` whose state is `stack_states` of `make(seed + k * SEED_STRIDE)` over the
  K agents (`make(seed)` itself for the shared mode or one agent). Deterministic, so it serves
  `nnx.eval_shape` and the sharded init alike; the unused base copies of the lora mode are dead
  code in the jitted init."""
  if mode == "shared" or num <= 1:
    return lambda: make(seed)

  def build():
    models = [make(seed + k * SEED_STRIDE) for k in range(num)]
    graphdef, _ = nnx.split(models[0])
    return nnx.merge(graphdef, stack_states(mode, [nnx.split(m)[1] for m in models]))

  return build


def gather_rows(mode: str, lm_params: Any, agent: jax.Array) -> Any:
  """The lora mode's per-row policy params: each stacked adapter leaf `[K, *leaf]` becomes
  `[B, *leaf]`, row b holding adapter `agent[b]` (`models.lora.delta` applies a per-row
  adapter when it sees the extra axis); the base stays unbatched. `lm_params` is the `lm`
  subtree, so paths are prefixed to match `is_adapter`."""
  assert mode == "lora", mode
  return jax.tree_util.tree_map_with_path(
      lambda p, a: a[agent] if is_adapter((jax.tree_util.DictKey("lm"), *p)) else a, lm_params)


def select_rows(stacked: jax.Array, agent: jax.Array) -> jax.Array:
  """`[K, B, ...]` outputs of every agent -> `[B, ...]`, row b from agent `agent[b]`."""
  return stacked[agent, jnp.arange(agent.shape[0])]


def agent_slice(mode: str, tree: Any, k: int) -> Any:
  """Agent k's part of a params-shaped tree (params, gradients): its slice of the stacked
  leaves (the other leaves are shared and omitted)."""
  pick = is_stacked(mode)
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  return [x[k] for p, x in leaves if pick(p)]


def per_agent_norms(mode: str, grads: Any, num: int) -> dict:
  """`{"grad/norm/agent{k}": global norm of agent k's gradient slice}` (Dr. MAS's per-agent
  gradient-norm diagnostic) for the stacked modes; {} for shared (one set of weights)."""
  if mode == "shared":
    return {}
  import optax
  return {f"grad/norm/agent{k}": optax.global_norm(agent_slice(mode, grads, k))
          for k in range(num)}


def select_agent(mode: str, params: Any, k: int, *, lm_only: bool = False) -> Any:
  """Agent k's params as a single-agent state (export, one role's policy): its slice of
  every stacked leaf. lm_only: `params` is the policy LM's subtree (`params["lm"]`)."""
  pick = is_stacked(mode)
  if mode == "shared":
    return params
  pre = (jax.tree_util.DictKey("lm"),) if lm_only else ()
  return jax.tree_util.tree_map_with_path(lambda p, x: x[k] if pick(pre + p) else x, params)


def num_agents_in(mode: str, params: Any) -> int:
  """K of a stacked state (1 for shared params)."""
  pick = is_stacked(mode)
  for p, x in jax.tree_util.tree_leaves_with_path(params):
    if pick(p):
      return int(x.shape[0])
  return 1
