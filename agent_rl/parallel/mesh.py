"""The device mesh: one `(data, fsdp, tensor)` mesh built from a config shape.

Data parallelism, fully-sharded data parallelism (ZeRO-3 style parameter sharding; Rajbhandari
et al., 2020, arXiv:1910.02054) and Megatron tensor parallelism (Shoeybi et al., 2019,
arXiv:1909.08053) are three named axes of one GSPMD mesh (Xu et al., 2021, arXiv:2105.04663);
MaxText's `ici_*_parallelism = -1` convention lets one axis take the remaining devices.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

AXES: tuple[str, ...] = ("data", "fsdp", "tensor")


def resolve_shape(shape: Sequence[int], axis_names: Sequence[str], num_devices: int) -> tuple[int, ...]:
  """Fills the one -1 entry of `shape` so the product is `num_devices`; validates the rest."""
  if len(shape) != len(axis_names):
    raise ValueError(f"mesh shape {tuple(shape)} has {len(shape)} entries but axis_names "
                     f"{tuple(axis_names)} has {len(axis_names)}")
  if len(set(axis_names)) != len(axis_names):
    raise ValueError(f"mesh axis_names {tuple(axis_names)} repeat a name")
  fill = [a for a, n in zip(axis_names, shape) if n == -1]
  if len(fill) > 1:
    raise ValueError(f"mesh axes {fill} are all -1; at most one axis may fill the remaining devices")
  for a, n in zip(axis_names, shape):
    if n != -1 and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
      raise ValueError(f"mesh axis {a!r} must be a positive int or -1, got {n!r}")
  fixed = math.prod(n for n in shape if n != -1)
  if fill:
    if num_devices % fixed:
      raise ValueError(
          f"mesh axis {fill[0]!r} = -1 cannot fill {num_devices} devices: the other axes "
          f"{dict((a, n) for a, n in zip(axis_names, shape) if n != -1)} multiply to {fixed}, "
          f"which does not divide {num_devices}")
    return tuple(num_devices // fixed if n == -1 else n for n in shape)
  if fixed != num_devices:
    raise ValueError(f"mesh shape {dict(zip(axis_names, shape))} needs {fixed} devices but "
                     f"{num_devices} are given; set one axis to -1 to fill them")
  return tuple(shape)


def make_mesh(shape: Sequence[int] | Mapping[str, int],
              axis_names: Sequence[str] = AXES,
              devices: Sequence[jax.Device] | None = None,
              dcn_shape: Sequence[int] | Mapping[str, int] | None = None) -> Mesh:
  """A mesh over `devices` (default: all) with `shape`; one entry may be -1 (fills the rest).

  `shape` is a sequence aligned with `axis_names`, or a mapping {axis name: size} (then its
  keys are the axis names, in order), e.g. `make_mesh({"data": -1, "fsdp": 4, "tensor": 2})`.
  Axes are `AxisType.Auto`: GSPMD propagates shardings between the constraints we set.

  Multi-slice (MaxText's `dcn_*_parallelism`): `dcn_shape` (same axes, product = number of
  slices) splits each axis into an outer part over the slow data-centre network and an
  inner part (`shape`, per slice, -1 fills the slice) over ICI, so e.g. `data` spans slices
  while `fsdp`/`tensor` stay inside one. Slices are the devices' `slice_index` (TPU), else
  processes (GPU/CPU hosts).
  """
  if isinstance(shape, Mapping):
    axis_names, shape = tuple(shape.keys()), tuple(shape.values())
  if isinstance(dcn_shape, Mapping):
    dcn_shape = tuple(dcn_shape.get(a, 1) for a in axis_names)
  devices = list(jax.devices() if devices is None else devices)
  if not devices:
    raise ValueError("make_mesh got an empty device list")
  types = (AxisType.Auto,) * len(tuple(shape))
  dcn = tuple(dcn_shape or (1,) * len(tuple(shape)))
  n_slices = math.prod(dcn)
  if n_slices == 1:
    sizes = resolve_shape(tuple(shape), tuple(axis_names), len(devices))
    return jax.make_mesh(sizes, tuple(axis_names), axis_types=types, devices=devices)
  resolve_shape(dcn, tuple(f"dcn_{a}" for a in axis_names), n_slices)
  if len(devices) % n_slices:
    raise ValueError(f"mesh dcn shape {dict(zip(axis_names, dcn))} has {n_slices} slices, "
                     f"which does not divide {len(devices)} devices")
  ici = resolve_shape(tuple(shape), tuple(axis_names), len(devices) // n_slices)
  # Slices are TPU slices when the devices report as many distinct slice indices, else hosts.
  slice_ids = {getattr(d, "slice_index", None) for d in devices}
  granule = None in slice_ids or len(slice_ids) != n_slices
  grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices, process_is_granule=granule)
  return Mesh(np.asarray(grid), tuple(axis_names), axis_types=types)
