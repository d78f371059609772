"""TextHouse observations: ALFWorld's feedback strings, rendered by gathering pre-tokenized pieces.

Strings follow ALFWorld's TextWorld grammar (alfworld/data/alfred.twl2, commit 1fa7e68):
"-= Welcome to TextWorld, ALFRED! =-", "You arrive at {r}. The {r} is closed.", "You open the
{r}. The {r} is open. In it, you see a mug 1, and a apple 1.", "On the {r}, you see nothing.",
"You pick up the {o} from the {r}.", "You move the {o} to the {r}.", "You heat the {o} using
the {r}.", "You turn on the {o}.", "This is a hot {o}.", "You are carrying: a {o}.",
"You are facing the {r}. Next to it, you see nothing.", "Nothing happens."; lists use
TextWorld's ", " / ", and " separators. The goal line is "Your task is to: put a clean mug
in coffeemachine." (TextLab chains stages with " Then, ").

A step observation is 2 + L slots (L = max(objects, receptacle kinds)): a head piece, a second
piece, and one list slot per object slot (contents of a receptacle, in slot order) or per
receptacle kind (the room overview, one piece per kind: "a cabinet 1, a cabinet 2, ").
Unlisted slots are masked and dropped by the compaction, so no sort or search is needed.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Digest, Text, TokenizerLike, digest
from agent_rl.envs.render import PieceTable
from agent_rl.envs.texthouse import catalog as C
from agent_rl.envs.texthouse.dynamics import Event, carried
from agent_rl.envs.texthouse.world import HouseState, HouseTask, global_ids, present_recs

WELCOME = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. "
           "Looking quickly around you, you see ")
LOOK_MID = "You are in the middle of a room. Looking quickly around you, you see "
ROOM = "\n\nIn the room, you see "   # repeat_room's lead (the welcome's overview, again)
NOTHING = "Nothing happens."
EXAMINE_O = ("This is a hot and clean {o}.", "This is a cool and clean {o}.", "This is a hot {o}.",
             "This is a clean {o}.", "This is a cold {o}.", "This {o} is on.", "This {o} is off.",
             "There's nothing special about {o}.")
_ENDS = (", ", ", and ", ".")   # list item endings: middle, second to last, last


def examine_variant(hot, cold, clean, light, on):
  """Index into EXAMINE_O (ALFWorld's examineObject conditions, first match wins)."""
  return jnp.where(clean & hot, 0, jnp.where(clean & cold, 1, jnp.where(hot, 2, jnp.where(
      clean, 3, jnp.where(cold, 4, jnp.where(light, jnp.where(on, 5, 6), 7))))))


def group_text(kind: int, count: int, end: int) -> str:
  """Room overview piece of `count` instances of receptacle kind `kind`. end: 0 the group is
  followed by more groups, 1 by one last single item (", and "), 2 it is the last group."""
  names = [f"a {C.RECEPTACLE_KINDS[kind][0]} {n}" for n in range(1, count + 1)]
  if end < 2:
    return ", ".join(names) + _ENDS[end]
  return (", ".join(names[:-1]) + ", and " + names[-1] + "." if count > 1 else names[0] + ".")


def _items(mask: jax.Array) -> jax.Array:
  """Ending variant `[n]` (index into _ENDS) of each masked list item, by its rank."""
  n = jnp.sum(mask)
  rank = jnp.cumsum(mask) - 1
  return jnp.where(rank == n - 1, 2, jnp.where(rank == n - 2, 1, 0))


class HouseText(Digest):
  """All TextHouse pieces pre-tokenized, plus the id tables the renderers index."""

  def __init__(self, tokenizer: TokenizerLike, num_objects: int, stages: int):
    self.no, self.ns = int(num_objects), int(stages)
    self.nl = max(self.no, C.RK)
    index: dict[str, int] = {}

    def add(texts):                       # id array shaped like `texts`; equal texts share a row
      arr = np.asarray(texts, object)
      ids = np.zeros(arr.shape, np.int32)
      for idx in np.ndindex(arr.shape):
        ids[idx] = index.setdefault(arr[idx], len(index))
      return ids

    o, r = C.OBJ_NAMES, C.REC_NAMES
    self.nothing = add(NOTHING)
    self.arrive = add([[f"You arrive at {x}. The {x} is closed." for x in r],
                       [f"You arrive at {x}. The {x} is open. In it, you see " for x in r],
                       [f"You arrive at {x}. On the {x}, you see " for x in r]])
    self.exam_r = add([[f"The {x} is closed." for x in r], [f"The {x} is open. In it, you see " for x in r],
                       [f"On the {x}, you see " for x in r]])
    self.open = add([f"You open the {x}. The {x} is open. In it, you see " for x in r])
    self.close = add([f"You close the {x}." for x in r])
    self.facing = add([f"You are facing the {x}. Next to it, you see nothing." for x in r])
    self.item = add([[f"a {x}{e}" for x in o] for e in _ENDS])                    # [3, G]
    self.empty = add("nothing.")
    self.take = add([f"You pick up the {x}" for x in o]), add([f" from the {x}." for x in r])
    self.move = add([f"You move the {x}" for x in o]), add([f" to the {x}." for x in r])
    self.transform = add([[f"You {v} the {x}" for x in o] for v in ("heat", "cool", "clean")])
    self.using = add([f" using the {x}." for x in r])
    self.use = add([[f"You turn {w} the {x}." for x in o] for w in ("on", "off")])
    self.exam_o = add([[t.format(o=x) for x in o] for t in EXAMINE_O])           # [8, G]
    self.inv = add([f"You are carrying: a {x}." for x in o])
    self.inv_none = add("You are not carrying anything.")
    self.look_mid, self.welcome, self.room = add(LOOK_MID), add(WELCOME), add(ROOM)
    mx = int(C.REC_MAX.max())
    self.group = add([[[group_text(k, min(c + 1, int(C.REC_MAX[k])), e) for c in range(mx)]
                       for k in range(C.RK)] for e in range(3)])                 # [3, RK, mx]
    self.task_line, self.then = add("\n\nYour task is to: "), add(" Then, ")
    kinds = [k[0] for k in C.OBJECT_KINDS]
    self.goal1 = add([[g.split("{r}")[0].format(o=x) for x in kinds] for g in C.GOALS])  # [6, OK]
    self.goal2 = add([f"{k[0]}." for k in C.RECEPTACLE_KINDS])
    self.skill = add([f"\n{s}" for s in C.SKILLS])
    self.priv1 = add([[f"{sep}The {x} is in " for x in o] for sep in ("", " ")])     # [2, G]
    self.priv2 = add([f"{x}." for x in r])
    # Admissible-action listing (verl-agent's ALFWorld prompt lists them every turn).
    self.adm_head, self.adm_tail = add("\nAvailable actions: "), add("look, inventory.")
    self.adm_r = add([[f"{v} {x}, " for x in r] for v in ("go to", "examine", "open", "close")])  # [4, R]
    self.adm_o = add([[f"{v} {x}, " for x in o] for v in ("examine", "use")])                   # [2, G]
    self.adm_o2 = add([[f"{v} {x} {p} " for x in o] for v, p in
                       (("take", "from"), ("move", "to"), ("heat", "with"), ("cool", "with"), ("clean", "with"))])
    self.adm_r2 = add([f"{x}, " for x in r])
    self.pieces = tuple(index)
    self.table = PieceTable(tokenizer, self.pieces)
    lens = self.table.lengths
    longest = lambda ids: int(lens[np.asarray(ids).ravel()].max())  # noqa: E731
    # Worst-case lengths per observation shape (tight, since compaction cost scales with them).
    single = np.concatenate([np.ravel(x) for x in (
        self.nothing, self.exam_r[0], self.close, self.facing, self.exam_o, self.inv, self.inv_none,
        self.use)])
    pairs = max(longest(self.take[0]) + longest(self.take[1]), longest(self.move[0]) + longest(self.move[1]),
                longest(self.transform) + longest(self.using))
    listing = longest(np.concatenate([np.ravel(self.arrive[1:]), np.ravel(self.exam_r[1:]),
                                      np.ravel(self.open)]))
    overview = sum(longest(self.group[:, k]) for k in range(C.RK))
    self.step_len = max(longest(single), longest(self.arrive[0]), pairs,
                        listing + max(longest(self.empty), self.no * longest(self.item)),
                        longest(self.look_mid) + overview)
    goal_max = longest(self.then) + longest(self.goal1) + longest(self.goal2)
    self.goal_len = longest(self.task_line) + self.ns * goal_max
    self.room_len = longest(self.room) + overview
    self.reset_len = longest(self.welcome) + overview + self.goal_len + self.ns * longest(self.skill)
    self.priv_len = 2 * self.ns * (longest(self.priv1) + longest(self.priv2))
    self.adm_len = (longest(self.adm_head) + longest(self.adm_tail) + longest(self.adm_r[0]) * C.R
                    + 2 * longest(self.adm_r[1:]) + (self.no + 2) * (longest(self.adm_o) + longest(self.adm_o2)
                                                                     + longest(self.adm_r2)))
    self.obs_len = max(self.step_len, self.reset_len)
    self._digest = digest(self.table._digest, self.no, self.ns)

  # -- ids --------------------------------------------------------------------------------------
  def _groups(self, rec_count):
    """Room overview: `(ids [RK], mask [RK])`, one piece per receptacle kind present."""
    mask = rec_count > 0
    end = _items(mask)
    last_count = rec_count[jnp.argmax(jnp.where(mask, jnp.arange(C.RK), -1))]
    end = jnp.where((end == 1) & (last_count > 1), 0, end)        # ", and " goes inside the last group
    ids = jnp.asarray(self.group)[end, jnp.arange(C.RK), jnp.clip(rec_count - 1, 0, None)]
    return ids, mask

  def _contents(self, state: HouseState, r):
    """Objects in receptacle r: `(ids [NO], mask [NO])` item pieces in slot order."""
    t = state.task
    mask = (state.loc == r) & (t.obj_kind >= 0)
    ids = jnp.asarray(self.item)[_items(mask), jnp.maximum(global_ids(t), 0)]
    return ids, mask

  def _pad_list(self, ids, mask):
    n = ids.shape[0]
    if n == self.nl:
      return ids, mask
    return (jnp.concatenate([ids, jnp.zeros((self.nl - n,), jnp.int32)]),
            jnp.concatenate([mask, jnp.zeros((self.nl - n,), bool)]))

  def step_ids(self, state: HouseState, ev: Event) -> tuple[jax.Array, jax.Array]:
    """`(ids [2 + L], mask [2 + L])` of the observation after a step (state = the new state)."""
    t = state.task
    r, s = ev.rec, ev.slot
    g = jnp.maximum(global_ids(t)[s], 0)
    k = ev.kind - 1                                        # the verb, -1 = nothing happened
    variant = jnp.where(jnp.asarray(C.REC_OPENABLE)[r], jnp.where(state.opened[r], 1, 0), 2)
    contents, cmask = self._contents(state, r)
    groups, gmask = self._groups(t.rec_count)
    held = carried(state)
    hs = jnp.argmax(held)
    hg = jnp.maximum(global_ids(t)[hs], 0)
    look_mid = (k == C.LOOK_V) & (state.at < 0)
    ex = examine_variant(state.hot[s], state.cold[s], state.clean[s],
                         jnp.asarray(C.LIGHT)[jnp.maximum(t.obj_kind[s], 0)], state.on[s])
    heads = jnp.stack([
        self.nothing + 0 * r,
        jnp.where(look_mid, self.look_mid, jnp.asarray(self.facing)[jnp.maximum(state.at, 0)]),
        jnp.where(jnp.any(held), jnp.asarray(self.inv)[hg], self.inv_none),
        jnp.asarray(self.arrive)[variant, r], jnp.asarray(self.open)[r], jnp.asarray(self.close)[r],
        jnp.asarray(self.exam_r)[variant, r], jnp.asarray(self.exam_o)[ex, g],
        jnp.asarray(self.use)[jnp.where(state.on[s], 0, 1), g],
        jnp.asarray(self.take[0])[g], jnp.asarray(self.move[0])[g],
        jnp.asarray(self.transform)[0, g], jnp.asarray(self.transform)[1, g],
        jnp.asarray(self.transform)[2, g]]).astype(jnp.int32)
    head = heads[ev.kind]
    lists_r = (((k == C.GOTO_V) | (k == C.EXAM_R_V)) & (variant > 0)) | (k == C.OPEN_V)
    empty = lists_r & ~jnp.any(cmask)
    seconds = jnp.stack([self.empty + 0 * r, jnp.asarray(self.take[1])[r],
                         jnp.asarray(self.move[1])[r], jnp.asarray(self.using)[r]])
    sec_kind = jnp.where(k == C.TAKE_V, 1, jnp.where(k == C.MOVE_V, 2, jnp.where(k >= C.HEAT_V, 3, 0)))
    second_on = empty | (k >= C.TAKE_V)
    cids, cm = self._pad_list(contents, cmask & lists_r)
    gids, gm = self._pad_list(groups, gmask & look_mid)
    ids = jnp.concatenate([jnp.stack([head, seconds[sec_kind]]), jnp.where(look_mid, gids, cids)])
    mask = jnp.concatenate([jnp.stack([jnp.bool_(True), second_on]), cm | gm])
    return ids, mask

  def admissible_ids(self, state: HouseState) -> tuple[jax.Array, jax.Array]:
    """"\nAvailable actions: go to cabinet 1, ..., look, inventory." listing every action whose
    preconditions hold (dynamics.py), in a fixed order: go to, examine / open / close the
    current receptacle, per object slot (examine, take or use), move, transform, look, inventory.
    `(ids [4 + R + 2 + 2 NO + 4], mask)`."""
    t = state.task
    at, ac = state.at, jnp.maximum(state.at, 0)
    here = at >= 0
    openable = jnp.asarray(C.REC_OPENABLE)[ac]
    acc = here & (~openable | state.opened[ac])
    g = jnp.maximum(global_ids(t), 0)
    exists = t.obj_kind >= 0
    held = carried(state)
    holding = jnp.any(held)
    hs = jnp.argmax(held)
    kind = jnp.maximum(t.obj_kind, 0)
    light = jnp.asarray(C.LIGHT)[kind]
    in_at = exists & (state.loc == at) & acc
    go = present_recs(t.rec_count) & (jnp.arange(C.R) != at)
    rk = jnp.asarray(C.REC_KIND)[ac]
    prop = jnp.asarray(C.PROPS)[kind[hs]]
    trans = jnp.stack([rk == C.HEATER, rk == C.COOLER, rk == C.CLEANER]) & prop[:3] & here & holding
    tv = jnp.argmax(trans)                                      # at most one appliance applies
    verb_r = jnp.where(openable & state.opened[ac], 3, 2)      # close if open, else open
    take = in_at & ~light & ~holding
    visible = held | in_at
    r2 = jnp.asarray(self.adm_r2)[ac]
    per_obj = jnp.stack([jnp.asarray(self.adm_o)[0, g],
                         jnp.where(light, jnp.asarray(self.adm_o)[1, g], jnp.asarray(self.adm_o2)[0, g]),
                         jnp.broadcast_to(r2, g.shape)], 1).ravel()
    obj_mask = jnp.stack([visible, take | (in_at & light), take], 1).ravel()
    ids = jnp.concatenate([
        jnp.asarray([self.adm_head], jnp.int32), jnp.asarray(self.adm_r)[0],
        jnp.stack([jnp.asarray(self.adm_r)[1, ac], jnp.asarray(self.adm_r)[verb_r, ac]]), per_obj,
        jnp.stack([jnp.asarray(self.adm_o2)[1, g[hs]], r2, jnp.asarray(self.adm_o2)[2 + tv, g[hs]], r2]),
        jnp.asarray([self.adm_tail], jnp.int32)]).astype(jnp.int32)
    mask = jnp.concatenate([
        jnp.ones((1,), bool), go, jnp.stack([here, here & openable]), obj_mask,
        jnp.stack([holding & acc, holding & acc, jnp.any(trans), jnp.any(trans)]), jnp.ones((1,), bool)])
    return ids, mask

  def goal_ids(self, task: HouseTask) -> tuple[jax.Array, jax.Array]:
    """"\n\nYour task is to: put a clean mug in coffeemachine." (stages joined by " Then, ")."""
    stage = jnp.arange(self.ns)
    look = task.goal_family == C.LOOK
    goals = jnp.stack([jnp.full((self.ns,), self.then),
                       jnp.asarray(self.goal1)[task.goal_family, task.goal_obj],
                       jnp.asarray(self.goal2)[task.goal_rec]], axis=1).ravel()
    gm = jnp.stack([stage > 0, jnp.ones((self.ns,), bool), ~look], axis=1).ravel()
    return (jnp.concatenate([jnp.asarray([self.task_line], jnp.int32), goals]),
            jnp.concatenate([jnp.ones((1,), bool), gm]))

  def room_ids(self, task: HouseTask) -> tuple[jax.Array, jax.Array]:
    """"\n\nIn the room, you see a cabinet 1, ..., and a garbagecan 1." (the room overview)."""
    groups, gmask = self._groups(task.rec_count)
    return (jnp.concatenate([jnp.asarray([self.room], jnp.int32), groups]),
            jnp.concatenate([jnp.ones((1,), bool), gmask]))

  def reset_ids(self, task: HouseTask) -> tuple[jax.Array, jax.Array]:
    """Welcome text, room overview, goal line, then the skill texts if the task is flagged."""
    groups, gmask = self._groups(task.rec_count)
    goals, gm = self.goal_ids(task)
    skills = jnp.asarray(self.skill)[task.goal_family]
    ids = jnp.concatenate([jnp.asarray([self.welcome], jnp.int32), groups, goals, skills])
    mask = jnp.concatenate([jnp.ones((1,), bool), gmask, gm, jnp.broadcast_to(task.skill, (self.ns,))])
    return ids, mask

  def privileged_ids(self, task: HouseTask) -> tuple[jax.Array, jax.Array]:
    """Where every goal object starts: "The mug 1 is in cabinet 3." per goal-kind object."""
    goal = jnp.any(task.obj_kind[:, None] == task.goal_obj[None, :], axis=1) & (task.obj_kind >= 0)
    first = jnp.cumsum(goal) == 1
    g = jnp.maximum(global_ids(task), 0)
    p1 = jnp.asarray(self.priv1)[jnp.where(first, 0, 1), g]
    p2 = jnp.asarray(self.priv2)[task.obj_loc]
    return jnp.stack([p1, p2], axis=1).ravel(), jnp.stack([goal, goal], axis=1).ravel()

  def render(self, ids, mask, out_len: int) -> Text:
    """Text of pieces `ids [S]` (masked slots dropped) in `[out_len]` tokens (render.compact's
    rule: the S pieces' token rows are gathered once, each position finds its slot by counting
    slot ends <= position, then reads one token of that row). `out_len` is the observation
    shape's tight bound, which is what keeps the O(out_len * S) count small."""
    m = self.table.tokens.shape[1]
    ids = jnp.asarray(ids, jnp.int32)
    toks = jnp.asarray(self.table.tokens)[ids]                                        # [S, M]
    lens = jnp.where(mask, jnp.asarray(self.table.lengths)[ids], 0)
    ends = jnp.cumsum(lens)
    pos = jnp.arange(out_len, dtype=jnp.int32)
    row = jnp.minimum(jnp.sum(ends[None, :] <= pos[:, None], axis=1, dtype=jnp.int32), ids.shape[0] - 1)
    col = jnp.clip(pos - (ends - lens)[row], 0, m - 1)
    n = jnp.minimum(ends[-1], out_len)
    return Text(tokens=jnp.where(pos < n, toks[row, col], self.table.pad_id), length=n)

  def host_text(self, ids, mask) -> str:
    return "".join(self.pieces[int(i)] for i, m in zip(np.asarray(ids), np.asarray(mask)) if m)
