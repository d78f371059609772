"""Tests for make_mesh: -1 fill, validation errors naming the axis, device subsets."""
import jax
import numpy as np
import pytest

from agent_rl.parallel import AXES, make_mesh, resolve_shape


def test_eight_fake_devices():
  assert len(jax.devices()) == 8  # tests/conftest.py


@pytest.mark.parametrize("shape,expected", [
    ((1, -1, 2), (1, 4, 2)),
    ((-1, 1, 1), (8, 1, 1)),
    ((2, 2, -1), (2, 2, 2)),
    ((2, 4, 1), (2, 4, 1)),
])
def test_fill_and_axes(shape, expected):
  mesh = make_mesh(shape)
  assert mesh.axis_names == AXES
  assert tuple(mesh.shape[a] for a in AXES) == expected
  ids = sorted(d.id for d in np.asarray(mesh.devices).ravel())
  assert ids == sorted(d.id for d in jax.devices())
  assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)


def test_mapping_shape_and_subset_of_devices():
  mesh = make_mesh({"data": -1, "tensor": 2})
  assert mesh.axis_names == ("data", "tensor") and dict(mesh.shape) == {"data": 4, "tensor": 2}
  one = make_mesh((1, 1, -1), devices=jax.devices()[:1])
  assert one.size == 1 and dict(one.shape) == {"data": 1, "fsdp": 1, "tensor": 1}


@pytest.mark.parametrize("shape,match", [
    ((3, -1, 1), "'fsdp' = -1 cannot fill 8 devices"),
    ((2, 2, 1), r"needs 4 devices but 8"),
    ((-1, -1, 2), "at most one axis"),
    ((1, 0, -1), "mesh axis 'fsdp' must be a positive int"),
    ((1, 2.0, -1), "mesh axis 'fsdp' must be a positive int"),
    ((2, -1), "has 2 entries"),
])
def test_errors_name_the_axis(shape, match):
  with pytest.raises(ValueError, match=match):
    make_mesh(shape)


def test_resolve_shape_brute_force():
  # Reference: enumerate every (a, b, c) with a*b*c == n and check -1 in each slot recovers it.
  for n in (1, 2, 6, 8, 12):
    for a in range(1, n + 1):
      for b in range(1, n + 1):
        if n % (a * b):
          continue
        c = n // (a * b)
        assert resolve_shape((a, b, -1), AXES, n) == (a, b, c)
        assert resolve_shape((-1, b, c), AXES, n) == (a, b, c)
        assert resolve_shape((a, b, c), AXES, n) == (a, b, c)
