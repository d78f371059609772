"""Plain-Python LedgerStream: stream replay, question answers, memory CRUD and answer grading.

Written from the rules in the env docstrings (ledger.py, memory.py, env.py) with dicts,
lists and `bytes.split`, independent of the JAX code; the tests compare the two.
"""
from __future__ import annotations

from agent_rl.envs.ledger_stream import ledger as L
from agent_rl.envs.ledger_stream import memory as M
from agent_rl.envs.tools import errors as E


def replay(events, num_accounts: int, unit: int | None = None) -> list[dict]:
  """Accounts in opening order: {name, balance, live, first}. With `unit`, also checks that
  the stream is valid (AssertionError naming the event otherwise)."""
  accts: list[dict] = []
  used_names: set[int] = set()
  for i, (kind, a, b, x) in enumerate(events):
    live = {acc["name"]: acc for acc in accts if acc["live"]}
    if kind == L.OPEN:
      assert len(accts) < num_accounts and a not in used_names, (i, "open")
      accts.append(dict(name=a, balance=x, live=True, first=a))
      used_names.add(a)
      if unit:
        assert x > 0 and x % unit == 0, (i, "open amount")
      continue
    assert a in live, (i, "unknown account", a)
    acc = live[a]
    if kind == L.DEPOSIT:
      acc["balance"] += x
    elif kind == L.WITHDRAW:
      assert 0 < x <= acc["balance"], (i, "overdraw")
      acc["balance"] -= x
    elif kind == L.TRANSFER:
      assert b in live and b != a and 0 < x <= acc["balance"], (i, "transfer")
      acc["balance"] -= x
      live[b]["balance"] += x
    elif kind == L.RENAME:
      assert b not in used_names, (i, "rename to a used name")
      acc["name"] = b
      used_names.add(b)
    elif kind == L.CLOSE:
      assert len(live) >= 2, (i, "close the last account")
      acc["live"] = False
    else:
      raise AssertionError((i, "event type", kind))
    if unit and kind in (L.DEPOSIT, L.WITHDRAW, L.TRANSFER):
      assert x > 0 and x % unit == 0, (i, "amount")
  return accts


def answer(accts: list[dict], qtype: str, subject: int):
  """('int', value) or ('names', set of accepted name ids)."""
  live = [a for a in accts if a["live"]]
  if qtype == "balance":
    return "int", sum(a["balance"] for a in live if a["name"] == subject)
  if qtype == "largest":
    top = max(a["balance"] for a in live)
    return "names", {a["name"] for a in live if a["balance"] == top}
  if qtype == "count":
    return "int", len(live)
  if qtype == "current_name":
    return "names", {a["name"] for a in live if a["first"] == subject}
  if qtype == "total":
    return "int", sum(a["balance"] for a in live)
  raise KeyError(qtype)


def grade(arg: bytes, gold, names: tuple[str, ...]) -> bool:
  """An answer argument (already stripped) against a gold answer."""
  text = arg.lower().decode("latin-1")
  if gold[0] == "names":
    return text in names and names.index(text) in gold[1]
  return _int(text) == gold[1]


def _int(word: str):
  """`[+-]?[0-9]{1,9}` -> int, else None (byte_scan.parse_ints' rule)."""
  body = word[1:] if word[:1] in ("+", "-") else word
  if not (1 <= len(body) <= 9) or not all("0" <= c <= "9" for c in body):
    return None
  return -int(body) if word[:1] == "-" else int(body)


def parse_op(seg: bytes, names: tuple[str, ...], num_slots: int):
  """(op word, slot or None (first free), name id, amount, error) of one stripped segment."""
  if not seg:
    return None, None, None, None, M.UNKNOWN_OP
  too_long = len(seg) > M.OP_BYTES
  words = seg[:M.OP_BYTES].replace(b":", b" ").split()
  op = words[0].lower().decode("latin-1") if words else ""
  if op not in ("add", "update", "delete", "noop"):
    return None, None, None, None, M.UNKNOWN_OP
  n = len(words)
  shapes = {"add": (3, 4), "update": (4,), "delete": (2,), "noop": (1,)}
  if too_long or n not in shapes[op]:
    return op, None, None, None, M.BAD_ARGS
  if op == "noop":
    return op, None, None, None, E.OK
  slot = None
  rest = words[1:]
  if not (op == "add" and n == 3):
    slot = _int(rest[0].decode("latin-1")) if len(rest[0]) <= M.WORD_BYTES else None
    if slot is None:
      return op, None, None, None, M.BAD_ARGS
    if not 1 <= slot <= num_slots:
      return op, None, None, None, M.NO_SLOT
    rest = rest[1:]
  if op == "delete":
    return op, slot - 1, None, None, E.OK
  name = rest[0].lower().decode("latin-1")
  if len(rest[0]) > M.WORD_BYTES or name not in names:
    return op, None, None, None, M.UNKNOWN_NAME
  amount = _int(rest[1].decode("latin-1")) if len(rest[1]) <= M.WORD_BYTES else None
  if amount is None or amount < 0:
    return op, None, None, None, M.BAD_AMOUNT
  return op, None if slot is None else slot - 1, names.index(name), amount, E.OK


def memory_call(bank: list, arg: bytes, names: tuple[str, ...], max_ops: int):
  """(bank', first error, applied) of one call's argument; bank = list of (name, balance) or None."""
  bank = list(bank)
  segs = [s.strip() for s in _split_bars(arg)]
  first, applied = E.OK, 0
  for seg in segs[:max_ops]:
    op, slot, name, amount, err = parse_op(seg, names, len(bank))
    if err == E.OK and op == "add":
      if slot is None:
        if None not in bank:
          err = M.FULL
        else:
          slot = bank.index(None)
      elif bank[slot] is not None:
        err = M.SLOT_USED
    elif err == E.OK and op in ("update", "delete") and bank[slot] is None:
      err = M.SLOT_EMPTY
    if err != E.OK:
      first = err if first == E.OK else first
      continue
    applied += 1
    if op in ("add", "update"):
      bank[slot] = (name, amount)
    elif op == "delete":
      bank[slot] = None
  if first == E.OK and len(segs) > max_ops:
    first = M.TOO_MANY
  return bank, first, applied


def _split_bars(arg: bytes) -> list[bytes]:
  """`bytes.split(b"||")` (non-overlapping, left to right)."""
  return arg.split(b"||")
