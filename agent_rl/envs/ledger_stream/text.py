"""LedgerStream observations, gathered from pre-tokenized pieces (agent_rl.envs.render).

Memory turn c (1-based, of C), after the previous call's result (the tool layer's message):

    <information>memory updated</information>          (or the error; nothing on turn 1)
    Chunk 2/4:
    deposit alice 30
    transfer alice bob 20
    Memory:
    1: alice 150
    2: (empty)

QA turn q (of Q): the final bank, the last `raw_window` events of the stream and question q
only (no earlier answer or feedback, so every QA turn is a function of (final bank, q)):

    Memory:
    1: alice 130
    2: bob 20
    Recent events:
    transfer alice bob 20
    Question 2/3: Who holds the largest balance?

Every observation is one fixed list of slots (piece ids + mask) whose parts (memory-turn
header and chunk, bank, QA window and question, end) are gated by the phase, so the bank is
built once and one compaction renders any phase. `obs_len` is the longest phase's sum over
its slots of the longest piece each slot may hold.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Digest, digest
from agent_rl.envs.ledger_stream import ledger as L
from agent_rl.envs.render import PieceTable, int_pieces

OK_MESSAGE = "memory updated"
FIXED = ("Chunk ", "/", ":\n", "\n", "Memory:\n", ": ", "(empty)", " ", "Recent events:\n",
         "Question ", "", "The stream has ended.\n")
EVENT_PIECES = tuple(w + " " for w in L.EVENT_WORDS)
DIGITS = tuple(str(d) for d in range(10))


class _Slots:
  """Accumulates slots `(ids, mask)` and the token bound of a layout while it is traced."""

  def __init__(self, table: PieceTable):
    self.table, self.ids, self.mask = table, [], []
    self.gate, self.part, self.bounds = jnp.bool_(True), "", {}

  def section(self, part: str, on) -> None:
    """Later slots belong to `part` (for the bounds) and show only where `on`."""
    self.part, self.gate = part, jnp.asarray(on, bool)

  def _grow(self, n: int) -> None:
    self.bounds[self.part] = self.bounds.get(self.part, 0) + n

  def add(self, ids, mask, cands) -> None:
    ids = jnp.atleast_1d(jnp.asarray(ids, jnp.int32))
    self.ids.append(ids)
    self.mask.append(jnp.broadcast_to(jnp.asarray(mask, bool), ids.shape) & self.gate)
    self._grow(ids.shape[0] * int(self.table.lengths[np.asarray(cands, np.int64)].max()))

  def rows(self, cols, r: int) -> None:
    """R rows of slots: `cols` = [(ids [R], mask [R] or bool, cands)], laid out row-major."""
    ids = jnp.stack([jnp.broadcast_to(jnp.asarray(i, jnp.int32), (r,)) for i, _, _ in cols], 1)
    mask = jnp.stack([jnp.broadcast_to(jnp.asarray(m, bool), (r,)) for _, m, _ in cols], 1)
    self.ids.append(ids.reshape(-1))
    self.mask.append(mask.reshape(-1) & self.gate)
    self._grow(r * sum(int(self.table.lengths[np.asarray(c, np.int64)].max()) for _, _, c in cols))

  def fixed(self, piece: str, on=True) -> None:
    pid = self.table.id(piece)
    self.add(pid, on, [pid])

  def done(self):
    return jnp.concatenate(self.ids), jnp.concatenate(self.mask)


class Layout(Digest):
  """The piece table and both observation layouts of one env configuration."""

  def __init__(self, tokenizer, fmt, num_names: int, num_slots: int, num_chunks: int,
               chunk_events: int, num_questions: int, raw_window: int, types: tuple[str, ...],
               amount_digits: int):
    self.fmt = fmt
    ok = f"{fmt.result_open}{OK_MESSAGE}{fmt.result_close}"
    q_pre = [L.QUESTIONS[t].text[0] for t in types]
    q_post = [L.QUESTIONS[t].text[2] if len(L.QUESTIONS[t].text) > 2 else "" for t in types]
    pieces = list(FIXED) + list(EVENT_PIECES) + list(L.NAMES[:num_names]) + list(DIGITS) + [ok]
    pieces += list(fmt.pieces.pieces) + q_pre + q_post
    self.table = PieceTable(tokenizer, list(dict.fromkeys(pieces)))
    t = self.table
    self.digit_ids = np.asarray([t.id(d) for d in DIGITS], np.int32)
    self.name_ids = np.asarray([t.id(n) for n in L.NAMES[:num_names]], np.int32)
    self.event_ids = np.asarray([t.id(e) for e in EVENT_PIECES], np.int32)
    self.q_pre = np.asarray([t.id(p) for p in q_pre], np.int32)
    self.q_post = np.asarray([t.id(p) for p in q_post], np.int32)
    self.q_subject = np.asarray([bool(L.QUESTIONS[x].subject) for x in types])
    self.ok_id = t.id(ok)
    # The tool layer's messages, by (error code, kind column), as rows of this table.
    self.message_ids = np.vectorize(lambda i: t.id(fmt.pieces.pieces[i]))(fmt.message_ids).astype(np.int32)
    self.sizes = (num_slots, num_chunks, chunk_events, num_questions, raw_window, amount_digits)
    self._digest = digest(t._digest, self.sizes, types)

  # -- pieces (rows of slots, vectorized over events / bank slots) ----------------------------
  def _digits(self, values, digits: int):
    """`(ids [R, digits], mask [R, digits])` of non-negative ints `values [R]`."""
    return jax.vmap(lambda v: int_pieces(v, self.digit_ids, digits))(values)

  def _names(self, names):
    return jnp.asarray(self.name_ids)[jnp.clip(names, 0, len(self.name_ids) - 1)], names >= 0

  def _events(self, b: _Slots, events) -> None:
    """One line per event row of `events [R, 4]`."""
    kind, a, nb, x = events[:, 0], events[:, 1], events[:, 2], events[:, 3]
    r = events.shape[0]
    two = (kind == L.TRANSFER) | (kind == L.RENAME)
    has_x = (kind == L.OPEN) | (kind == L.DEPOSIT) | (kind == L.WITHDRAW) | (kind == L.TRANSFER)
    na, ma = self._names(a)
    nbi, mb = self._names(nb)
    sp, nl = self.table.id(" "), self.table.id("\n")
    dx, mx = self._digits(x, self.sizes[5])
    full = lambda v: jnp.full((r,), v, jnp.int32)
    cols = [(jnp.asarray(self.event_ids)[jnp.clip(kind, 0, 5)], True, self.event_ids),
            (na, ma, self.name_ids), (full(sp), two, [sp]), (nbi, mb & two, self.name_ids),
            (full(sp), has_x, [sp])]
    cols += [(dx[:, j], mx[:, j] & has_x, self.digit_ids) for j in range(dx.shape[1])]
    cols += [(full(nl), True, [nl])]
    b.rows(cols, r)

  def _bank(self, b: _Slots, bank) -> None:
    b.fixed("Memory:\n")
    s_n = self.sizes[0]
    used = bank.name >= 0
    ds, ms = self._digits(jnp.arange(1, s_n + 1), len(str(s_n)))
    nm, _ = self._names(bank.name)
    bal, mbal = self._digits(bank.balance, 9)
    t = self.table
    full = lambda v: jnp.full((s_n,), t.id(v), jnp.int32)
    cols = [(ds[:, j], ms[:, j], self.digit_ids) for j in range(ds.shape[1])]
    cols += [(full(": "), True, [t.id(": ")]), (nm, used, self.name_ids),
             (full(" "), used, [t.id(" ")])]
    cols += [(bal[:, j], mbal[:, j] & used, self.digit_ids) for j in range(bal.shape[1])]
    cols += [(full("(empty)"), ~used, [t.id("(empty)")]), (full("\n"), True, [t.id("\n")])]
    b.rows(cols, s_n)

  def _number(self, b: _Slots, value, digits: int) -> None:
    ids, mask = int_pieces(value, self.digit_ids, digits)
    b.add(ids, mask, self.digit_ids)

  # -- the observation ----------------------------------------------------------------------
  def slots(self, events, bank, turn, feedback, error, kind, question, done) -> _Slots:
    """The observation's slots for a state: memory turn (feedback: 0 none, 1 ok, 2 the error
    message; chunk `turn`'s events; the bank), QA turn (the bank; the last events; question
    `turn - C` = `question (type, subject)`) or the end. One slot list for every phase, the
    parts gated by it, so the bank is built once and one compaction renders any phase."""
    s_n, c_n, e_c, q_n, w = self.sizes[:5]
    mem, qa = ~done & (turn < c_n), ~done & (turn >= c_n)
    b = _Slots(self.table)
    b.section("memory", mem)
    col = jnp.where(kind >= 0, kind, self.message_ids.shape[1] - 1)
    msg = jnp.asarray(self.message_ids)[jnp.clip(error, 0, self.message_ids.shape[0] - 1), col]
    b.add(jnp.where(feedback == 1, self.ok_id, msg), feedback > 0,
          np.concatenate([self.message_ids.ravel(), [self.ok_id]]))
    b.fixed("Chunk ")
    self._number(b, turn + 1, len(str(c_n)))
    b.fixed("/")
    self._number(b, c_n, len(str(c_n)))
    b.fixed(":\n")
    self._events(b, jax.lax.dynamic_slice_in_dim(events, jnp.clip(turn, 0, c_n - 1) * e_c, e_c))
    b.section("bank", ~done)
    self._bank(b, bank)
    b.section("qa", qa)
    if w:
      b.fixed("Recent events:\n")
      self._events(b, events[events.shape[0] - w:])
    b.fixed("Question ")
    self._number(b, jnp.clip(turn - c_n, 0, q_n - 1) + 1, len(str(q_n)))
    b.fixed("/")
    self._number(b, q_n, len(str(q_n)))
    b.fixed(": ")
    qt = jnp.clip(question[0], 0, len(self.q_pre) - 1)
    b.add(jnp.asarray(self.q_pre)[qt], True, self.q_pre)
    name, has = self._names(question[1])
    b.add(name, has & jnp.asarray(self.q_subject)[qt], self.name_ids)
    b.add(jnp.asarray(self.q_post)[qt], True, self.q_post)
    b.fixed("\n")
    b.section("end", done)
    b.fixed("The stream has ended.\n")
    return b

  def obs_len(self, events, bank, question) -> int:
    """Tokens of the longest phase (static: traced abstractly, nothing runs)."""
    out = {}

    def trace(events, bank, question):
      z = jnp.int32(0)
      out.update(self.slots(events, bank, z, z, z, z, question, jnp.bool_(False)).bounds)
      return z
    jax.eval_shape(trace, events, bank, question)
    return max(out["memory"] + out["bank"], out["bank"] + out["qa"], out["end"])

  def text(self, ids, mask) -> str:
    return "".join(self.table.pieces[int(i)] for i, m in zip(np.asarray(ids), np.asarray(mask)) if m)
