"""TextHouse action parsing: a grammar transducer over bytes, lifted once to a token automaton.

Rule (actions.py's with max_actions=1): the turn's bytes contain `<answer>`, then later
`</answer>`; the content between the first `<answer>` and the first `</answer>` after it has at
most `max_answer_bytes` bytes; its first "||"-separated segment (later ones are dropped, as
RAGEN does), stripped of ASCII whitespace and ASCII-lower-cased, equals an action string of
catalog.all_actions() ("take mug 1 from cabinet 3"). Token ids outside the vocabulary make
the turn invalid. Nothing raises in jitted code; acts on one example.

Why not `ActionParser` with ~6,000 words: its automaton's states are word prefixes (~10^4
here). The action language is a product (head, argument, preposition, argument), so this
module's byte automaton has one name trie per argument position (~800 states) and *emits* each
field into a register as it completes (`reg = ((head * 4 + prep) * NA + arg1) * NA + arg2`,
an addition per transition, as token_parse.py does for word digits). Heads and arguments are
matched independently, so e.g. "open mug 1" passes the automaton; a signature table over
(head, prep, arg kinds) then decides validity and the (verb, object, receptacle) triple.
Tokens are grouped by their effect on every state, so a turn costs one table look-up per
token. Vocabularies too large for the lifted tables fall back to the byte path (the same
automaton over the turn's bytes; `scan_bytes`), with identical results.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Digest, Text, TokenizerLike, digest
from agent_rl.envs.byte_scan import ByteTable
from agent_rl.envs.texthouse import catalog as C

OPEN_TAG, CLOSE_TAG = b"<answer>", b"</answer>"
_WS = (32, 9, 10, 13, 11, 12)
NA = C.G + C.R + 1                       # argument codes: 0 none, 1 + object, 1 + G + receptacle
FAIL, OK = 0, 1


class _Automaton:
  """Byte transducer tables `nxt, emit, grow [S, 256] int32` (grow: content bytes read)."""

  def __init__(self):
    self.edges: list[dict[int, tuple[int, int]]] = []    # per state: byte -> (state, emit)
    self.fail, self.ok = self.new(), self.new()
    self.seek = [self.new() for _ in OPEN_TAG]
    self.close = [self.new() for _ in CLOSE_TAG[1:]]      # close[i]: i + 1 tag bytes matched
    self.start, self.trail, self.done0 = self.new(), self.new(), self.new()
    self.arg1, self.after1, self.after1_sp = self.new(), self.new(), self.new()
    self.arg2, self.after2 = self.new(), self.new()
    self.pipe, self.skip = self.new(), self.new()          # one '|' seen; past the first "||"
    self.sclose = [self.new() for _ in CLOSE_TAG[1:]]      # close-tag prefix seen while skipping
    self.accepting = {self.done0, self.after1, self.after1_sp, self.after2, self.trail}
    mf, mp = 4 * NA * NA, NA * NA
    heads = [(h.encode() if h in ("look", "inventory") else (h + " ").encode(),
              self.done0 if h in ("look", "inventory") else self.arg1, f * mf)
             for f, h in enumerate(C.HEADS)]
    self.trie(self.start, heads)
    names = ([(n.encode(), 1 + o) for o, n in enumerate(C.OBJ_NAMES)]
             + [(n.encode(), 1 + C.G + r) for r, n in enumerate(C.REC_NAMES)])
    self.trie(self.arg1, [(w, self.after1, code * NA) for w, code in names])
    self.trie(self.after1_sp, [((p + " ").encode(), self.arg2, (i + 1) * mp)
                               for i, p in enumerate(C.PREPS)])
    self.trie(self.arg2, [(w, self.after2, code) for w, code in names])
    self.content = set(range(self.start, len(self.edges))) - {self.pipe, self.skip, *self.sclose}
    self.tables()

  def new(self) -> int:
    self.edges.append({})
    return len(self.edges) - 1

  def trie(self, root: int, words):
    """Adds (bytes, final state, emission) words below `root`; the last byte emits."""
    ws = [w for w, _, _ in words]
    for w in ws:
      if any(v != w and v.startswith(w) for v in ws):
        raise ValueError(f"action grammar words must be prefix-free; {w!r} is a prefix")
    nodes = {b"": root}
    for w, final, emit in words:
      for i in range(1, len(w) + 1):
        parent = nodes[w[:i - 1]]
        if i == len(w):
          self.edges[parent][w[i - 1]] = (final, emit)
        elif w[:i] not in nodes:
          nodes[w[:i]] = self.new()
          self.edges[parent][w[i - 1]] = (nodes[w[:i]], 0)

  def tables(self):
    s = len(self.edges)
    nxt = np.full((s, 256), self.fail, np.int32)
    emit = np.zeros((s, 256), np.int32)
    grow = np.zeros((s, 256), np.int32)
    nxt[self.ok] = self.ok
    for i, st in enumerate(self.seek):                    # KMP on "<answer>" ('<' occurs once)
      nxt[st] = self.seek[0]
      nxt[st, ord("<")] = self.seek[1]
      nxt[st, OPEN_TAG[i]] = self.seek[i + 1] if i + 1 < len(OPEN_TAG) else self.start
    for i, st in enumerate(self.close):
      nxt[st, CLOSE_TAG[i + 1]] = self.close[i + 1] if i + 2 < len(CLOSE_TAG) else self.ok
    for st in self.content:
      grow[st] = 1
      for x in range(256):
        lx = x + 32 if 65 <= x <= 90 else x
        if x == ord("<"):
          nxt[st, x] = self.close[0] if st in self.accepting else self.fail
          grow[st, x] = 0
        elif x == ord("|") and st in self.accepting:
          nxt[st, x] = self.pipe
        elif lx in self.edges[st]:
          nxt[st, x], emit[st, x] = self.edges[st][lx]
        elif x in _WS and st == self.start:
          nxt[st, x] = self.start
        elif x in _WS and st in self.accepting:
          nxt[st, x] = self.after1_sp if (st == self.after1 and x == 32) else self.trail
    # After the first "||" anything but the closing tag is dropped content: bytes count +1,
    # a partial tag that breaks off falls back (KMP, '<' occurs once in the tag) and the
    # tag's completing byte takes its 8 counted bytes back (-8), so grow stays the length.
    grow[self.pipe] = grow[self.skip] = 1
    nxt[self.pipe, ord("|")] = self.skip
    nxt[self.skip] = self.skip
    nxt[self.skip, ord("<")] = self.sclose[0]
    for i, st in enumerate(self.sclose):
      grow[st] = 1
      nxt[st] = self.skip
      nxt[st, ord("<")] = self.sclose[0]
      last = i + 2 == len(CLOSE_TAG)
      nxt[st, CLOSE_TAG[i + 1]] = self.ok if last else self.sclose[i + 1]
      grow[st, CLOSE_TAG[i + 1]] = 1 - len(CLOSE_TAG) if last else 1
    self.nxt, self.emit, self.grow = nxt, emit, grow


def _signatures() -> np.ndarray:
  """`[heads, 4, 3, 3] int32`: verb for (head, prep, arg1 kind, arg2 kind), -1 = no such verb."""
  kinds = {None: 0, "o": 1, "r": 2}
  sig = np.full((len(C.HEADS), 4, 3, 3), -1, np.int32)
  for v, (head, a1, prep, a2) in enumerate(C.VERBS):
    sig[C.HEADS.index(head), 0 if prep is None else C.PREPS.index(prep) + 1, kinds[a1], kinds[a2]] = v
  return sig


class HouseParser(Digest):
  """`parser(action: Text) -> (verb, obj, rec, valid)` int32 x 3 + bool (verb -1 if invalid)."""

  def __init__(self, tokenizer: TokenizerLike, *, max_answer_bytes: int = 64,
               max_table_entries: int = 1 << 26):
    self.auto = _Automaton()
    self.bytes = ByteTable(tokenizer)
    self.max_answer_bytes = int(max_answer_bytes)
    self.sig = _signatures()
    self.vocab = self.bytes.table.shape[0]
    s, (v, k) = len(self.auto.edges), self.bytes.table.shape
    self.lifted = s * v * k <= max_table_entries
    if self.lifted:
      self._lift()
    self._digest = digest(self.bytes._digest, self.max_answer_bytes, self.lifted)

  def _lift(self):
    """Token effects on every state, grouped into classes: `nxt, emit, grow [S, classes]`."""
    a, table, lengths = self.auto, self.bytes.table, self.bytes.lengths
    s = len(a.edges)
    st = np.broadcast_to(np.arange(s, dtype=np.int32)[:, None], (s, self.vocab)).copy()
    em = np.zeros_like(st)
    gr = np.zeros_like(st)
    for j in range(table.shape[1]):
      live = (j < lengths)[None, :]
      b = np.broadcast_to(table[:, j][None, :], st.shape)
      em += np.where(live, a.emit[st, b], 0)
      gr += np.where(live, a.grow[st, b], 0)
      st = np.where(live, a.nxt[st, b], st)
    ident = np.arange(s, dtype=np.int32)[:, None]
    fail = np.full((s, 1), a.fail, np.int32)
    zero = np.zeros((s, 1), np.int32)
    # Classes 0 = identity (padding past `length`), 1 = fail (out-of-range ids), then tokens.
    key = np.concatenate([np.concatenate([ident, fail, st], 1), np.concatenate([zero, zero, em], 1),
                          np.concatenate([zero, zero, gr], 1)], axis=0)
    _, first, inverse = np.unique(key.T, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)                           # keep identity / fail as classes 0 / 1
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    inverse = rank[np.ravel(inverse)]
    cols = np.sort(first)
    self.classes = inverse[2:].astype(np.int32)         # [V]
    self.num_classes = len(cols)
    self.c_nxt = np.ascontiguousarray(key[:s, cols]).astype(np.int32)
    self.c_emit = np.ascontiguousarray(key[s:2 * s, cols]).astype(np.int32)
    self.c_grow = np.ascontiguousarray(key[2 * s:, cols]).astype(np.int32)

  def _decode(self, state, reg, n):
    a2, a1 = reg % NA, (reg // NA) % NA
    p, f = (reg // (NA * NA)) % 4, jnp.minimum(reg // (4 * NA * NA), len(C.HEADS) - 1)
    k1 = jnp.where(a1 == 0, 0, jnp.where(a1 <= C.G, 1, 2))
    k2 = jnp.where(a2 == 0, 0, jnp.where(a2 <= C.G, 1, 2))
    verb = jnp.asarray(self.sig)[f, p, k1, k2]
    valid = (state == OK) & (n <= self.max_answer_bytes) & (verb >= 0)
    obj = jnp.where(k1 == 1, a1 - 1, 0)
    rec = jnp.where(k1 == 2, a1 - 1 - C.G, jnp.where(k2 == 2, a2 - 1 - C.G, 0))
    z = jnp.int32(0)
    return (jnp.where(valid, verb, -1).astype(jnp.int32), jnp.where(valid, obj, z).astype(jnp.int32),
            jnp.where(valid, rec, z).astype(jnp.int32), valid)

  def __call__(self, action: Text):
    if not self.lifted:
      return self.scan_bytes(action)
    toks = jnp.asarray(action.tokens, jnp.int32)
    inside = (toks >= 0) & (toks < self.vocab)
    cls = jnp.where(inside, jnp.asarray(self.classes)[jnp.clip(toks, 0, self.vocab - 1)], 1)
    cls = jnp.where(jnp.arange(toks.shape[-1]) < action.length, cls, 0)
    nc = self.num_classes
    nxt, emit, grow = (jnp.asarray(x.ravel()) for x in (self.c_nxt, self.c_emit, self.c_grow))

    def one(carry, c):
      s, reg, n = carry
      i = s * nc + c
      return (nxt[i], reg + emit[i], n + grow[i]), None

    start = jnp.int32(self.auto.seek[0])
    (s, reg, n), _ = jax.lax.scan(one, (start, jnp.int32(0), jnp.int32(0)), cls)
    return self._decode(s, reg, n)

  def scan_bytes(self, action: Text):
    """The same automaton over the turn's bytes (any vocabulary size; slower)."""
    toks = jnp.asarray(action.tokens, jnp.int32)
    bad = jnp.any(((toks < 0) | (toks >= self.vocab)) & (jnp.arange(toks.shape[-1]) < action.length))
    b, nb = self.bytes.text_bytes(Text(tokens=jnp.clip(toks, 0, self.vocab - 1), length=action.length))
    a = self.auto
    nxt, emit, grow = (jnp.asarray(x.ravel()) for x in (a.nxt, a.emit, a.grow))
    live = jnp.arange(b.shape[0]) < nb

    def one(carry, xs):
      s, reg, n = carry
      x, on = xs
      i = s * 256 + x.astype(jnp.int32)
      return (jnp.where(on, nxt[i], s), reg + jnp.where(on, emit[i], 0),
              n + jnp.where(on, grow[i], 0)), None

    (s, reg, n), _ = jax.lax.scan(one, (jnp.int32(a.seek[0]), jnp.int32(0), jnp.int32(0)), (b, live))
    return self._decode(jnp.where(bad, FAIL, s), reg, n)
