"""CalcMath word problems: a chain of arithmetic events over one entity's count of an item.

A problem is a start value and `steps` events, each one arithmetic operation on the running
count, rendered from small template vocabularies (names, items, one sentence per operation):

    "Ana has 412 coins. Then Ana gets 97 more. Then Ana shares them equally among 3
     friends and keeps one share. How many coins does Ana have now?"

The gold solution is one calculator call per event, `<running value> <op> <operand>`
("412 + 97", "509 / ..."), whose values are the gold intermediate values; the last is the
answer. Every intermediate value is an integer in [0, max_value] (subtraction never goes
below 0, division only by a divisor, multiplication only while the product fits), so the
problems are solvable exactly and the calculator (arith.py, 2**30 bound) never overflows on
the gold path. Difficulty is the operand size: each task draws its digit count `digits` in
[min_digits, max_digits] for the start value and the add/sub operands (mul/div factors stay
in [2, max_factor], as "3 times as many" and "among 4 friends" read naturally): 1-digit
problems of 2 steps are mental arithmetic, 5-digit problems of 4 steps need the tool
(the GSM8K-with-tools setting of CLEANER, Xu et al. 2026, arXiv:2601.15141, shrunk to
synthetic templates).

`sample(u, cfg)` maps one uniform draw to a task (pure JAX, one example); the host side
(`gold_steps`, `problem_text`) gives the reference strings. Tests replay the same draw in
plain Python (tests/envs/calc_math/reference.py).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana")
ITEMS = ("apples", "coins", "stamps", "marbles", "books", "shells", "cards", "beads")
ADD, SUB, MUL, DIV = range(4)
OP_SYMBOLS = ("+", "-", "*", "/")
# Each event sentence is "<pre>{name}<mid>{operand}<post>" (name and operand as pieces).
OP_TEXT = ((" Then ", " gets ", " more."),
           (" Then ", " gives away ", "."),
           (" Then ", " ends up with ", " times as many."),
           (" Then ", " shares them equally among ", " friends and keeps one share."))
QUESTION = (" How many ", " does ", " have now?")


@struct.dataclass
class CalcTask:
  """One problem. name, item, start, num_steps, digits: int32 scalars; ops: [S] int32 in
  {ADD, SUB, MUL, DIV}; operands: [S] int32; values: [S] int32 gold running value after each
  event (S = max_steps; entries >= num_steps are 0); answer: int32 = values[num_steps - 1]."""
  name: jax.Array
  item: jax.Array
  start: jax.Array
  num_steps: jax.Array
  digits: jax.Array
  ops: jax.Array
  operands: jax.Array
  values: jax.Array
  answer: jax.Array


@dataclasses.dataclass(frozen=True)
class ProblemConfig:
  """Generator sizes (validated by the env)."""
  min_steps: int = 2
  max_steps: int = 4
  min_digits: int = 1
  max_digits: int = 3
  max_factor: int = 9
  max_value: int = 999_999_999

  def draws(self) -> int:
    """Uniforms one task consumes: name, item, steps, digits, start, then 2 per event."""
    return 5 + 2 * self.max_steps


def uniform_int(x, lo, size):
  """An int in [lo, lo + size) from x ~ U[0, 1) (size >= 1)."""
  return lo + jnp.minimum(jnp.floor(x * size).astype(jnp.int32), jnp.maximum(size, 1) - 1)


def _pick(x, allowed):
  """Index of the r-th True in `allowed [K]` for r uniform in [0, sum) (0 if none)."""
  r = uniform_int(x, 0, jnp.maximum(jnp.sum(allowed), 1))
  return jnp.argmax(jnp.cumsum(allowed) > r).astype(jnp.int32)


def sample(u: jax.Array, cfg: ProblemConfig) -> CalcTask:
  """u: [cfg.draws()] f32 in [0, 1) -> CalcTask (one example)."""
  s = cfg.max_steps
  name = uniform_int(u[0], 0, len(NAMES))
  item = uniform_int(u[1], 0, len(ITEMS))
  num_steps = uniform_int(u[2], cfg.min_steps, cfg.max_steps - cfg.min_steps + 1)
  digits = uniform_int(u[3], cfg.min_digits, cfg.max_digits - cfg.min_digits + 1)
  top = jnp.asarray([10 ** d - 1 for d in range(10)], jnp.int32)[digits]   # largest d-digit int
  lo = jnp.asarray([0] + [10 ** (d - 1) for d in range(1, 10)], jnp.int32)[digits]
  start = uniform_int(u[4], jnp.maximum(lo, 1), top - jnp.maximum(lo, 1) + 1)
  factors = jnp.arange(2, cfg.max_factor + 1, dtype=jnp.int32)
  v = start
  ops, operands, values = [], [], []
  for k in range(s):
    u_op, u_arg = u[5 + 2 * k], u[6 + 2 * k]
    divides = (v % factors == 0) & (v > 0)
    fits = (v > 0) & (factors <= cfg.max_value // jnp.maximum(v, 1))
    allowed = jnp.stack([v < cfg.max_value, v >= 1, jnp.any(fits), jnp.any(divides)])
    op = _pick(u_op, allowed)
    add_arg = uniform_int(u_arg, 1, jnp.minimum(top, cfg.max_value - v))
    sub_arg = uniform_int(u_arg, 1, jnp.minimum(top, v))
    mul_arg = factors[_pick(u_arg, fits)]
    div_arg = factors[_pick(u_arg, divides)]
    arg = jnp.stack([add_arg, sub_arg, mul_arg, div_arg])[op]
    new = jnp.stack([v + arg, v - arg, v * arg, v // jnp.maximum(arg, 1)])[op]
    live = k < num_steps
    ops.append(jnp.where(live, op, 0))
    operands.append(jnp.where(live, arg, 0))
    values.append(jnp.where(live, new, 0))
    v = jnp.where(live, new, v)
  i32 = lambda x: jnp.asarray(x, jnp.int32)
  return CalcTask(name=i32(name), item=i32(item), start=i32(start), num_steps=i32(num_steps),
                  digits=i32(digits), ops=i32(jnp.stack(ops)), operands=i32(jnp.stack(operands)),
                  values=i32(jnp.stack(values)), answer=i32(v))


# -- host side -----------------------------------------------------------------------------------
def _host(task: CalcTask) -> dict:
  t = jax.device_get(task)
  n = int(t.num_steps)
  return dict(name=NAMES[int(t.name)], item=ITEMS[int(t.item)], start=int(t.start), n=n,
              ops=[int(x) for x in np.asarray(t.ops)[:n]],
              operands=[int(x) for x in np.asarray(t.operands)[:n]],
              values=[int(x) for x in np.asarray(t.values)[:n]])


def gold_steps(task: CalcTask) -> list[str]:
  """The gold calculator expressions, one per event: "412 + 97", "509 - 12", ..."""
  h = _host(task)
  prev = [h["start"]] + h["values"][:-1]
  return [f"{a} {OP_SYMBOLS[op]} {b}" for a, op, b in zip(prev, h["ops"], h["operands"])]


def problem_text(task: CalcTask) -> str:
  """The problem as the env renders it (decode(reset obs) == this)."""
  h = _host(task)
  out = f"{h['name']} has {h['start']} {h['item']}."
  for op, b in zip(h["ops"], h["operands"]):
    pre, mid, post = OP_TEXT[op]
    out += f"{pre}{h['name']}{mid}{b}{post}"
  q0, q1, q2 = QUESTION
  return out + f"{q0}{h['item']}{q1}{h['name']}{q2}"
