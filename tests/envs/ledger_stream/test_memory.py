"""Memory CRUD (memory.py) against the plain-Python reference (reference.memory_call):
explicit cases for every error, then hypothesis-fuzzed operation strings and raw bytes."""

import jax
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from agent_rl.envs.ledger_stream import memory as M
from agent_rl.envs.tools import errors as E
from ledger_stream import reference as R

NAMES = ("alice", "bob", "carol", "dave", "erin", "frank")
S, OPS, B = 3, 4, 112


@jax.jit
def run(name, balance, arg, n):
  ops = M.parse_ops(arg, n, tuple(x.encode() for x in NAMES), S, OPS)
  bank, err, applied = M.apply_ops(M.MemoryBank(name=name, balance=balance), ops)
  return bank.name, bank.balance, err, applied


def check(bank, arg: bytes):
  """JAX vs reference on one (bank, argument); returns the reference's error."""
  arg = arg[:B]
  names = np.array([-1 if s is None else s[0] for s in bank], np.int32)
  bals = np.array([0 if s is None else s[1] for s in bank], np.int32)
  buf = np.zeros((B,), np.uint8)
  buf[:len(arg)] = np.frombuffer(arg, np.uint8)
  got = jax.tree.map(np.asarray, run(names, bals, buf, np.int32(len(arg))))
  want, err, applied = R.memory_call(bank, arg, NAMES, OPS)
  got_bank = [None if n < 0 else (int(n), int(b)) for n, b in zip(got[0], got[1])]
  assert got_bank == want, (arg, bank, got_bank, want)
  assert (int(got[2]), int(got[3])) == (err, applied), (arg, bank, got[2:], (err, applied))
  return err


EMPTY = [None] * S


def test_crud_cases():
  full = [(0, 10), (1, 20), (2, 30)]
  cases = [
      (EMPTY, b"add alice 120", E.OK), (EMPTY, b"add 2: bob 5", E.OK),
      (EMPTY, b"ADD   Carol\t7 || add dave 0 || noop", E.OK),
      (full, b"update 3: erin 40 || delete 1", E.OK),
      (full, b"add alice 1", M.FULL), (full, b"add 2 bob 1", M.SLOT_USED),
      (EMPTY, b"update 1 alice 3", M.SLOT_EMPTY), (EMPTY, b"delete 2", M.SLOT_EMPTY),
      (EMPTY, b"delete 4", M.NO_SLOT), (EMPTY, b"add 0: alice 3", M.NO_SLOT),
      (EMPTY, b"add zed 3", M.UNKNOWN_NAME), (EMPTY, b"add alice -3", M.BAD_AMOUNT),
      (EMPTY, b"add alice lots", M.BAD_AMOUNT), (EMPTY, b"insert alice 3", M.UNKNOWN_OP),
      (EMPTY, b"add alice", M.BAD_ARGS), (EMPTY, b"delete", M.BAD_ARGS),
      (EMPTY, b"noop 3", M.BAD_ARGS), (EMPTY, b"update x alice 3", M.BAD_ARGS),
      (EMPTY, b"noop || noop || noop || noop || noop", M.TOO_MANY),
      (EMPTY, b"add alice 1 || || add bob 2", M.UNKNOWN_OP),
      (EMPTY, b"add alice 1 || add bob 2 || add carol 3 || add dave 4", M.FULL),
      (EMPTY, b"add 1 alice " + b"9" * 40, M.BAD_ARGS),
  ]
  for bank, arg, err in cases:
    assert check(bank, arg) == err, arg


WORDS = st.sampled_from(["add", "update", "delete", "noop", "Add", "UPDATE", "del", "", "x"])
NAME = st.sampled_from(list(NAMES) + ["Alice", "zed", "alicee", "a" * 14])
NUM = st.one_of(st.integers(-5, 5), st.integers(0, 10 ** 10), st.just("+3"), st.just("1e3"),
                st.just("007"))
SEP = st.sampled_from([" ", ": ", ":", "  ", "\t", "\n"])


@st.composite
def op_text(draw):
  parts = [draw(WORDS)]
  for kind in draw(st.lists(st.sampled_from(["num", "name"]), max_size=4)):
    parts.append(str(draw(NUM)) if kind == "num" else draw(NAME))
  return "".join(p + draw(SEP) for p in parts).strip(" ")


@st.composite
def call_text(draw):
  ops = draw(st.lists(op_text(), min_size=1, max_size=6))
  return draw(st.sampled_from([" || ", "||", " ||", "|| "])).join(ops).encode()


BANK = st.lists(st.one_of(st.none(), st.tuples(st.integers(0, len(NAMES) - 1),
                                               st.integers(0, 500))), min_size=S, max_size=S)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(BANK, call_text())
def test_fuzzed_ops_match_reference(bank, arg):
  check(bank, arg)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(BANK, st.binary(max_size=B))
def test_fuzzed_bytes_match_reference(bank, arg):
  check(bank, arg)
