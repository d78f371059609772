"""agent_rl.envs.arith (in-JAX expression evaluator) against the Fraction reference."""
import random
from fractions import Fraction

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import arith_reference as ref
from agent_rl.envs import arith

L = 64
M = 6


B = 128  # every evaluation runs in [B, L] chunks, so the module compiles the evaluator once


def _pad(raws, length=L, rows=None):
  rows = len(raws) if rows is None else rows
  data = np.zeros((rows, length), np.int32)
  lens = np.zeros((rows,), np.int32)
  for k, r in enumerate(raws):
    data[k, :len(r)] = list(r)
    lens[k] = len(r)
  return jnp.asarray(data), jnp.asarray(lens)


@jax.jit
@chex.assert_max_traces(n=1)  # every test in the module shares this one trace
def _batch_eval(data, lens):
  return jax.vmap(lambda d, n: arith.evaluate(d, n, max_literals=M))(data, lens)


def _eval_all(raws):
  chunks = []
  for i in range(0, len(raws), B):
    chunks.append(jax.device_get(_batch_eval(*_pad(raws[i:i + B], rows=B))))
  out = jax.tree.map(lambda *x: np.concatenate(x), *chunks)
  return jax.tree.map(lambda x: x[:len(raws)], out)


def _check_against_reference(raws):
  out = _eval_all(raws)
  for k, raw in enumerate(raws):
    code, value, lits = ref.evaluate(raw)
    assert int(out.code[k]) == code, (raw, int(out.code[k]), code)
    if code != ref.SYNTAX:
      assert int(out.n_literals[k]) == len(lits), raw
    if code == ref.OK:
      assert Fraction(int(out.num[k]), int(out.den[k])) == value, raw
      assert int(out.den[k]) > 0 and np.gcd(int(out.num[k]), int(out.den[k])) == 1, raw
      assert list(out.literals[k, :min(M, len(lits))]) == lits[:M], raw
  return out


@pytest.mark.parametrize("text,code,value", [
    ("1+2*3", arith.OK, 7), ("(1+2)*3", arith.OK, 9), ("8/(3-8/3)", arith.OK, 24),
    ("7/2/3", arith.OK, Fraction(7, 6)), ("-3+5+7", arith.OK, 9), ("2*-3", arith.OK, -6),
    ("2--3", arith.OK, 5), ("+4", arith.OK, 4), (" ( 12 ) ", arith.OK, 12),
    ("10 × 3 ÷ 4 − 1", arith.OK, Fraction(13, 2)), ("((((((((9))))))))", arith.OK, 9),
    ("1/0", arith.DIV_ZERO, None), ("5/(3-3)*0", arith.DIV_ZERO, None), ("0/0", arith.DIV_ZERO, None),
    ("32768*32768", arith.OVERFLOW, None), ("32767*32768", arith.OK, 32767 * 32768),
    ("1073741824", arith.OVERFLOW, None), ("1073741823", arith.OK, 2 ** 30 - 1),
    ("", arith.SYNTAX, None), ("  ", arith.SYNTAX, None), ("3 4", arith.SYNTAX, None),
    ("2**3", arith.SYNTAX, None), ("4//2", arith.SYNTAX, None), ("1+2=3", arith.SYNTAX, None),
    ("1.5", arith.SYNTAX, None), ("(1+2", arith.SYNTAX, None), ("1+2)", arith.SYNTAX, None),
    ("()", arith.SYNTAX, None), ("3(4)", arith.SYNTAX, None), ("1/0+)", arith.SYNTAX, None),
    ("x", arith.SYNTAX, None), ("1+", arith.SYNTAX, None), ("*2", arith.SYNTAX, None),
])
def test_known_expressions(text, code, value):
  raw = text.encode()
  assert ref.evaluate(raw)[0] == code  # the reference agrees with the hand-written table
  out = _check_against_reference([raw])
  if code == arith.OK:
    assert Fraction(int(out.num[0]), int(out.den[0])) == value


def _random_expr(rng: random.Random, depth: int) -> str:
  if depth == 0 or rng.random() < 0.25:
    x = rng.choice([0, 1, 2, 3, 7, 12, 25, 50, 99, 100, 999, 32768, 123456, 2 ** 30 + 5])
    s = str(x) if rng.random() < 0.95 else "0" + str(x)
  else:
    kind = rng.random()
    if kind < 0.12:
      s = rng.choice(["-", "+", "−", "- "]) + _random_expr(rng, depth - 1)
    elif kind < 0.3:
      s = "(" + _random_expr(rng, depth - 1) + ")"
    else:
      op = rng.choice(["+", "-", "*", "/", "×", "÷", "−"])
      s = _random_expr(rng, depth - 1) + op + _random_expr(rng, depth - 1)
  pad = lambda: rng.choice(["", "", " ", "\t", "\n", "  "])
  return pad() + s + pad()


def _mutate(rng: random.Random, raw: bytes) -> bytes:
  b = bytearray(raw)
  for _ in range(rng.randint(1, 3)):
    r = rng.random()
    i = rng.randrange(len(b) + 1)
    if r < 0.4 and b:
      del b[min(i, len(b) - 1)]
    elif r < 0.8:
      b.insert(i, rng.choice(b"()+-*/ 0123456789x=.\xc3"))
    elif b:
      j = rng.randrange(len(b))
      b[min(i, len(b) - 1)], b[j] = b[j], b[min(i, len(b) - 1)]
  return bytes(b)


def _corpus(seed, n, mutate):
  rng = random.Random(seed)
  out = []
  while len(out) < n:
    raw = _random_expr(rng, rng.randint(1, 5)).encode()
    if mutate:
      raw = _mutate(rng, raw)
    if len(raw) <= L:
      out.append(raw)
  return out


def test_random_wellformed_expressions_match_reference():
  raws = _corpus(0, 1500, mutate=False)
  out = _check_against_reference(raws)
  codes = np.asarray(out.code)
  # The corpus exercises every outcome.
  assert {int(c) for c in codes} == {arith.OK, arith.DIV_ZERO, arith.OVERFLOW}
  assert (codes == arith.OK).mean() > 0.3


def test_mutated_expressions_match_reference():
  out = _check_against_reference(_corpus(1, 1500, mutate=True))
  assert (np.asarray(out.code) == arith.SYNTAX).mean() > 0.3


def test_deep_parentheses():
  raws = [b"(" * d + b"7" + b")" * d for d in range(0, 31, 5)]
  raws += [b"(" * d + b"7" + b")" * (d - 1) for d in range(1, 31, 6)]
  raws += [b"-(" * 10 + b"1+2" + b")" * 10, b"((((1+2)*(3+4))/((5-6)))-((7)))"]
  out = _check_against_reference(raws)
  assert int(out.code[0]) == arith.OK and int(out.code[-1]) == arith.OK


def test_length_bounds_the_text():
  data, lens = _pad([b"12+3 garbage"], rows=B)
  out = _batch_eval(data, lens.at[0].set(4))
  assert int(out.code[0]) == arith.OK and int(out.num[0]) == 15


_literals_ok = jax.jit(arith.literals_ok, static_argnums=3)

_ALPHABET = list(b"0123456789+-*/() \t\nx.=") + [0xC3, 0x97, 0xB7, 0xE2, 0x88, 0x92, 0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_ALPHABET), max_size=L))
def test_fuzzed_bytes_never_crash_and_only_wellformed_are_valid(byte_list):
  _check_against_reference([bytes(byte_list)])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=0, max_size=8), st.lists(st.integers(1, 9), min_size=1, max_size=5),
       st.booleans())
def test_literals_ok_matches_multiset_reference(lits, numbers, use_all):
  raw = "+".join(map(str, lits)).encode() or b"0"
  lits = lits or [0]
  res = jax.tree.map(lambda x: jnp.asarray(x[0]), _eval_all([raw]))
  padded = jnp.asarray(numbers + [0] * (5 - len(numbers)), jnp.int32)
  got = _literals_ok(res, padded, jnp.int32(len(numbers)), use_all)
  assert bool(got) == ref.uses_allowed(lits, numbers, use_all)


def test_no_retracing_under_jit_and_batching():
  # _batch_eval raises on a second trace; new contents and lengths must reuse the first.
  for seed in range(3):
    _eval_all(_corpus(seed, 4, mutate=seed == 2))
