"""Where a run's arrays live: the mesh of `config.mesh`, and the placement of batches on it.

One `(data, fsdp, tensor)` mesh serves the rollout and the learner: the sampler reads the
same sharded params the update writes (no weight copy). Episodes and training rows are
split over `data` and `fsdp` (the `batch` logical axis), params over `fsdp` and `tensor` by
the logical-axis rules (agent_rl.parallel.rules). With several processes every host runs
this same code; task streams are drawn from the global seed inside jitted code and sharded
by rows, so each process materializes exactly the rows of its own devices.

`axis_parts` is the one piece of batch-split arithmetic: how many shards a logical axis has
on a mesh (the memory report and `Placement.batch_parts` both use it).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agent_rl.parallel.mesh import AXES, make_mesh
from agent_rl.parallel.rules import DEFAULT_RULES, logical_to_spec, mesh_rules


def spec_parts(mesh: Mesh, entry) -> int:
  """Shards of one PartitionSpec entry (None, an axis name, or a tuple of names) on `mesh`."""
  if entry is None:
    return 1
  axes = (entry,) if isinstance(entry, str) else tuple(entry)
  return math.prod(mesh.shape[a] for a in axes)


def axis_parts(mesh: Mesh, rules, name: str) -> int:
  """Shards of the logical axis `name` (e.g. "batch" -> data x fsdp) under `rules`."""
  return spec_parts(mesh, logical_to_spec((name,), rules)[0])


def local_size(n: int, mesh: Mesh, rules, name: str) -> int:
  """Per-device size of a dimension of size n with logical `name` (ceil if it does not divide)."""
  p = axis_parts(mesh, rules, name)
  return -(-n // p)


@dataclasses.dataclass(frozen=True)
class Placement:
  """The mesh and rules of a run, and how batches are laid out on it."""
  mesh: Mesh
  rules: tuple = DEFAULT_RULES

  @property
  def batch_spec(self) -> PartitionSpec:
    return logical_to_spec(("batch",), self.rules)

  @property
  def batch_parts(self) -> int:
    """Number of shards of the batch axis (data x fsdp with the default rules)."""
    return axis_parts(self.mesh, self.rules, "batch")

  @property
  def batch_sharding(self) -> NamedSharding:
    return NamedSharding(self.mesh, self.batch_spec)

  @property
  def replicated(self) -> NamedSharding:
    return NamedSharding(self.mesh, PartitionSpec())

  def context(self):
    return mesh_rules(self.mesh, self.rules)

  def batch(self, tree: Any) -> Any:
    """Puts every leaf with a leading axis divisible by `batch_parts` row-sharded, the rest
    replicated. Host-local arrays of a multi-process run must hold the same (global) values
    on every process; each process keeps its devices' rows."""

    def put(x):
      x = _global_input(x, self.batch_sharding)
      ok = getattr(x, "ndim", 0) >= 1 and x.shape[0] % self.batch_parts == 0
      return jax.device_put(x, self.batch_sharding if ok else self.replicated)

    return jax.tree.map(put, tree)


def _global_input(x, sharding):
  """A process-local jax.Array cannot be resharded onto other processes' devices; its value
  (identical on every process) goes through host memory instead."""
  if (isinstance(x, jax.Array) and jax.process_count() > 1 and x.is_fully_addressable
      and not sharding.is_fully_addressable):
    return np.asarray(x)
  return x


def make_placement(mesh_cfg) -> Placement:
  """The mesh of `config.mesh` over the first `num_devices` devices (0 = all of them)."""
  m = mesh_cfg
  devices = jax.devices()
  if m.num_devices:
    if jax.process_count() > 1:
      raise ValueError("config.mesh.num_devices: must be 0 (all devices) in a multi-process run")
    if m.num_devices > len(devices):
      raise ValueError(f"config.mesh.num_devices: {m.num_devices} requested, "
                       f"{len(devices)} available")
    devices = devices[:m.num_devices]
  dcn = tuple(int(m.dcn[a]) for a in AXES)
  mesh = make_mesh(tuple(int(m[a]) for a in AXES), AXES, devices=devices, dcn_shape=dcn)
  return Placement(mesh)
