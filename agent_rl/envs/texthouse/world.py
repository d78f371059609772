"""TextHouse tasks and states, and the jittable task generator (ALFWorld-style households).

A task is a household layout (instances per receptacle kind; instances numbered 1..count),
`NO` object slots (kind, instance number, starting receptacle; kind -1 = empty slot) and `NS`
goal stages (family, goal object kind, target receptacle kind). TextHouse has one stage, as
ALFWorld; TextLab chains several (long-horizon credit). Openable receptacles start closed,
so what they hold is unseen until opened; no goal-kind object starts in its target kind and
no object starts transformed, so no stage is solved at reset.

Splits (ALFWorld's seen / unseen): `catalog.UNSEEN` reserves ~25% of the (goal object kind,
target receptacle kind) pairs; the train split never samples a reserved pair, the unseen
split samples only reserved pairs, so the two task distributions are disjoint per stage.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.texthouse import catalog as C


@struct.dataclass
class HouseTask:
  """rec_count [RK] int32; obj_kind, obj_num, obj_loc [NO] int32 (kind -1 = empty slot; loc a
  receptacle slot); goal_family, goal_obj, goal_rec [NS] int32 (family, object kind, target
  receptacle kind; look_at: the lamp's receptacle kind); skill bool (inject skill texts);
  unseen bool (drawn from the held-out split)."""
  rec_count: jax.Array
  obj_kind: jax.Array
  obj_num: jax.Array
  obj_loc: jax.Array
  goal_family: jax.Array
  goal_obj: jax.Array
  goal_rec: jax.Array
  skill: jax.Array
  unseen: jax.Array


@struct.dataclass
class HouseState:
  """task; at int32 (receptacle slot, -1 = middle of the room); loc [NO] int32 (-1 = carried);
  opened [R] bool; hot, cold, clean, on [NO] bool; stage int32 (stages done);
  reached [NS, NSUB] bool (latched subgoals); steps int32; done bool."""
  task: HouseTask
  at: jax.Array
  loc: jax.Array
  opened: jax.Array
  hot: jax.Array
  cold: jax.Array
  clean: jax.Array
  on: jax.Array
  stage: jax.Array
  reached: jax.Array
  steps: jax.Array
  done: jax.Array


def present_recs(rec_count: jax.Array) -> jax.Array:
  """`[R] bool` receptacle slots that exist in a layout."""
  return jnp.asarray(C.REC_NUM) <= jnp.asarray(rec_count)[jnp.asarray(C.REC_KIND)]


def global_ids(task: HouseTask) -> jax.Array:
  """`[NO] int32` global object ids (catalog.OBJ_NAMES index), -1 for empty slots."""
  return jnp.where(task.obj_kind >= 0, task.obj_kind * C.MAX_INSTANCES + task.obj_num - 1, -1)


def initial_state(task: HouseTask) -> HouseState:
  ns, no = task.goal_family.shape[0], task.obj_kind.shape[0]
  f = jnp.zeros((no,), bool)
  return HouseState(task=task, at=jnp.int32(-1), loc=task.obj_loc, opened=jnp.zeros((C.R,), bool),
                    hot=f, cold=f, clean=f, on=f, stage=jnp.int32(0),
                    reached=jnp.zeros((ns, C.NSUB), bool), steps=jnp.int32(0),
                    done=jnp.bool_(False))


def pair_table(family: int, split: str, kinds: np.ndarray) -> np.ndarray:
  """`[OK, RK] bool` (goal kind, target kind) pairs a stage of `family` may draw in `split`."""
  obj = C.FAMILY_OBJECTS[family] & kinds
  rec = np.zeros(C.RK, bool)
  if family == C.LOOK:
    rec[list(C.LAMP_HOLDERS)] = True
  else:
    rec[:] = True
  split_ok = C.UNSEEN if split == "unseen" else ~C.UNSEEN
  return obj[:, None] & rec[None, :] & split_ok


class _Uniforms:
  """One threefry draw sliced into named uniform blocks (one RNG call compiles much faster
  than a split per choice)."""

  def __init__(self, key, sizes: dict):
    self.shapes = sizes
    total = sum(int(np.prod(v)) for v in sizes.values())
    self.u = jax.random.uniform(key, (total,), minval=1e-6, maxval=1.0 - 1e-6)
    self.offset = {}
    o = 0
    for k, v in sizes.items():
      self.offset[k] = o
      o += int(np.prod(v))

  def __getitem__(self, name):
    o, shape = self.offset[name], self.shapes[name]
    return self.u[o:o + int(np.prod(shape))].reshape(shape)


def _choice(u, mask):
  """Uniform index among True entries of `mask [..., K]` along the last axis (Gumbel-max over
  uniforms `u` shaped like mask; callers guarantee one True per row)."""
  g = -jnp.log(-jnp.log(u))
  return jnp.argmax(jnp.where(mask, g, -jnp.inf), axis=-1).astype(jnp.int32)


def _ranks(x):
  """`[..., K]` rank of each entry within its row, 0 = largest (ties impossible for uniforms)."""
  return jnp.sum(x[..., None, :] > x[..., :, None], axis=-1)


def generate(key: jax.Array, *, stages: int, num_objects: int, families: np.ndarray,
             kinds: np.ndarray, split: str, skill_prob: float) -> HouseTask:
  """One task (jittable; vmap for batches). families [6] bool, kinds [OK] bool are the
  allowed task families and object kinds (checked feasible by the env at construction)."""
  ns, no = stages, num_objects
  u = _Uniforms(key, {"fam": (ns, 6), "pair": (ns, C.OK_ * C.RK), "layout": (C.RK,),
                      "dis": (C.OK_,), "ndis": (), "loc": (no, C.R), "num": (C.OK_, C.MAX_INSTANCES),
                      "skill": ()})
  pairs = jnp.asarray(np.stack([pair_table(f, split, kinds) for f in range(6)]))  # [6, OK, RK]
  used = jnp.zeros((C.OK_,), bool)
  has_look = jnp.bool_(False)
  fams, objs, recs = [], [], []
  for s in range(ns):
    fam_ok = jnp.asarray(families) & ((jnp.arange(6) != C.LOOK) | ~has_look)
    f = _choice(u["fam"][s], fam_ok)
    p = _choice(u["pair"][s], (pairs[f] & ~used[:, None]).ravel())
    o, r = p // C.RK, p % C.RK
    used = used.at[o].set(True)
    has_look |= f == C.LOOK
    fams.append(f), objs.append(o), recs.append(r)
  fam, gobj, grec = jnp.stack(fams), jnp.stack(objs), jnp.stack(recs)

  # Layout: a count per kind in [min, max], every stage's target kind at least once.
  lo, hi = jnp.asarray(C.REC_MIN), jnp.asarray(C.REC_MAX)
  count = lo + jnp.floor(u["layout"] * (hi - lo + 1)).astype(jnp.int32)
  need = jnp.zeros((C.RK,), bool).at[grec].set(True)
  count = jnp.where(need, jnp.maximum(count, 1), count)
  present = present_recs(count)

  # Objects: slots 2s, 2s+1 hold stage s's goal object(s) (2s+1 only for pick_two), slot 2*NS
  # the desklamp when a stage is look_at; the rest are distractors of distinct other kinds.
  slot = jnp.arange(no)
  stage_of = jnp.minimum(slot // 2, ns - 1)
  is_goal = (slot < 2 * ns) & ((slot % 2 == 0) | (fam[stage_of] == C.TWO))
  is_lamp = (slot == 2 * ns) & has_look
  dis_ok = jnp.asarray(kinds & C.PICKABLE) & ~used
  order = _ranks(jnp.where(dis_ok, u["dis"], -1.0))             # distinct kinds, random order
  dis_rank = jnp.cumsum(~is_goal & ~is_lamp) - 1
  n_fixed = jnp.sum(is_goal | is_lamp)
  lo_d = (no - 2 * ns) // 2
  n_dis = lo_d + jnp.floor(u["ndis"] * (no - n_fixed + 1 - lo_d)).astype(jnp.int32)
  is_dis = ~is_goal & ~is_lamp & (dis_rank < n_dis)
  dis_kind = jnp.argmax(order[None, :] == dis_rank[:, None], axis=1)
  kind = jnp.where(is_goal, gobj[stage_of], jnp.where(is_lamp, C.LAMP, jnp.where(is_dis, dis_kind, -1)))

  # Starting receptacles: goal objects avoid their target kind; the lamp sits on the look
  # stage's lamp holder; distractors anywhere.
  look_rec = jnp.sum(jnp.where(fam == C.LOOK, grec, 0))
  rk = jnp.asarray(C.REC_KIND)
  m = present[None, :] & jnp.where(is_goal[:, None], rk[None, :] != grec[stage_of][:, None], True)
  m = jnp.where(is_lamp[:, None], present[None, :] & (rk[None, :] == look_rec), m)       # [NO, R]
  loc = _choice(u["loc"], m)

  # Instance numbers: a random distinct number in 1..MAX_INSTANCES per object of a kind.
  perm = _ranks(u["num"]) + 1                                   # [OK, MAX_INSTANCES]
  same = (kind[:, None] == kind[None, :]) & (slot[None, :] < slot[:, None])
  rank = jnp.sum(same, axis=1)
  num = jnp.where(kind >= 0, perm[jnp.maximum(kind, 0), jnp.minimum(rank, C.MAX_INSTANCES - 1)], 0)
  return HouseTask(rec_count=count.astype(jnp.int32), obj_kind=kind.astype(jnp.int32),
                   obj_num=num.astype(jnp.int32), obj_loc=jnp.where(kind >= 0, loc, 0).astype(jnp.int32),
                   goal_family=fam, goal_obj=gobj, goal_rec=grec, skill=u["skill"] < skill_prob,
                   unseen=jnp.bool_(split == "unseen"))


def check_feasible(stages: int, num_objects: int, families: np.ndarray, kinds: np.ndarray,
                   split: str, kind_name: str) -> None:
  """Construction-time errors for specs the generator cannot satisfy (naming the field)."""
  if not families.any():
    raise ValueError(f"{kind_name}.families selects no task family")
  for f in np.flatnonzero(families):
    goal_kinds = pair_table(int(f), split, kinds).any(axis=1).sum()
    need = 1 if f == C.LOOK else stages
    if goal_kinds < need:
      raise ValueError(f"{kind_name}: family {C.FAMILIES[f]!r} has {goal_kinds} goal object "
                       f"kind(s) in split {split!r} with objects={tuple(k[0] for k, a in zip(C.OBJECT_KINDS, kinds) if a)}, "
                       f"needs {need} (stages={stages}); allow more objects or drop the family")
  if num_objects < 2 * stages + 1:
    raise ValueError(f"{kind_name}.num_objects={num_objects} must be >= 2 * stages + 1 = "
                     f"{2 * stages + 1} (goal objects and the desklamp)")
  if (kinds & C.PICKABLE).sum() < num_objects:
    raise ValueError(f"{kind_name}.objects has {(kinds & C.PICKABLE).sum()} portable kinds, fewer "
                     f"than num_objects={num_objects} (goal and distractor kinds are distinct; "
                     f"lower num_objects or allow more objects)")
