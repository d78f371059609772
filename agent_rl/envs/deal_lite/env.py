"""DealLite: two-role Deal-or-No-Deal bargaining as a pure-JAX multi-agent text env.

Lewis et al. 2017 ("Deal or No Deal? End-to-End Learning for Negotiation Dialogues",
arXiv:1706.05125), reduced to its action protocol: no free-text dialogue, only offers. The
game (counts, private values, allocations, Nash/Pareto) is in game.py; the scripted
counterparts are in scripted.py. Multi-agent contract of issue 21: `roles`, `first_agent`,
`info["agent_id"]`, `info["next_agent"]`, `role_reward_terms`.

Turns alternate, alice (agent 0) first. A turn is the whole generated text, stripped of ASCII
whitespace at both ends, and must be exactly one of (tags lower case, whitespace inside the
offer free, at least one between numbers, each number 1-9 decimal digits):
  <offer> a b c </offer>  the acting role keeps a, b, c of the three types, the other role
                          gets the rest; invalid unless 0 <= a, b, c <= counts. Replaces any
                          standing offer.
  <accept>                accepts the other role's standing offer: the game ends in that deal
                          (invalid when the standing offer is none or the acting role's own)
  <walk>                  the game ends with no deal; both get 0
Anything else (malformed text, garbage bytes, a turn longer than `max_bytes` bytes) is an
invalid action: the acting role's invalid term fires (penalty `invalid_penalty`), the
standing offer is kept, and the turn passes to the other role. Every turn, valid or not,
counts against `max_turns` (base.step_limit); no deal by then: both get 0, `truncated`.
A step after the end is absorbing (all terms 0).

Reward terms (REWARD_NAMES), per step:
  reward/alice, reward/bob    the role's whole reward this step: its value of the deal / total
                              (in [0, 1], on the step the deal is made) + invalid_penalty when
                              it acted invalidly. `role_reward_terms` = these two.
  invalid/alice, invalid/bob  0/1: the role acted invalidly (for logging; weight 0)
The scalar reward (logging) weights them (1, 1, 0, 0) in self-play: the joint welfare.

`opponent="none"`: both roles are the policy. Otherwise the env plays bob itself with the
scripted bargainer of that name (scripted.BARGAINERS) inside `step`: a step is alice's turn
followed, unless the game ended, by bob's scripted reply; `agent_id` and `next_agent` are
always 0, `roles` still names both roles, bob's terms are still reported, and the scalar
reward weights (1, 0, 0, 0) (alice's own reward).

Observation (the next agent's view, private values only), e.g.
  "You are alice. Items: 1 4 2. Your values: 3 1 0. Their offer gives you: 1 2 0. Turns left: 5."
(" No offer." / " Your offer gives you: ..." when there is none / it is its own).
Info beyond the fixed keys: `next_agent`, `truncated`, `deal` (the episode has ended in
agreement), `pareto` (the deal is Pareto-optimal), `nash_gap` f32 `(P* - P) / P*` with P the
deal's Nash product u_a * u_b (0 without a deal, so 1.0 until a deal) and P* the task's max;
deal/pareto/nash_gap describe the episode's outcome so far, final on its last step.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import ENVS, Text, TokenizerLike, fingerprint, step_limit
from agent_rl.envs.byte_scan import ByteTable
from agent_rl.envs.deal_lite import game
from agent_rl.envs.deal_lite.game import ROLES, DealTask, GameTables
from agent_rl.envs.deal_lite.scripted import ACCEPT, BARGAINERS, INVALID, OFFER, WALK
from agent_rl.envs.render import PieceTable, int_pieces

REWARD_NAMES = ("reward/alice", "reward/bob", "invalid/alice", "invalid/bob")
_WS = (32, 9, 10, 13, 11, 12)   # what bytes.strip() strips
_ROLE_LINE = tuple(f"You are {r}." for r in ROLES)
_OFFER_HEAD = (" No offer.", " Their offer gives you:", " Your offer gives you:")


@struct.dataclass
class DealState:
  """task; turn: int32 turns taken (both roles); agent: int32 who acts next; alloc: [3] int32
  the standing offer as alice's items; offer_by: int32 who made it (-1 none); offers,
  invalid: [2] int32 valid offers / invalid actions per role; deal, walked, done: bool."""
  task: DealTask
  turn: jax.Array
  agent: jax.Array
  alloc: jax.Array
  offer_by: jax.Array
  offers: jax.Array
  invalid: jax.Array
  deal: jax.Array
  walked: jax.Array
  done: jax.Array


def _match(w: jax.Array, length: jax.Array, word: bytes) -> jax.Array:
  return (length == len(word)) & jnp.all(w[:len(word)] == jnp.asarray(list(word), jnp.uint8))


def parse_action(b: jax.Array, n: jax.Array, width: int) -> tuple[jax.Array, jax.Array]:
  """`(kind int32, keep [3] int32)` of a turn's bytes `b [M] uint8` (first n live).

  kind: scripted.OFFER / ACCEPT / WALK / INVALID (module docstring rule); keep: the offer's
  numbers as written (0 unless an offer). The stripped turn must fit `width` bytes.
  """
  m = b.shape[0]
  idx = jnp.arange(m, dtype=jnp.int32)
  solid = (idx < n) & ~jnp.isin(b, jnp.asarray(_WS, jnp.uint8))
  first = jnp.argmax(solid).astype(jnp.int32)
  last = (m - 1 - jnp.argmax(solid[::-1])).astype(jnp.int32)
  length = jnp.where(jnp.any(solid), last - first + 1, 0)
  pos = jnp.arange(width, dtype=jnp.int32)
  w = jnp.where(pos < length, b[jnp.clip(first + pos, 0, m - 1)], 0).astype(jnp.uint8)
  fits = length <= width
  accept, walk = fits & _match(w, length, b"<accept>"), fits & _match(w, length, b"<walk>")
  tail = w[jnp.clip(length - 8 + jnp.arange(8), 0, width - 1)]
  tags = (jnp.all(w[:7] == jnp.asarray(list(b"<offer>"), jnp.uint8))
          & jnp.all(tail == jnp.asarray(list(b"</offer>"), jnp.uint8)))
  inner = (pos >= 7) & (pos < length - 8)
  tok = inner & ~jnp.isin(w, jnp.asarray(_WS, jnp.uint8))
  digit = (w >= ord("0")) & (w <= ord("9"))
  start = tok & ~jnp.concatenate([jnp.zeros((1,), bool), tok[:-1]])
  run = jnp.cumsum(start) - 1
  keep, short = [], []
  for k in range(game.NUM_TYPES):
    in_k = tok & (run == k)
    end = jnp.max(jnp.where(in_k, pos, -1))
    expo = jnp.clip(end - pos, 0, 8)
    keep.append(jnp.sum(jnp.where(in_k & digit, (w.astype(jnp.int32) - ord("0")) * 10 ** expo, 0)))
    short.append(jnp.sum(in_k) <= 9)
  offer = (fits & (length >= 15) & tags & jnp.all(digit | ~tok) & (jnp.sum(start) == game.NUM_TYPES)
           & jnp.all(jnp.stack(short)))
  kind = jnp.where(accept, ACCEPT, jnp.where(walk, WALK, jnp.where(offer, OFFER, INVALID)))
  return kind.astype(jnp.int32), jnp.where(offer, jnp.stack(keep), 0).astype(jnp.int32)


@ENVS.register("deal_lite")
@dataclasses.dataclass(frozen=True)
class DealLite:
  """DealLite env (see the module docstring); tables are built from `tokenizer`."""
  tokenizer: TokenizerLike = dataclasses.field(compare=False, hash=False, repr=False)
  max_count: int = 4
  total: int = 10
  max_turns: int = 6
  opponent: str = "none"
  invalid_penalty: float = -0.1
  max_bytes: int = 256          # bytes of a turn read; a longer turn is invalid
  max_action_bytes: int = 64    # the stripped turn's width
  action_len: int | None = None  # tokens of the turn read (None: all the sampler generates)
  tables: GameTables = dataclasses.field(init=False, repr=False)
  pieces: PieceTable = dataclasses.field(init=False, repr=False)
  bytes_: ByteTable = dataclasses.field(init=False, repr=False)
  obs_len: int = dataclasses.field(init=False)

  roles = ROLES
  reward_names = REWARD_NAMES
  role_reward_terms = REWARD_NAMES[:2]
  plan_format = "{}"   # plan turns are whole turns (`<offer> .. </offer>`, `<accept>`)

  def __post_init__(self):
    kind = type(self).__name__
    if self.tokenizer is None:
      raise ValueError(f"{kind} needs tokenizer= (anything with encode/decode/pad_id/byte_table)")
    if not 1 <= self.max_count <= 9:
      raise ValueError(f"{kind}.max_count must lie in [1, 9], got {self.max_count}")
    if not 1 <= self.total <= 99:
      raise ValueError(f"{kind}.total must lie in [1, 99], got {self.total}")
    if not 2 <= self.max_turns <= 99:
      raise ValueError(f"{kind}.max_turns must lie in [2, 99], got {self.max_turns}")
    if self.opponent != "none" and self.opponent not in BARGAINERS:
      raise ValueError(f"{kind}.opponent must be 'none' or one of {BARGAINERS.names()}, got {self.opponent!r}")
    if self.max_action_bytes < 16 or self.max_bytes < self.max_action_bytes:
      raise ValueError(f"{kind} needs 16 <= max_action_bytes <= max_bytes, got "
                       f"max_action_bytes={self.max_action_bytes}, max_bytes={self.max_bytes}")
    if self.action_len is not None and self.action_len < 1:
      raise ValueError(f"{kind}.action_len must be >= 1 or None, got {self.action_len}")
    object.__setattr__(self, "tables", GameTables(self.max_count, self.total))
    digits = [str(d) for d in range(10)]
    table = PieceTable(self.tokenizer, list(_ROLE_LINE) + list(_OFFER_HEAD) + [
        " Items:", " Your values:", " Turns left:", " ", "."] + digits)
    object.__setattr__(self, "pieces", table)
    object.__setattr__(self, "bytes_", ByteTable(self.tokenizer))
    num = lambda nd: [[" "]] + [digits] * nd
    slots = ([list(_ROLE_LINE), [" Items:"]] + num(self._cd) * 3 + [["."], [" Your values:"]]
             + num(self._vd) * 3 + [["."], list(_OFFER_HEAD)] + num(self._cd) * 3 + [["."], [" Turns left:"]]
             + num(self._td) + [["."]])
    object.__setattr__(self, "obs_len", table.max_tokens(slots))

  # -- host side -----------------------------------------------------------------------------
  _cd = property(lambda self: len(str(self.max_count)))
  _vd = property(lambda self: len(str(self.total)))
  _td = property(lambda self: len(str(self.max_turns)))

  @property
  def instruction(self) -> str:
    return ("You are negotiating with another player how to divide a pool of items of three "
            "types. Each of you values the item types differently and only knows your own "
            f"values; all the items together are worth {self.total} to each of you. You take "
            "turns; on your turn write exactly one of: <offer> a b c </offer> (you keep a, b and "
            "c items of the three types, the other player gets the rest), <accept> (accept the "
            "other player's offer; the game ends with that deal), or <walk> (end the game with "
            f"no deal: both get 0). With no deal after {self.max_turns} turns in all, both get "
            "0. Your reward is the value of the items you get.")

  @property
  def reward_weights(self) -> tuple[float, ...]:
    return (1.0, 1.0, 0.0, 0.0) if self.opponent == "none" else (1.0, 0.0, 0.0, 0.0)

  def task_from_values(self, counts, values) -> DealTask:
    """An explicit task; ValueError naming the field when it does not fit this env."""
    c, v = np.asarray(counts, np.int64), np.asarray(values, np.int64)
    if c.shape != (game.NUM_TYPES,) or np.any(c < 1) or np.any(c > self.max_count):
      raise ValueError(f"counts must be 3 ints in [1, max_count={self.max_count}], got {counts}")
    if v.shape != (2, game.NUM_TYPES) or np.any(v < 0) or np.any(v @ c != self.total):
      raise ValueError(f"values must be [2, 3] ints >= 0 with values @ counts == total={self.total}, got {values}")
    return DealTask(counts=jnp.asarray(c, jnp.int32), values=jnp.asarray(v, jnp.int32))

  def render_text(self, state_or_task) -> str:
    """Host-side text of the observation of the agent to act (a task: the first one)."""
    if isinstance(state_or_task, DealTask):
      s = jax.device_get(self.reset(jax.random.key(0), state_or_task)[0])
    else:
      s = jax.device_get(state_or_task)
    r, c, v = int(s.agent), np.asarray(s.task.counts), np.asarray(s.task.values)
    nums = lambda xs: " ".join(str(int(x)) for x in xs)
    by = int(s.offer_by)
    if by < 0:
      offer = _OFFER_HEAD[0]
    else:
      mine = np.asarray(s.alloc) if r == 0 else c - np.asarray(s.alloc)
      offer = f"{_OFFER_HEAD[1 if by != r else 2]} {nums(mine)}."
    left = max(self.max_turns - int(s.turn), 0)
    return f"{_ROLE_LINE[r]} Items: {nums(c)}. Your values: {nums(v[r])}.{offer} Turns left: {left}."

  def solve(self, task: DealTask) -> list[str]:
    """The optimal plan. Self-play: alice offers the Nash allocation, bob accepts. Against a
    scripted bob (deterministic and stationary, so nothing later beats the first exchange):
    the better for alice of (a) the offer bob accepts that is best for alice (ties: larger
    u_b, then lexicographic) and (b) an offer keeping everything, which bob refuses with its
    counter-offer, then <accept> (only if strictly better and max_turns >= 3)."""
    c, v = np.asarray(task.counts), np.asarray(task.values)
    fmt = lambda keep: "<offer> " + " ".join(str(int(x)) for x in keep) + " </offer>"
    if self.opponent == "none":
      return [fmt(game.nash_allocation(c, v)), "<accept>"]
    bot = BARGAINERS.get(self.opponent)
    x, u = game._host_utils(c, v)
    ok = 100 * u[:, 1] >= bot.accept_pct * self.total
    best = np.lexsort((np.arange(len(x)), -u[:, 1], -np.where(ok, u[:, 0], -1)))[0]
    bob_keep = np.asarray(bot.offer(self.tables, task, 1, bot.accept_pct))
    counter = int((c - bob_keep) @ v[0])
    if self.max_turns >= 3 and counter > u[best, 0]:
      return [fmt(c), "<accept>"]
    return [fmt(x[best])]

  # -- jitted side ---------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> DealTask:
    return self.tables.sample(key)

  def first_agent(self, state: DealState) -> jax.Array:
    return state.agent

  def reset(self, key: jax.Array, task: DealTask) -> tuple[DealState, Text]:
    del key  # no randomness after the task
    z = jnp.int32(0)
    state = DealState(task=task, turn=z, agent=z, alloc=jnp.zeros((game.NUM_TYPES,), jnp.int32),
                      offer_by=jnp.int32(-1), offers=jnp.zeros((2,), jnp.int32),
                      invalid=jnp.zeros((2,), jnp.int32), deal=jnp.bool_(False),
                      walked=jnp.bool_(False), done=jnp.bool_(False))
    return state, self._render(state)

  def _turn(self, state: DealState, kind: jax.Array, keep: jax.Array):
    """state.agent's turn with a parsed action. Returns (state', terms [4], valid, deal, truncated)."""
    k, c, v, live = state.agent, state.task.counts, state.task.values, ~state.done
    offer_ok = (kind == OFFER) & jnp.all((keep >= 0) & (keep <= c))
    accept_ok = (kind == ACCEPT) & (state.offer_by == 1 - k)
    valid = live & (offer_ok | accept_ok | (kind == WALK))
    offered, deal, walked = live & offer_ok, live & accept_ok, live & (kind == WALK)
    me = jnp.arange(2) == k
    bad = live & ~valid & me                                                      # [2]
    alloc = jnp.where(offered, jnp.where(k == 0, keep, c - keep), state.alloc).astype(jnp.int32)
    turn, done, truncated = step_limit(state.turn, 1, live, deal | walked, state.done, self.max_turns)
    new = DealState(task=state.task, turn=turn, agent=jnp.where(live, 1 - k, k).astype(jnp.int32),
                    alloc=alloc, offer_by=jnp.where(offered, k, state.offer_by).astype(jnp.int32),
                    offers=state.offers + (offered & me), invalid=state.invalid + bad,
                    deal=state.deal | deal, walked=state.walked | walked, done=done)
    value = jnp.stack([alloc @ v[0], (c - alloc) @ v[1]]).astype(jnp.float32) / self.total
    terms = jnp.concatenate([jnp.where(deal, value, 0.0) + self.invalid_penalty * bad, bad])
    return new, terms.astype(jnp.float32), valid, deal, truncated

  def step(self, state: DealState, action: Text):
    toks = jnp.clip(jnp.asarray(action.tokens, jnp.int32), 0, self.bytes_.table.shape[0] - 1)
    lens = jnp.where(jnp.arange(toks.shape[-1]) < action.length, jnp.asarray(self.bytes_.lengths)[toks], 0)
    b, n = self.bytes_.text_bytes(action, self.max_bytes)
    kind, keep = parse_action(b, n, self.max_action_bytes)
    kind = jnp.where(jnp.sum(lens) > self.max_bytes, INVALID, kind)
    agent_id = state.agent
    new, terms, valid, deal, truncated = self._turn(state, kind, keep)
    if self.opponent != "none":   # bob's scripted reply (a no-op once the game has ended)
      bot = BARGAINERS.get(self.opponent)
      b_kind, b_keep = bot.act(self.tables, new.task, 1, new.offer_by, new.alloc, new.offers[1])
      new, b_terms, _, b_deal, b_trunc = self._turn(new, b_kind, b_keep)
      terms, deal, truncated = terms + b_terms, deal | b_deal, truncated | b_trunc
      new = new.replace(agent=jnp.int32(0))   # the policy (alice) is the only one who acts
    task = new.task
    c, v = task.counts, task.values
    product = (new.alloc @ v[0]) * ((c - new.alloc) @ v[1])
    best = self.tables.nash_max(task)
    gap = jnp.where(new.deal, (best - product) / jnp.maximum(best, 1), 1.0).astype(jnp.float32)
    info = dict(agent_id=agent_id.astype(jnp.int32), next_agent=new.agent,
                success=deal, valid_action=valid, state_hash=self.state_hash(new), reward_terms=terms,
                truncated=truncated, deal=new.deal, pareto=new.deal & self.tables.is_pareto(task, new.alloc),
                nash_gap=gap)
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    return new, self._render(new), reward, new.done, info

  def _render(self, state: DealState) -> Text:
    p, r = self.pieces.id, state.agent
    digit_ids = jnp.asarray([p(str(d)) for d in range(10)], jnp.int32)
    c, vals = state.task.counts, state.task.values[r]
    mine = jnp.where(r == 0, state.alloc, c - state.alloc)
    has = state.offer_by >= 0
    head = jnp.asarray([p(h) for h in _OFFER_HEAD], jnp.int32)[
        jnp.where(~has, 0, jnp.where(state.offer_by == r, 2, 1))]
    ids, mask = [], []

    def add(piece_ids, on=True):
      ids.append(jnp.atleast_1d(jnp.asarray(piece_ids, jnp.int32)))
      mask.append(jnp.broadcast_to(jnp.asarray(on), ids[-1].shape))

    def numbers(xs, nd, on=True):
      for j in range(game.NUM_TYPES):
        add(p(" "), on)
        d, m = int_pieces(xs[j], digit_ids, nd)
        add(d, m & on)

    add(jnp.asarray([p(x) for x in _ROLE_LINE], jnp.int32)[r])
    add(p(" Items:"))
    numbers(c, self._cd)
    add(p("."))
    add(p(" Your values:"))
    numbers(vals, self._vd)
    add(p("."))
    add(head)
    numbers(mine, self._cd, has)
    add(p("."), has)
    add(p(" Turns left:"))
    add(p(" "))
    d, m = int_pieces(jnp.maximum(self.max_turns - state.turn, 0), digit_ids, self._td)
    add(d, m)
    add(p("."))
    return self.pieces.render(jnp.concatenate(ids), self.obs_len, jnp.concatenate(mask))

  def state_hash(self, state: DealState) -> jax.Array:
    t = state.task
    return fingerprint(t.counts, t.values, state.turn, state.agent, state.alloc, state.offer_by,
                       state.offers, state.invalid, state.deal, state.walked, state.done)
