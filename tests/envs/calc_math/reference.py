"""Plain-Python CalcMath, written from the docstrings of agent_rl/envs/calc_math: the problem
generator replayed on the same uniform draws, gold steps evaluated with fractions, and the
expected outcome of one turn (tag rule, calculator, answer)."""
from fractions import Fraction

import numpy as np

import arith_reference as ar

NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana")
ITEMS = ("apples", "coins", "stamps", "marbles", "books", "shells", "cards", "beads")


def uniform_int(x, lo, size):
  size = max(size, 1)
  return lo + min(int(np.floor(np.float32(x) * np.float32(size))), size - 1)


def pick(x, allowed):
  """Index of the r-th allowed entry, r uniform over the allowed count (0 if none)."""
  idx = [i for i, a in enumerate(allowed) if a]
  if not idx:
    return 0
  return idx[uniform_int(x, 0, len(idx))]


def sample(u, min_steps, max_steps, min_digits, max_digits, max_factor, max_value):
  """The generator's rule on draws u -> dict(name, item, start, digits, ops, operands, values)."""
  u = [float(x) for x in u]
  name, item = uniform_int(u[0], 0, 8), uniform_int(u[1], 0, 8)
  n = uniform_int(u[2], min_steps, max_steps - min_steps + 1)
  digits = uniform_int(u[3], min_digits, max_digits - min_digits + 1)
  top, lo = 10 ** digits - 1, max(10 ** (digits - 1), 1)
  start = uniform_int(u[4], lo, top - lo + 1)
  factors = list(range(2, max_factor + 1))
  v, ops, operands, values = start, [], [], []
  for k in range(n):
    uo, ua = u[5 + 2 * k], u[6 + 2 * k]
    divides = [v > 0 and v % f == 0 for f in factors]
    fits = [v > 0 and f * v <= max_value for f in factors]
    op = pick(uo, [v < max_value, v >= 1, any(fits), any(divides)])
    if op == 0:
      a = uniform_int(ua, 1, min(top, max_value - v)); v += a
    elif op == 1:
      a = uniform_int(ua, 1, min(top, v)); v -= a
    elif op == 2:
      a = factors[pick(ua, fits)]; v *= a
    else:
      a = factors[pick(ua, divides)]; assert v % a == 0; v //= a
    ops.append(op); operands.append(a); values.append(v)
  return dict(name=name, item=item, start=start, digits=digits, ops=ops, operands=operands,
              values=values, answer=v)


def gold_values(steps):
  """Each gold expression evaluated with fractions (the reference calculator)."""
  out = []
  for s in steps:
    code, value, _ = ar.evaluate(s.encode())
    assert code == ar.OK, s
    out.append(value)
  return out


def result_text(value: Fraction) -> str:
  return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def first_call(raw: bytes, tags=("calc", "answer")):
  """The tool layer's rule (its docstring): first open tag outside the first <think> block;
  -> (tag or None, stripped argument or None if unclosed)."""
  t0 = raw.find(b"<think>")
  t1 = raw.find(b"</think>", t0 + 7) + 8 if t0 >= 0 and raw.find(b"</think>", t0 + 7) >= 0 else t0
  best = None
  for tag in tags:
    i = raw.find(f"<{tag}>".encode())
    while i >= 0 and t0 >= 0 and t0 <= i < t1:
      i = raw.find(f"<{tag}>".encode(), i + 1)
    if i >= 0 and (best is None or i < best[1]):
      best = (tag, i)
  if best is None:
    return None, None
  tag, i = best
  start = i + len(tag) + 2
  j = raw.find(f"</{tag}>".encode(), start)
  return tag, (None if j < 0 else raw[start:j].strip(b" \t\n\r\x0b\x0c"))


def expected_turn(raw: bytes, answer: int, gold: list, max_arg: int):
  """-> dict(kind, outcome, value) for a live first turn with no faults:
  outcome in {invalid, tool_error, ok, success, wrong}."""
  tag, arg = first_call(raw)
  if tag is None or arg is None or len(arg) == 0 or len(arg) > max_arg:
    return dict(tag=tag, outcome="invalid", value=None)
  if tag == "answer":
    s = arg.decode("latin-1")
    body = s[1:] if s[:1] in "+-" else s
    if not (body.isdigit() and body.isascii() and 1 <= len(body) <= 9):
      return dict(tag=tag, outcome="invalid", value=None)
    return dict(tag=tag, outcome="success" if int(s) == answer else "wrong", value=int(s))
  code, value, _ = ar.evaluate(arg)
  if code != ar.OK:
    return dict(tag=tag, outcome="tool_error", value=code)
  return dict(tag=tag, outcome="ok", value=value, step_correct=value in [Fraction(g) for g in gold])
