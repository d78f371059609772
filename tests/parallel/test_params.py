"""Tests for params born sharded, on a toy NNX model that tags its params with logical names
exactly as agent_rl.models does (`nnx.Param(..., sharding_names=..., eager_sharding=False)`)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from agent_rl.parallel import DEFAULT_RULES, constrain, init_sharded, make_mesh, mesh_rules


def _param(rngs, shape, names, seen=None):
  value = jax.random.normal(rngs.params(), shape) * shape[0] ** -0.5
  if seen is not None:
    seen.append(isinstance(value, jax.core.Tracer))
  return nnx.Param(value, sharding_names=names, eager_sharding=False)


class Toy(nnx.Module):
  """Embedding -> one SwiGLU-free MLP -> tied-free head; shapes follow the model contract."""

  def __init__(self, vocab=16, embed=8, mlp=12, heads=4, *, rngs, seen=None, unnamed=False):
    self.embedding = _param(rngs, (vocab, embed), ("vocab", "embed"), seen)
    self.q = _param(rngs, (embed, heads, 2), ("embed", "heads", "head_dim"), seen)
    self.up = _param(rngs, (embed, mlp), ("embed", "mlp"), seen)
    self.down = _param(rngs, (mlp, embed), ("mlp", "embed"), seen)
    self.norm = nnx.Param(jnp.ones((embed,)), sharding_names=("embed",), eager_sharding=False)
    self.head = _param(rngs, (embed, vocab), ("embed", "vocab"), seen)
    self.steps = nnx.BatchStat(jnp.zeros((), jnp.int32))  # no names: replicated
    if unnamed:
      self.extra = nnx.Param(jnp.zeros((embed, 2)))

  def __call__(self, tokens):
    x = jnp.take(self.embedding.value, tokens, axis=0)  # [B, L, E]
    x = constrain(x, ("batch", "length", "embed"))
    q = jnp.einsum("ble,ehd->blhd", x, self.q.value)
    x = x + jnp.tanh(q).sum(axis=(-2, -1), keepdims=False)[..., None]
    h = jax.nn.gelu(x @ self.up.value)
    x = (x + h @ self.down.value) * self.norm.value
    return constrain(x @ self.head.value, ("batch", "length", "vocab"))


def _leaves(state):
  return dict(nnx.to_flat_state(state))


def test_init_sharded_matches_eager_init_and_is_sharded():
  mesh = make_mesh((1, 4, 2))
  graphdef, state = init_sharded(lambda: Toy(rngs=nnx.Rngs(0)), mesh, DEFAULT_RULES)
  ref = nnx.state(Toy(rngs=nnx.Rngs(0)))
  got, want = _leaves(state), _leaves(ref)
  assert got.keys() == want.keys()
  for k in want:
    # Same random bits; jit may fuse the init scale differently (1 ulp), hence rtol.
    np.testing.assert_allclose(np.asarray(got[k].value), np.asarray(want[k].value), rtol=1e-6,
                               atol=0, err_msg=str(k))
  expected = {
      ("embedding",): (P("tensor", "fsdp"), (8, 2)),
      ("q",): (P("fsdp", "tensor", None), (2, 2, 2)),
      ("up",): (P("fsdp", "tensor"), (2, 6)),
      ("down",): (P("tensor", "fsdp"), (6, 2)),
      ("norm",): (P("fsdp"), (2,)),
      ("head",): (P("fsdp", "tensor"), (2, 8)),
      ("steps",): (P(), ()),
  }
  for k, (spec, shard_shape) in expected.items():
    arr = got[k].value
    assert arr.sharding.is_equivalent_to(NamedSharding(mesh, spec), arr.ndim), (k, arr.sharding)
    assert {s.data.shape for s in arr.addressable_shards} == {shard_shape}, k
  # metadata survives, so the state can be re-split / merged
  assert got[("up",)].get_metadata()["out_sharding"] == ("embed", "mlp")
  model = nnx.merge(graphdef, state)
  assert isinstance(model, Toy)


def test_nothing_is_built_eagerly():
  # Every call of make_model inside init_sharded must see tracers (eval_shape or jit), never a
  # concrete full-size array on the default device.
  seen = []
  mesh = make_mesh((1, 4, 2))
  init_sharded(lambda: Toy(rngs=nnx.Rngs(0), seen=seen), mesh, DEFAULT_RULES)
  assert seen and all(seen)
  seen.clear()
  Toy(rngs=nnx.Rngs(0), seen=seen)  # the check itself can fail: eager init is concrete
  assert not any(seen)


def test_sharded_forward_equals_unsharded():
  mesh = make_mesh((2, 2, 2))
  graphdef, state = init_sharded(lambda: Toy(rngs=nnx.Rngs(1)), mesh, DEFAULT_RULES)
  tokens = jax.random.randint(jax.random.key(0), (4, 5), 0, 16)

  def fwd(state, tokens):
    return nnx.merge(graphdef, state)(tokens)

  with mesh_rules(mesh, DEFAULT_RULES):
    out = jax.jit(fwd)(state, tokens)
  assert out.sharding.is_equivalent_to(
      NamedSharding(mesh, P(("data", "fsdp"), None, "tensor")), 3)
  want = Toy(rngs=nnx.Rngs(1))(tokens)  # no mesh: plain single-device forward
  np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_indivisible_dimension_names_path_shape_axis():
  mesh = make_mesh((1, 2, 4))
  with pytest.raises(ValueError, match=r"parameter down of shape \(6, 8\): dimension 0 \('mlp', "
                                       r"size 6\) is not divisible by mesh axes \('tensor',\) of size 4"):
    init_sharded(lambda: Toy(mlp=6, vocab=16, heads=4, rngs=nnx.Rngs(0)), mesh, DEFAULT_RULES)


def test_unnamed_params_are_an_error_unless_allowed():
  mesh = make_mesh((1, 4, 2))
  with pytest.raises(ValueError, match=r"parameter extra of shape \(8, 2\) has no logical axis names"):
    init_sharded(lambda: Toy(rngs=nnx.Rngs(0), unnamed=True), mesh, DEFAULT_RULES)
  _, state = init_sharded(lambda: Toy(rngs=nnx.Rngs(0), unnamed=True), mesh, DEFAULT_RULES,
                          require_names=False)
  assert state["extra"].value.sharding.is_fully_replicated


def test_unknown_logical_name_is_an_error():
  mesh = make_mesh((1, 4, 2))
  rules = tuple(r for r in DEFAULT_RULES if r[0] != "mlp")
  with pytest.raises(KeyError, match="'mlp'"):
    init_sharded(lambda: Toy(rngs=nnx.Rngs(0)), mesh, rules)
