"""The one train state of a run, and its layout on the mesh from shapes alone.

A run has one `TrainState` (params, optimizer state, step, RNG). SFT and RL are phases of it:
RL starts from the SFT params with a fresh optimizer state (the SFT optimizer state is
dropped). `StateSpec` is computed once per run (one `eval_shape` of the model) and holds
everything the rest of the run needs to know about the state without allocating it: the
graphdefs, abstract params with their shardings, and how to make an optimizer's state and its
shardings. Restore targets (`abstract_train_state`) are built from it, so restoring a 7B
teacher's params never materializes an optimizer state.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from agent_rl.parallel import init_sharded, optimizer_shardings, state_shardings
from agent_rl.parallel.placement import Placement


@struct.dataclass
class TrainState:
  params: Any
  opt_state: Any
  step: jax.Array  # i32 scalar: optimizer updates applied in this phase
  rng: jax.Array  # u32 [2] key data for loss-side randomness (clip-cov selection)


@dataclasses.dataclass(frozen=True)
class StateSpec:
  """What a run's state looks like on its mesh, from shapes alone.

  graphdef: the ActorCritic's graph (policy LM + optional critic); lm_graphdef: the policy
  LM's alone (the rollout and reference/teacher scoring use it). params: abstract params
  (ShapeDtypeStruct) of the whole ActorCritic; param_shardings: their NamedShardings;
  lm_params / lm_shardings: the `params["lm"]` subtree.
  """
  graphdef: Any
  lm_graphdef: Any
  params: Any
  param_shardings: Any
  place: Placement
  factory: Callable[[], nnx.Module]

  @property
  def lm_params(self) -> Any:
    return self.params["lm"]

  @property
  def lm_shardings(self) -> Any:
    return self.param_shardings["lm"]

  def abstract_params(self, lm_only: bool = False) -> Any:
    """ShapeDtypeStructs with the run's shardings (a restore target that allocates nothing)."""
    p, s = (self.lm_params, self.lm_shardings) if lm_only else (self.params, self.param_shardings)
    return jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), p, s)

  def opt_layout(self, optimizer: optax.GradientTransformation) -> tuple[Any, Any]:
    """(abstract optimizer state, its shardings): each moment follows its parameter."""
    opt = jax.eval_shape(optimizer.init, self.params)
    return opt, optimizer_shardings(opt, self.param_shardings, self.place.mesh)

  def abstract_train_state(self, optimizer: optax.GradientTransformation) -> TrainState:
    """A TrainState of ShapeDtypeStructs with the run's shardings (a resume target)."""
    opt, opt_sh = self.opt_layout(optimizer)
    sds = lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
    rep = self.place.replicated
    return TrainState(params=self.abstract_params(), opt_state=jax.tree.map(sds, opt, opt_sh),
                      step=jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
                      rng=jax.ShapeDtypeStruct(_RNG.shape, _RNG.dtype, sharding=rep))


_RNG = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))


def state_spec(factory: Callable[[], nnx.Module], place: Placement) -> StateSpec:
  """The StateSpec of the module `factory()` builds (an ActorCritic with an `.lm`)."""
  abstract = nnx.eval_shape(factory)
  graphdef, params = nnx.split(abstract)
  lm_graphdef, _ = nnx.split(abstract.lm)
  return StateSpec(graphdef=graphdef, lm_graphdef=lm_graphdef, params=params,
                   param_shardings=state_shardings(params, place.mesh, place.rules),
                   place=place, factory=factory)


def init_params(spec: StateSpec) -> Any:
  """Concrete params born sharded (no full copy on any one device)."""
  return init_sharded(spec.factory, spec.place.mesh, spec.place.rules)[1]


def new_train_state(spec: StateSpec, params: Any, optimizer: optax.GradientTransformation,
                    seed: int) -> TrainState:
  """A TrainState at step 0 over `params` with a fresh optimizer state (born sharded)."""
  _, opt_sh = spec.opt_layout(optimizer)
  with spec.place.context():
    opt_state = jax.jit(optimizer.init, out_shardings=opt_sh)(params)
  rep = spec.place.replicated
  rng = jax.random.key_data(jax.random.fold_in(jax.random.key(seed), 7))
  return TrainState(params=params, opt_state=opt_state, step=jax.device_put(jnp.int32(0), rep),
                    rng=jax.device_put(rng, rep))


def copy_tree(tree: Any) -> Any:
  """Independent arrays (same shardings): a jitted step donates the buffers it is given."""
  return jax.tree.map(jnp.copy, tree)


def jit_step(step_fn: Callable, spec: StateSpec, optimizer: optax.GradientTransformation):
  """`step_fn(state, minibatch)` jitted with explicit in/out shardings, the state donated."""
  target = spec.abstract_train_state(optimizer)
  sh = jax.tree.map(lambda x: x.sharding, target)
  place = spec.place
  return jax.jit(step_fn, in_shardings=(sh, place.batch_sharding),
                 out_shardings=(sh, place.replicated), donate_argnums=0)


def jit_update(update_fn: Callable, spec: StateSpec, optimizer: optax.GradientTransformation):
  """`update_fn(state, rows, key, row_length)` (a whole iteration's epochs x minibatches,
  `train.epochs.make_scan_update`) jitted with explicit shardings, the state donated;
  `row_length` (the rows' length before a length-bucket cut, or None) is static."""
  target = spec.abstract_train_state(optimizer)
  sh = jax.tree.map(lambda x: x.sharding, target)
  place = spec.place
  return jax.jit(update_fn, in_shardings=(sh, place.batch_sharding, place.replicated),
                 out_shardings=(sh, place.replicated), static_argnums=3, donate_argnums=0)
