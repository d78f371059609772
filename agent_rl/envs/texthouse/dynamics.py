"""TextHouse rules: one parsed action applied to a state, and the goal / subgoal tracker.

ALFWorld's PDDL preconditions (alfworld/data/alfred.pddl, as played through its TextWorld
grammar), simplified to one room of receptacles:
    go to R         R exists and the agent is not already at R
    open / close R  at R, R openable and closed / open
    examine R       at R                  examine O   O carried, or at O's receptacle and it is open
    take O from R   at R, O in R, R open (or not openable), hands empty, O portable
    move O to R     O carried, at R, R open (or not openable)
    heat / cool / clean O with R   O carried, at R, R a microwave / fridge / sinkbasin, O
                    heatable / coolable / cleanable (heating clears cold, cooling clears hot)
    use O           O a light source at the agent's receptacle (toggles it)
    look, inventory always
Anything else changes nothing ("Nothing happens."). All functions act on one example.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.texthouse import catalog as C
from agent_rl.envs.texthouse.world import HouseState, global_ids, present_recs

_RK = np.asarray(C.REC_KIND)


@struct.dataclass
class Event:
  """What a step did, for the renderer: kind int32 (0 = nothing happened, else verb + 1),
  rec int32 (receptacle slot argument), slot int32 (object slot the action named)."""
  kind: jax.Array
  rec: jax.Array
  slot: jax.Array


def accessible(state: HouseState, r: jax.Array) -> jax.Array:
  """Receptacle slot r (may be -1 = nowhere) can be reached into: exists and open or not openable."""
  rc = jnp.maximum(r, 0)
  return (r >= 0) & (~jnp.asarray(C.REC_OPENABLE)[rc] | state.opened[rc])


def carried(state: HouseState) -> jax.Array:
  """`[NO] bool` the carried object (at most one)."""
  return (state.loc == -1) & (state.task.obj_kind >= 0)


def transition(state: HouseState, verb: jax.Array, gid: jax.Array, rec: jax.Array):
  """Applies verb(gid, rec) (catalog.VERBS, global object id, receptacle slot) -> (state, Event).
  A done state or a failed precondition changes nothing (Event.kind 0)."""
  t = state.task
  match = global_ids(t) == gid
  found = jnp.any(match)
  s = jnp.argmax(match).astype(jnp.int32)
  kind = jnp.maximum(t.obj_kind[s], 0)
  r = jnp.clip(rec, 0, C.R - 1)
  at = state.at
  openable = jnp.asarray(C.REC_OPENABLE)[r]
  acc_r = accessible(state, r)
  acc_at = accessible(state, at)
  holding = jnp.any(carried(state))
  s_loc = state.loc[s]
  has = found & (s_loc == -1)
  rkind = jnp.asarray(_RK)[r]
  prop = jnp.asarray(C.PROPS)[kind]
  oks = jnp.stack([
      jnp.bool_(True), jnp.bool_(True),                                    # look, inventory
      present_recs(t.rec_count)[r] & (r != at),                           # go to
      (at == r) & openable & ~state.opened[r],                            # open
      (at == r) & openable & state.opened[r],                             # close
      at == r,                                                            # examine R
      found & ((s_loc == -1) | ((s_loc == at) & acc_at)),                 # examine O
      found & prop[4] & (s_loc == at) & acc_at,                           # use
      found & (at == r) & (s_loc == r) & acc_r & ~holding & ~prop[4],     # take
      has & (at == r) & acc_r,                                            # move
      has & (at == r) & (rkind == C.HEATER) & prop[0],                    # heat
      has & (at == r) & (rkind == C.COOLER) & prop[1],                    # cool
      has & (at == r) & (rkind == C.CLEANER) & prop[2],                   # clean
  ])
  ok = oks[jnp.clip(verb, 0, C.NV - 1)] & ~state.done & (verb >= 0)
  is_v = lambda v: ok & (verb == v)  # noqa: E731
  # One-hot selects instead of .at[].set: under vmap a scatter per field is slow on CPU.
  at_r = jnp.arange(C.R) == r
  at_s = jnp.arange(state.loc.shape[0]) == s
  opened = jnp.where(at_r & is_v(C.OPEN_V), True, jnp.where(at_r & is_v(C.CLOSE_V), False, state.opened))
  loc = jnp.where(at_s & is_v(C.TAKE_V), -1, jnp.where(at_s & is_v(C.MOVE_V), r, state.loc))
  hot = jnp.where(at_s & is_v(C.HEAT_V), True, jnp.where(at_s & is_v(C.COOL_V), False, state.hot))
  cold = jnp.where(at_s & is_v(C.COOL_V), True, jnp.where(at_s & is_v(C.HEAT_V), False, state.cold))
  clean = state.clean | (at_s & is_v(C.CLEAN_V))
  on = state.on ^ (at_s & is_v(C.USE_V))
  new = state.replace(at=jnp.where(is_v(C.GOTO_V), r, at).astype(jnp.int32), opened=opened,
                      loc=loc.astype(jnp.int32), hot=hot, cold=cold, clean=clean, on=on)
  event = Event(kind=jnp.where(ok, verb + 1, 0).astype(jnp.int32), rec=r, slot=s)
  return new, event


def stage_status(state: HouseState, k: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Stage k's subgoals `[NSUB] bool` (catalog.SUBGOALS, masked to its family) and success."""
  t = state.task
  f, okind, tkind = t.goal_family[k], t.goal_obj[k], t.goal_rec[k]
  isk = t.obj_kind == okind
  held = carried(state)
  visible = isk & (held | ((state.loc == state.at) & accessible(state, state.at)))
  prop = jnp.where(f == C.CLEAN_F, state.clean, jnp.where(
      f == C.HEAT_F, state.hot, jnp.where(f == C.COOL_F, state.cold, True)))
  in_t = (state.loc >= 0) & (jnp.asarray(_RK)[jnp.maximum(state.loc, 0)] == tkind)
  placed = jnp.sum(isk & prop & in_t)
  lamp = jnp.any((t.obj_kind == C.LAMP) & state.on & (state.loc == state.at) & (state.at >= 0))
  picked = jnp.any(isk & held)
  subs = jnp.stack([jnp.any(visible), picked, jnp.any(isk & prop), placed >= 1, placed >= 2, lamp])
  subs &= jnp.asarray(C.FAMILY_SUBGOALS)[f]
  success = jnp.where(f == C.TWO, placed >= 2, jnp.where(f == C.LOOK, picked & lamp, placed >= 1))
  return subs, success


def advance(state: HouseState) -> tuple[HouseState, jax.Array]:
  """Latches the current stage's subgoals and moves past every stage now satisfied (in order;
  a later stage already satisfied completes in the same step). Returns (state, number of
  subgoals newly reached)."""
  ns = state.task.goal_family.shape[0]
  reached, stage = state.reached, state.stage
  for _ in range(ns):
    live = (stage < ns) & ~state.done
    k = jnp.minimum(stage, ns - 1)
    subs, success = stage_status(state, k)
    reached = reached | ((jnp.arange(ns) == k)[:, None] & subs[None, :] & live)
    stage = stage + (success & live).astype(jnp.int32)
  new = jnp.sum(reached & ~state.reached, dtype=jnp.int32)
  return state.replace(reached=reached, stage=stage), new
