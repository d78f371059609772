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
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A mesh over `devices` (default: all) with `shape`; one entry may be -1 (fills the rest).

  `shape` is a sequence aligned with `axis_names`, or a mapping {axis name: size} (then its
  keys are the axis names, in order), e.g. `make_mesh({"data": -1, "fsdp": 4, "tensor": 2})`.
  Axes are `AxisType.Auto`: GSPMD propagates shardings between the constraints we set.
  """
  if isinstance(shape, Mapping):
    axis_names, shape = tuple(shape.keys()), tuple(shape.values())
  devices = list(jax.devices() if devices is None else devices)
  if not devices:
    raise ValueError("make_mesh got an empty device list")
  sizes = resolve_shape(tuple(shape), tuple(axis_names), len(devices))
  return jax.make_mesh(sizes, tuple(axis_names), axis_types=(AxisType.Auto,) * len(sizes),
                       devices=devices)
