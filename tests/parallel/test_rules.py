"""Tests for logical-axis rules and constrain: specs written out by hand from the MaxText rule
("first rule whose mesh axes are still free, else replicated"), and real sharding on the
8-device fake CPU mesh (shard shapes checked, not just the spec)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jax.sharding import NamedSharding

from agent_rl.parallel import (DEFAULT_RULES, constrain, logical_sharding, logical_to_spec,
                               make_mesh, mesh_rules)


@pytest.mark.parametrize("names,expected", [
    # parameters
    (("vocab", "embed"), P("tensor", "fsdp")),
    (("embed", "heads", "head_dim"), P("fsdp", "tensor", None)),
    (("embed", "kv_heads", "head_dim"), P("fsdp", "tensor", None)),
    (("heads", "head_dim", "embed"), P("tensor", None, "fsdp")),
    (("embed", "mlp"), P("fsdp", "tensor")),
    (("mlp", "embed"), P("tensor", "fsdp")),
    (("embed",), P("fsdp")),
    (("embed", "vocab"), P("fsdp", "tensor")),
    # activations: batch takes data+fsdp, so a later 'embed' finds fsdp used -> replicated
    (("batch", "length", "embed"), P(("data", "fsdp"), None, None)),
    (("batch", "length", "heads", "head_dim"), P(("data", "fsdp"), None, "tensor", None)),
    (("batch", "length", "vocab"), P(("data", "fsdp"), None, "tensor")),
    (("batch", None), P(("data", "fsdp"), None)),
    ((), P()),
])
def test_default_rules(names, expected):
  assert logical_to_spec(names, DEFAULT_RULES) == expected
  assert logical_to_spec(names) == expected  # no context: the defaults


def test_fallback_candidates_and_context_rules():
  rules = (("batch", "data"), ("embed", "data"), ("embed", "tensor"), ("length", None))
  # second 'embed' candidate is used when 'data' is taken by batch
  assert logical_to_spec(("batch", "length", "embed"), rules) == P("data", None, "tensor")
  assert logical_to_spec(("embed", "batch"), rules) == P("data", None)
  with nnx.logical_axis_rules(rules):
    assert logical_to_spec(("embed",)) == P("data")
  assert logical_to_spec(("embed",)) == P("fsdp")


def test_rule_errors():
  with pytest.raises(KeyError, match="'emebd'"):
    logical_to_spec(("batch", "emebd"))
  with pytest.raises(ValueError, match="pair"):
    logical_to_spec(("batch",), [("batch",)])
  with pytest.raises(ValueError, match="mesh axes must be"):
    logical_to_spec(("batch",), [("batch", 3)])
  mesh = make_mesh({"data": -1, "tensor": 2})
  with pytest.raises(ValueError, match="'fsdp' is not in the mesh"):
    logical_sharding(("vocab", "embed"), mesh)


def test_logical_sharding_places_shards():
  mesh = make_mesh((1, 4, 2))
  s = logical_sharding(("vocab", "embed"), mesh)
  x = jax.device_put(jnp.arange(16 * 8, dtype=jnp.float32).reshape(16, 8), s)
  assert x.sharding.spec == P("tensor", "fsdp")
  assert {sh.data.shape for sh in x.addressable_shards} == {(8, 2)}
  np.testing.assert_array_equal(np.asarray(x), np.arange(128).reshape(16, 8))


def _same(x, mesh, spec):
  # Output specs drop trailing Nones, so compare shardings, not spec tuples.
  return x.sharding.is_equivalent_to(NamedSharding(mesh, spec), x.ndim)


def test_constrain_shards_inside_jit():
  mesh = make_mesh((2, 2, 2))
  x = jnp.arange(8 * 3 * 4, dtype=jnp.float32).reshape(8, 3, 4)

  @jax.jit
  def f(x):
    return constrain(x * 2.0, ("batch", "length", "embed"))

  @jax.jit
  def g(x):
    return constrain(x + 1.0, (None, None, "embed"))

  with mesh_rules(mesh):
    y = f(x)
    z = g(x)
  assert _same(y, mesh, P(("data", "fsdp"), None, None))
  assert {sh.data.shape for sh in y.addressable_shards} == {(2, 3, 4)}
  np.testing.assert_array_equal(np.asarray(y), 2.0 * np.asarray(x))
  assert _same(z, mesh, P(None, None, "fsdp"))
  assert {sh.data.shape for sh in z.addressable_shards} == {(8, 3, 2)}


def test_constrain_uses_context_rules_and_checks_rank():
  mesh = make_mesh((2, 2, 2))
  x = jnp.ones((4, 8))
  with mesh_rules(mesh, (("batch", "tensor"), ("embed", "data"))):
    y = jax.jit(lambda x: constrain(x, ("batch", "embed")))(x)
  assert _same(y, mesh, P("tensor", "data"))
  with pytest.raises(ValueError, match="2 logical names"):
    constrain(jnp.ones((2, 3, 4)), ("batch", "embed"))


def test_constrain_without_mesh_is_identity():
  x = jnp.arange(6.0).reshape(2, 3)
  y = jax.jit(lambda x: constrain(x, ("batch", "embed")))(x)
  np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
