"""Logical-axis rules: model code names dimensions, a rules table maps names to mesh axes.

The MaxText / flax `LogicalRules` convention (a sequence of `(logical_name, mesh_axes)` pairs,
mesh_axes = None | "axis" | ("axis", ...)), resolved as in MaxText: for each dimension, the
first rule of that name whose mesh axes are not already used by an earlier dimension of the
same array wins; if none is free the dimension is replicated. So activations
`[batch, length, embed]` become `P(("data", "fsdp"), None, None)` while the parameter
`[vocab, embed]` becomes `P("tensor", "fsdp")` under the same table.

The active rules live in flax's thread-local context (`nnx.logical_axis_rules`), so code
written against flax's helpers and ours sees one table; the active mesh is `jax.set_mesh`.
`mesh_rules(mesh, rules)` enters both.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, Sequence, Tuple, Union

import jax
from flax.core import spmd as flax_spmd
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MeshAxes = Union[None, str, Tuple[str, ...]]
Rules = Sequence[Tuple[str, MeshAxes]]

# Params: FSDP shards the model dim, tensor parallelism the heads/MLP/vocab dims (Megatron).
# Activations: batch over every data-like axis; sequence and head_dim unsharded.
DEFAULT_RULES: tuple[tuple[str, MeshAxes], ...] = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("length", None),
    ("head_dim", None),
    ("layers", None),
)


def current_rules() -> Rules:
  """The rules of the innermost `mesh_rules` / `nnx.logical_axis_rules`, else DEFAULT_RULES."""
  return flax_spmd.get_logical_axis_rules() or DEFAULT_RULES


def _as_tuple(axes: MeshAxes) -> tuple[str, ...]:
  if axes is None:
    return ()
  if isinstance(axes, str):
    return (axes,)
  if isinstance(axes, (tuple, list)) and all(isinstance(a, str) for a in axes):
    return tuple(axes)
  raise ValueError(f"mesh axes must be None, a str or a tuple of str, got {axes!r}")


def logical_to_spec(names: Sequence[str | None], rules: Rules | None = None) -> PartitionSpec:
  """PartitionSpec for an array whose dimensions have logical `names` (None = replicated).

  Raises KeyError naming a logical name that no rule mentions (a typo must not silently
  replicate a weight).
  """
  rules = current_rules() if rules is None else rules
  table: dict[str, list[tuple[str, ...]]] = {}
  for entry in rules:
    if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str)):
      raise ValueError(f"a logical-axis rule must be a (name, mesh_axes) pair, got {entry!r}")
    table.setdefault(entry[0], []).append(_as_tuple(entry[1]))
  used: set[str] = set()
  out = []
  for name in names:
    if name is None:
      out.append(None)
      continue
    if name not in table:
      raise KeyError(f"logical axis {name!r} has no rule; rules cover {sorted(table)}")
    chosen: tuple[str, ...] = ()
    for cand in table[name]:
      if not used.intersection(cand):
        chosen = cand
        break
    used.update(chosen)
    out.append(None if not chosen else chosen[0] if len(chosen) == 1 else chosen)
  return PartitionSpec(*out)


def _check_axes(spec: PartitionSpec, mesh_axis_names: Sequence[str], what: str) -> None:
  for entry in spec:
    for a in _as_tuple(entry):
      if a not in mesh_axis_names:
        raise ValueError(f"{what}: mesh axis {a!r} is not in the mesh axes {tuple(mesh_axis_names)}")


def logical_sharding(names: Sequence[str | None], mesh: Mesh, rules: Rules | None = None
                     ) -> NamedSharding:
  """NamedSharding on `mesh` for an array with logical dimension `names`."""
  spec = logical_to_spec(names, rules)
  _check_axes(spec, mesh.axis_names, f"logical axes {tuple(names)}")
  return NamedSharding(mesh, spec)


@contextlib.contextmanager
def mesh_rules(mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Iterator[None]:
  """Activates `mesh` (jax.set_mesh) and `rules` (flax's logical-axis context) together."""
  with jax.set_mesh(mesh), flax_spmd.logical_axis_rules(tuple(rules)):
    yield


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
  """`with_sharding_constraint(x, spec(names))` under the active mesh and rules.

  x: [...] with one logical name per dimension. Outside any mesh context there is nothing
  to shard and `x` is returned as is; under a mesh (`mesh_rules` / `jax.set_mesh`) the
  constraint is always applied, on CPU fake devices as on TPU. A dimension that does not
  divide its mesh axes (e.g. an eval batch smaller than data x fsdp) is left replicated.
  """
  if len(names) != x.ndim:
    raise ValueError(f"constrain got {len(names)} logical names {tuple(names)} for an array "
                     f"of shape {x.shape}")
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  spec = logical_to_spec(names)
  _check_axes(spec, mesh.axis_names, f"constrain{tuple(names)}")
  parts = [1 if e is None else
           math.prod(mesh.shape[a] for a in _as_tuple(e)) for e in spec]
  spec = PartitionSpec(*(e if size % n == 0 else None
                         for e, size, n in zip(spec, x.shape, parts)))
  return jax.lax.with_sharding_constraint(x, spec)
