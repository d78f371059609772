"""Parameters born sharded: `eval_shape` -> shardings from logical names -> `jit(init, out_shardings)`.

The big_vision / MaxText recipe: the model is first built abstractly (shapes only), each
variable's logical axis names (NNX `out_sharding` / `sharding_names` metadata) are mapped
to mesh axes by the rules, and the real initializer runs inside `jit` with those output
shardings, so no device ever holds a full unsharded copy of a parameter.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agent_rl.parallel.rules import Rules, _as_tuple, _check_axes, logical_to_spec, mesh_rules


def _path_str(path: tuple) -> str:
  return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def variable_names(v: nnx.Variable) -> tuple[str | None, ...] | None:
  """The logical axis names of an NNX variable, or None when it has none."""
  names = v.get_metadata().get("out_sharding")
  return None if names is None else tuple(names)


def variable_spec(path: str, v: nnx.Variable, mesh: Mesh, rules: Rules, *,
                  require_names: bool = True) -> PartitionSpec:
  """PartitionSpec of one variable, validated against its shape and the mesh."""
  shape = tuple(getattr(v.get_value(), "shape", ()))
  names = variable_names(v)
  if names is None:
    if require_names and isinstance(v, nnx.Param) and len(shape) >= 1:
      raise ValueError(f"parameter {path} of shape {shape} has no logical axis names; create it "
                       "with sharding_names=(...) or pass require_names=False to replicate it")
    return PartitionSpec()
  if len(names) != len(shape):
    raise ValueError(f"parameter {path}: logical names {names} do not match its shape {shape}")
  spec = logical_to_spec(names, rules)
  _check_axes(spec, mesh.axis_names, f"parameter {path}")
  for dim, (size, entry) in enumerate(zip(shape, spec)):
    axes = _as_tuple(entry)
    parts = math.prod(mesh.shape[a] for a in axes)
    if size % parts:
      raise ValueError(
          f"parameter {path} of shape {shape}: dimension {dim} ({names[dim]!r}, size {size}) is "
          f"not divisible by mesh axes {axes} of size {parts}")
  return spec


def state_shardings(state: Any, mesh: Mesh, rules: Rules, *, require_names: bool = True) -> Any:
  """A tree like `state` (an nnx.State, abstract or concrete) with NamedShardings as values."""

  def one(path, v):
    if not isinstance(v, nnx.Variable):
      return NamedSharding(mesh, PartitionSpec())
    spec = variable_spec(_path_str(path), v, mesh, rules, require_names=require_names)
    return v.replace(NamedSharding(mesh, spec))

  return jax.tree_util.tree_map_with_path(one, state,
                                          is_leaf=lambda x: isinstance(x, nnx.Variable))


def init_sharded(make_model: Callable[[], nnx.Module], mesh: Mesh, rules: Rules, *,
                 require_names: bool = True) -> tuple[nnx.GraphDef, nnx.State]:
  """Builds `make_model()` directly into sharded arrays; returns `(graphdef, state)`.

  `make_model` must be deterministic (e.g. seeded `nnx.Rngs(0)` inside it): it runs once
  abstractly (for shapes and names) and once inside `jit`. Raises ValueError naming the
  parameter path, shape and mesh axes when a dimension does not divide its mesh axes, or
  when a parameter has no logical names (unless `require_names=False`).
  """
  # Shapes first, outside the mesh context: flax's eval_shape would otherwise map the names
  # with its own (lenient) rule lookup before ours can name a bad one.
  abstract = nnx.eval_shape(make_model)
  graphdef, abs_state = nnx.split(abstract)
  shardings = state_shardings(abs_state, mesh, rules, require_names=require_names)

  def init():
    return nnx.split(make_model())[1]

  # Under the context so model code that calls `constrain` during init sees mesh and rules.
  with mesh_rules(mesh, rules):
    state = jax.jit(init, out_shardings=shardings)()
  return graphdef, state


def optimizer_shardings(opt_abstract: Any, params_shardings: Any, mesh: Mesh) -> Any:
  """Shardings for an optax state: a leaf whose tree path ends with a parameter's path (the
  mu/nu trees mirror the params) takes that parameter's sharding; others are replicated."""
  table = {tuple(str(k) for k in p): s for p, s in
           jax.tree_util.tree_flatten_with_path(params_shardings)[0]}
  rep = NamedSharding(mesh, PartitionSpec())

  def one(path, _):
    keys = tuple(str(k) for k in path)
    for i in range(len(keys)):
      if keys[i:] in table:
        return table[keys[i:]]
    return rep

  return jax.tree_util.tree_map_with_path(one, opt_abstract)
