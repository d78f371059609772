"""Where a run's arrays live: the mesh from `config.mesh`, the train state born sharded, and
the placement of rollout and training batches.

One `(data, fsdp, tensor)` mesh serves the rollout and the learner: the sampler reads the
same sharded params the update writes (no weight copy). Episodes and training rows are
split over `data` and `fsdp` (the `batch` logical axis), params over `fsdp` and `tensor` by
the logical-axis rules (agent_rl.parallel.rules). With several processes every host runs
this same code; task streams are drawn from the global seed inside jitted code and sharded
by rows, so each process materializes exactly the rows of its own devices.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agent_rl.parallel import DEFAULT_RULES, init_sharded, logical_to_spec, make_mesh, mesh_rules
from agent_rl.parallel.memory import optimizer_shardings
from agent_rl.parallel.mesh import AXES
from agent_rl.train.policy import ActorCritic
from agent_rl.train.step import TrainState


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
    entry = self.batch_spec[0]
    axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    return int(np.prod([self.mesh.shape[a] for a in axes])) if axes else 1

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


def make_placement(c) -> Placement:
  """The mesh of `config.mesh` over the first `num_devices` devices (0 = all of them)."""
  m = c.mesh
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


def model_factory(c, model_cfg):
  return lambda: ActorCritic(model_cfg, c.model.critic, rngs=nnx.Rngs(c.seed))


def abstract_state(c, model_cfg, optimizer, place: Placement):
  """(graphdef, lm_graphdef, abstract params, their shardings, abstract opt state, its
  shardings) from shapes alone: nothing is allocated or compiled."""
  from agent_rl.parallel import state_shardings
  abstract = nnx.eval_shape(model_factory(c, model_cfg))
  graphdef, params = nnx.split(abstract)
  lm_graphdef, _ = nnx.split(abstract.lm)
  p_sh = state_shardings(params, place.mesh, place.rules)
  opt = jax.eval_shape(optimizer.init, params)
  return graphdef, lm_graphdef, params, p_sh, opt, optimizer_shardings(opt, p_sh, place.mesh)


def abstract_train_state(c, model_cfg, optimizer, place: Placement) -> TrainState:
  """A TrainState of ShapeDtypeStructs with the run's shardings: a restore target that
  allocates nothing (a 7B teacher's optimizer state is never materialized)."""
  _, _, params, p_sh, opt, opt_sh = abstract_state(c, model_cfg, optimizer, place)
  sds = lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
  rep = place.replicated
  rng = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))
  return TrainState(params=jax.tree.map(sds, params, p_sh), opt_state=jax.tree.map(sds, opt, opt_sh),
                    step=jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
                    rng=jax.ShapeDtypeStruct(rng.shape, rng.dtype, sharding=rep))


def init_state(c, model_cfg, optimizer, place: Placement):
  """(graphdef, lm_graphdef, TrainState) with params and optimizer state born sharded."""
  graphdef, lm_graphdef, _, _, _, opt_sh = abstract_state(c, model_cfg, optimizer, place)
  _, params = init_sharded(model_factory(c, model_cfg), place.mesh, place.rules)
  with place.context():
    opt_state = jax.jit(optimizer.init, out_shardings=opt_sh)(params)
  rep = place.replicated
  rng = jax.random.key_data(jax.random.fold_in(jax.random.key(c.seed), 7))
  state = TrainState(params=params, opt_state=opt_state,
                     step=jax.device_put(jnp.int32(0), rep), rng=jax.device_put(rng, rep))
  return graphdef, lm_graphdef, state


def state_shardings(state: Any) -> Any:
  """The sharding of every leaf of a concrete state (the jitted step keeps them fixed)."""
  return jax.tree.map(lambda x: x.sharding, state)


def jit_step(step_fn, state: Any, place: Placement):
  """`step_fn(state, minibatch)` jitted with explicit in/out shardings, the state donated."""
  sh = state_shardings(state)
  return jax.jit(step_fn, in_shardings=(sh, place.batch_sharding),
                 out_shardings=(sh, place.replicated), donate_argnums=0)
