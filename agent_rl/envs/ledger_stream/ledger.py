"""LedgerStream's world: a stream of account events, the ledger it leaves, and QA over it.

UMA's Ledger-QA setting (ictnlp/unified-memory-agent; shared/ALGORITHMS.md §4.2): a long
stream of bank events is read chunk by chunk; the questions come after the stream.

Accounts k = 0..A-1 are opened in order; account k is first named `perm[k]` (a random
permutation of the name pool) and a rename takes the next unused pool name `perm[A + r]`, so
no name is ever reused and every name in the text denotes one account. Events `[E, 4] int32`
rows `(type, a, b, amount)` (a, b name ids, -1 unused):

    open a x        account a opens with balance x          deposit a x     balance += x
    withdraw a x    balance -= x (x <= balance)             transfer a b x  a -= x, b += x
    rename a b      the account named a is named b now      close a         the account ends

Amounts are multiples of `unit`; at least one account stays open (close needs two), so
"largest balance" is always defined. The stream is drawn by a `lax.scan` that masks event
types to the valid ones (deposit needs an open account, ...) before sampling, so every stream
is valid by construction (checked against a plain-Python replay in the tests).

Questions `[Q, 2] int32` rows `(type, subject name id or -1)`; types in `QUESTIONS` (a
registry: name -> text pieces and answer rule), answered against the final `Ledger`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

OPEN, DEPOSIT, WITHDRAW, TRANSFER, RENAME, CLOSE = range(6)
EVENT_WORDS = ("open", "deposit", "withdraw", "transfer", "rename", "close")
NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
         "mallory", "nina", "oscar", "peggy", "quinn", "rupert", "sybil", "trent", "ursula",
         "victor", "wendy", "xavier", "yvonne", "zoe")
UNOPENED, LIVE, CLOSED = 0, 1, 2


@struct.dataclass
class Ledger:
  """Accounts `[A]`: current `name` id, `balance` int32, `status` (UNOPENED/LIVE/CLOSED),
  `first` name id at opening; `renames` int32 pool names used by renames so far."""
  name: jax.Array
  balance: jax.Array
  status: jax.Array
  first: jax.Array
  renames: jax.Array


@struct.dataclass
class Answer:
  """A question's gold answer: `is_name` bool; `value` int32 (numeric answers); `accept [P]`
  bool (name answers: every name that is correct, e.g. all holders of a tied maximum)."""
  is_name: jax.Array
  value: jax.Array
  accept: jax.Array


@dataclasses.dataclass(frozen=True)
class QuestionType:
  """text: pieces of the question, `None` marks where the subject's name goes; answer:
  `(ledger, subject, num_names) -> Answer`; subject: which accounts may be asked about
  ("" none, "name" a live account's current name, "first" a live account's first name)."""
  text: tuple
  answer: Callable
  subject: str


def _live(led: Ledger) -> jax.Array:
  return led.status == LIVE


def _name_answer(led: Ledger, mask: jax.Array, num_names: int) -> Answer:
  accept = jnp.any((led.name[:, None] == jnp.arange(num_names)[None, :]) & mask[:, None], axis=0)
  return Answer(is_name=jnp.bool_(True), value=jnp.int32(0), accept=accept)


def _int_answer(value, num_names: int) -> Answer:
  return Answer(is_name=jnp.bool_(False), value=jnp.asarray(value, jnp.int32),
                accept=jnp.zeros((num_names,), bool))


def _balance(led, subject, p):
  return _int_answer(jnp.sum(jnp.where(_live(led) & (led.name == subject), led.balance, 0)), p)


def _largest(led, subject, p):
  top = jnp.max(jnp.where(_live(led), led.balance, -1))
  return _name_answer(led, _live(led) & (led.balance == top), p)


def _count(led, subject, p):
  return _int_answer(jnp.sum(_live(led)), p)


def _current_name(led, subject, p):
  return _name_answer(led, _live(led) & (led.first == subject), p)


def _total(led, subject, p):
  return _int_answer(jnp.sum(jnp.where(_live(led), led.balance, 0)), p)


QUESTIONS = {
    "balance": QuestionType(("What is the balance of ", None, "?"), _balance, "name"),
    "largest": QuestionType(("Who holds the largest balance?",), _largest, ""),
    "count": QuestionType(("How many accounts are open?",), _count, ""),
    "current_name": QuestionType(("What is the current name of the account opened as ", None,
                                  "?"), _current_name, "first"),
    "total": QuestionType(("What is the total balance of all open accounts?",), _total, ""),
}


def empty_ledger(num_accounts: int) -> Ledger:
  z = jnp.zeros((num_accounts,), jnp.int32)
  return Ledger(name=z - 1, balance=z, status=z, first=z - 1, renames=jnp.int32(0))


def apply_event(led: Ledger, event: jax.Array) -> Ledger:
  """The ledger after one event row `(type, a, b, amount)` (a padding row, type -1, is a no-op)."""
  kind, a, b, x = event[0], event[1], event[2], event[3]
  live = _live(led)
  at_a = live & (led.name == a)
  at_b = live & (led.name == b)
  k_new = jnp.sum(led.status != UNOPENED)
  opening = (kind == OPEN) & (jnp.arange(led.name.shape[0]) == k_new)
  delta = jnp.where(at_a & ((kind == OPEN) | (kind == DEPOSIT)), x, 0)
  delta -= jnp.where(at_a & ((kind == WITHDRAW) | (kind == TRANSFER)), x, 0)
  delta += jnp.where(at_b & (kind == TRANSFER), x, 0)
  renamed = at_a & (kind == RENAME)
  return Ledger(
      name=jnp.where(opening, a, jnp.where(renamed, b, led.name)),
      balance=jnp.where(opening, x, led.balance + delta),
      status=jnp.where(opening, LIVE, jnp.where(at_a & (kind == CLOSE), CLOSED, led.status)),
      first=jnp.where(opening, a, led.first),
      renames=led.renames + (kind == RENAME).astype(jnp.int32))


def replay(events: jax.Array, num_accounts: int) -> Ledger:
  """The final ledger of a stream `[E, 4]` (one example)."""
  return jax.lax.scan(lambda led, e: (apply_event(led, e), None), empty_ledger(num_accounts),
                      events)[0]


def _pick(u, mask):
  """Index of the floor(u * count)-th True entry of `mask [n]` (uniform for u ~ U[0, 1);
  0 when none): one uniform per choice keeps the sampler to a single threefry call."""
  return _pick_weighted(u, mask.astype(jnp.float32))


def _pick_weighted(u, w):
  """Index i with probability w_i / sum(w) for u ~ U[0, 1) (inverse CDF; 0 when all w = 0)."""
  cum = jnp.cumsum(w)
  i = jnp.sum(cum <= u * cum[-1], dtype=jnp.int32)
  return jnp.where(cum[-1] > 0, jnp.minimum(i, w.shape[0] - 1), 0)


def sample_event(u: jax.Array, led: Ledger, perm: jax.Array, weights: jax.Array, unit: int,
                 max_units: int) -> jax.Array:
  """One valid event `(type, a, b, amount)` for the ledger from `u [4]` ~ U[0, 1): types
  drawn by `weights [6]` among those valid now (open needs an unopened account, withdraw a
  payer with at least one unit, transfer also a second live account, rename an unused pool
  name, close two live accounts)."""
  a_n = led.name.shape[0]
  live = _live(led)
  n_live = jnp.sum(live)
  payer = live & (led.balance >= unit)
  valid = jnp.stack([jnp.any(led.status == UNOPENED), n_live >= 1, jnp.any(payer),
                     jnp.any(payer) & (n_live >= 2),
                     (n_live >= 1) & (a_n + led.renames < perm.shape[0]), n_live >= 2])
  kind = _pick_weighted(u[0], jnp.where(valid, weights, 0.0))
  pays = (kind == WITHDRAW) | (kind == TRANSFER)
  src = _pick(u[1], jnp.where(pays, payer, live))
  dst = _pick(u[2], live & (jnp.arange(a_n) != src))
  cap = jnp.maximum(jnp.where(pays, jnp.minimum(led.balance[src] // unit, max_units), max_units), 1)
  units = jnp.minimum(1 + jnp.floor(u[3] * cap).astype(jnp.int32), cap)
  new_name = perm[jnp.minimum(a_n + led.renames, perm.shape[0] - 1)]
  k_new = jnp.sum(led.status != UNOPENED)
  a = jnp.where(kind == OPEN, perm[jnp.minimum(k_new, a_n - 1)], led.name[src])
  b = jnp.select([kind == TRANSFER, kind == RENAME], [led.name[dst], new_name], -1)
  x = jnp.where((kind == RENAME) | (kind == CLOSE), 0, units * unit)
  return jnp.stack([kind, a, b, x]).astype(jnp.int32)


def sample_stream(key: jax.Array, num_events: int, num_accounts: int, num_names: int,
                  weights: tuple, unit: int, max_units: int) -> tuple[jax.Array, Ledger]:
  """`(events [E, 4], final ledger)`: a random valid stream over the first num_names names
  (the name permutation is an argsort of uniforms)."""
  u = jax.random.uniform(key, (num_events * 4 + num_names,))
  perm = jnp.argsort(u[:num_names]).astype(jnp.int32)
  w = jnp.asarray(weights, jnp.float32)

  def body(led, ui):
    ev = sample_event(ui, led, perm, w, unit, max_units)
    return apply_event(led, ev), ev

  final, events = jax.lax.scan(body, empty_ledger(num_accounts),
                               u[num_names:].reshape(num_events, 4))
  return events, final


def sample_questions(key: jax.Array, led: Ledger, types: tuple[str, ...], num_questions: int):
  """`[Q, 2] int32` rows (index into `types`, subject name id or -1): types uniform, each
  question's subject a uniform live account (its current or first name, per the type)."""
  u = jax.random.uniform(key, (num_questions, 2))
  qt = jnp.minimum(jnp.floor(u[:, 0] * len(types)).astype(jnp.int32), len(types) - 1)
  acct = jax.vmap(lambda x: _pick(x, _live(led)))(u[:, 1])
  kind = jnp.asarray([("", "name", "first").index(QUESTIONS[t].subject) for t in types], jnp.int32)[qt]
  subject = jnp.select([kind == 1, kind == 2], [led.name[acct], led.first[acct]], -1)
  return jnp.stack([qt, subject], axis=1).astype(jnp.int32)


def answer(led: Ledger, question: jax.Array, types: tuple[str, ...], num_names: int) -> Answer:
  """The gold answer of one question row against the final ledger (a switch over `types`)."""
  branches = [lambda l, s, fn=QUESTIONS[t].answer: fn(l, s, num_names) for t in types]
  return jax.lax.switch(jnp.clip(question[0], 0, len(types) - 1), branches, led, question[1])
