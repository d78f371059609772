"""In-JAX parser and exact-rational evaluator for arithmetic answers (Countdown).

Countdown (TinyZero, Pan et al. 2025; RAGEN, Wang et al. 2025, arXiv:2504.20073) scores an
arithmetic expression the policy wrote. Peers call Python `eval`; here the expression is
parsed and evaluated inside the compiled rollout, on the answer's bytes, by a shunting-yard
stack machine under one `lax.while_loop` (each iteration either consumes a byte or reduces
one operator, so at most `2 * L + 1` iterations for `L` bytes). It never raises.

Grammar (whitespace = space, tab, CR, LF anywhere between tokens):

    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/') unary)*
    unary  := ('+' | '-') unary | atom
    atom   := digits | '(' expr ')'

`×` (U+00D7), `÷` (U+00F7) and `−` (U+2212), as UTF-8, mean `*`, `/` and `-`. Anything else
(`**`, `//`, `=`, `.`, letters, an empty answer, unbalanced parentheses) is a syntax error.

Arithmetic is exact over rationals `num / den` kept in lowest terms with `den > 0`, in
int32 (x64 stays off). Every quantity must stay below `LIMIT = 2**30` in magnitude:
a literal, and for each operation on `a/b`, `c/d` the naive products (add/sub: `a*d`,
`c*b`, `b*d` and the sum; mul: `a*c`, `b*d`; div: `a*d`, `b*|c|`); otherwise `OVERFLOW`.
The products are checked exactly before they are formed (`|x| <= (LIMIT-1) // |y|`), so
int32 never wraps on a valid path. Division by a zero value is `DIV_ZERO`.
Error precedence: a syntax error wins; otherwise the first arithmetic error in
evaluation (post-)order is reported.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

LIMIT = 1 << 30

# Result codes.
OK, SYNTAX, DIV_ZERO, OVERFLOW = 0, 1, 2, 3
CODE_NAMES = ("ok", "syntax", "div_zero", "overflow")

# Byte classes.
_END, _DIGIT, _SPACE, _PLUS, _MINUS, _STAR, _SLASH, _LPAR, _RPAR, _OTHER = range(10)
# Operator-stack entries; precedence by index (unary binds tightest, '(' never reduces).
_OP_LPAR, _OP_ADD, _OP_SUB, _OP_MUL, _OP_DIV, _OP_NEG, _OP_POS = range(7)
_PREC = np.array([0, 1, 1, 2, 2, 3, 3], np.int32)


@struct.dataclass
class ArithResult:
  """Outcome of `evaluate`.

  code: int32 in {OK, SYNTAX, DIV_ZERO, OVERFLOW}; `num / den` (lowest terms, den > 0) is
  the value when code == OK. literals: [M] int32, the integer literals in textual order
  (first M; the rest dropped); n_literals: int32, how many literals the text has (may
  exceed M).
  """
  code: jax.Array
  num: jax.Array
  den: jax.Array
  literals: jax.Array
  n_literals: jax.Array


def normalize(data: jax.Array, length: jax.Array) -> jax.Array:
  """Maps UTF-8 `×`, `÷`, `−` to ASCII `*`, `/`, `-` (continuation bytes -> space) and
  zeroes bytes at positions >= length. data: [L] int -> [L] int32."""
  b = jnp.asarray(data, jnp.int32)
  n = b.shape[-1]
  b = jnp.where(jnp.arange(n) < length, b, 0)
  nxt1 = jnp.concatenate([b[1:], jnp.zeros((1,), jnp.int32)])
  nxt2 = jnp.concatenate([b[2:], jnp.zeros((2,), jnp.int32)])
  times = (b == 0xC3) & (nxt1 == 0x97)
  divide = (b == 0xC3) & (nxt1 == 0xB7)
  minus = (b == 0xE2) & (nxt1 == 0x88) & (nxt2 == 0x92)

  def shifted(mask, k):
    return jnp.concatenate([jnp.zeros((k,), bool), mask[:-k]])

  cont = shifted(times | divide | minus, 1) | shifted(minus, 2)
  out = jnp.where(times, ord("*"), jnp.where(divide, ord("/"), jnp.where(minus, ord("-"), b)))
  return jnp.where(cont, ord(" "), out)


def _class_table() -> np.ndarray:
  table = np.full((256,), _OTHER, np.int32)
  table[ord("0"):ord("9") + 1] = _DIGIT
  for ch, cls in ((" ", _SPACE), ("\t", _SPACE), ("\n", _SPACE), ("\r", _SPACE), ("+", _PLUS),
                  ("-", _MINUS), ("*", _STAR), ("/", _SLASH), ("(", _LPAR), (")", _RPAR)):
    table[ord(ch)] = cls
  return table


_CLASS_TABLE = _class_table()


def _classify(b: jax.Array, length: jax.Array) -> jax.Array:
  cls = jnp.asarray(_CLASS_TABLE)[jnp.clip(b, 0, 255)]
  # A trailing END sentinel so the loop can read position L.
  cls = jnp.where(jnp.arange(b.shape[-1]) < length, cls, _END)
  return jnp.concatenate([cls, jnp.array([_END], jnp.int32)])


def _safe_mul(x: jax.Array, y: jax.Array) -> jax.Array:
  """True iff |x * y| < LIMIT, decided without forming the product (|x|, |y| < LIMIT)."""
  ay = jnp.abs(y)
  return (ay == 0) | (jnp.abs(x) <= (LIMIT - 1) // jnp.maximum(ay, 1))


def _gcd(a: jax.Array, b: jax.Array) -> jax.Array:
  """Euclid on non-negative int32; gcd(0, b) = b."""
  def body(ab):
    x, y = ab
    return y, jnp.where(y == 0, 0, x % jnp.maximum(y, 1))

  g, _ = jax.lax.while_loop(lambda ab: ab[1] != 0, body, (a, b))
  return g


def _apply(op, a, b, c, d):
  """Binary `a/b op c/d` -> (num, den, error code), reduced. Garbage-free when code != OK."""
  is_add, is_sub, is_mul, is_div = op == _OP_ADD, op == _OP_SUB, op == _OP_MUL, op == _OP_DIV
  sc = jnp.where(is_sub, -c, c)
  # add/sub
  ovf_as = ~_safe_mul(a, d) | ~_safe_mul(sc, b) | ~_safe_mul(b, d)
  s = jnp.where(ovf_as, 0, a * d + sc * b)
  ovf_as = ovf_as | (jnp.abs(s) >= LIMIT)
  # mul
  ovf_m = ~_safe_mul(a, c) | ~_safe_mul(b, d)
  # div: a/b / c/d = (a*d*sign(c)) / (b*|c|)
  dz = c == 0
  ovf_d = ~_safe_mul(a, d) | ~_safe_mul(b, c)
  ovf = jnp.where(is_mul, ovf_m, jnp.where(is_div, ovf_d, ovf_as))
  num = jnp.where(is_mul, a * c, jnp.where(is_div, a * d * jnp.sign(c), s))
  den = jnp.where(is_mul | ~is_div, b * d, b * jnp.abs(c))
  code = jnp.where(is_div & dz, DIV_ZERO, jnp.where(ovf, OVERFLOW, OK))
  bad = code != OK
  num, den = jnp.where(bad, 0, num), jnp.where(bad, 1, den)
  g = jnp.maximum(_gcd(jnp.abs(num), den), 1)
  return num // g, den // g, code


def evaluate(data: jax.Array, length: jax.Array, max_literals: int = 8) -> ArithResult:
  """Parses and evaluates the expression in `data[:length]`.

  data: [L] bytes (any int dtype, values 0..255); length: int32 scalar; vmap for batches.
  """
  b = normalize(data, length)
  n = b.shape[-1]
  cls = _classify(b, length)
  digit = jnp.concatenate([jnp.clip(b - ord("0"), 0, 9), jnp.zeros((1,), jnp.int32)])
  cap = n + 1
  i32 = jnp.int32
  init = dict(
      pos=i32(0), acc=i32(0), in_num=jnp.bool_(False), expect=jnp.bool_(True),
      ops=jnp.zeros((cap,), i32), otop=i32(0),
      vnum=jnp.zeros((cap,), i32), vden=jnp.ones((cap,), i32), vtop=i32(0),
      lits=jnp.zeros((max_literals,), i32), nlit=i32(0),
      syn=jnp.bool_(False), arith=i32(OK), done=jnp.bool_(False), steps=i32(0))

  def cond(s):
    return ~s["done"] & ~s["syn"] & (s["steps"] < 2 * n + 2)

  def body(s):
    c = cls[s["pos"]]
    dg = digit[s["pos"]]
    is_digit = c == _DIGIT
    in_num, expect, otop, vtop = s["in_num"], s["expect"], s["otop"], s["vtop"]
    top = jnp.where(otop > 0, s["ops"][jnp.maximum(otop - 1, 0)], -1)
    top_is_op = (otop > 0) & (top != _OP_LPAR)

    acc_digit = in_num & is_digit
    finish_num = in_num & ~is_digit
    rest = ~in_num & (c != _SPACE)
    skip = ~in_num & (c == _SPACE)
    eo = rest & expect
    start_num = eo & is_digit
    push_lpar = eo & (c == _LPAR)
    push_unary = eo & ((c == _PLUS) | (c == _MINUS))
    oo = rest & ~expect
    binary = (c == _PLUS) | (c == _MINUS) | (c == _STAR) | (c == _SLASH)
    bin_op = jnp.select([c == _PLUS, c == _MINUS, c == _STAR], [_OP_ADD, _OP_SUB, _OP_MUL], _OP_DIV)
    prec = jnp.asarray(_PREC)
    top_prec = prec[jnp.clip(top, 0, 6)]
    reduce = oo & top_is_op & ((binary & (top_prec >= prec[bin_op])) | (c == _RPAR) | (c == _END))
    push_bin = oo & binary & ~reduce
    pop_lpar = oo & (c == _RPAR) & (otop > 0) & (top == _OP_LPAR)
    finish = oo & (c == _END) & (otop == 0)
    syn_err = ((eo & ~(start_num | push_lpar | push_unary))
               | (oo & ~(reduce | push_bin | pop_lpar | finish)))

    # Digits: literal overflow is an arithmetic error (first one in post-order wins).
    acc = s["acc"]
    lit_ovf = acc_digit & (acc > (LIMIT - 1 - dg) // 10)
    new_acc = jnp.where(start_num, dg, jnp.where(acc_digit & ~lit_ovf, acc * 10 + dg, acc))

    # Reduce one operator: unary acts on the top value, binary on the top two.
    unary = (top == _OP_NEG) | (top == _OP_POS)
    ia, ib = jnp.maximum(vtop - 2, 0), jnp.maximum(vtop - 1, 0)
    use = reduce & ~unary
    x_n, x_d = jnp.where(use, s["vnum"][ia], 0), jnp.where(use, s["vden"][ia], 1)
    y_n, y_d = jnp.where(use, s["vnum"][ib], 0), jnp.where(use, s["vden"][ib], 1)
    r_n, r_d, r_code = _apply(jnp.where(use, top, _OP_ADD), x_n, x_d, y_n, y_d)
    un_n = jnp.where(top == _OP_NEG, -s["vnum"][ib], s["vnum"][ib])

    new_err = jnp.where(lit_ovf, OVERFLOW, jnp.where(use, r_code, OK))
    arith = jnp.where(s["arith"] == OK, new_err, s["arith"])

    # Value stack writes: literal push at vtop, binary result at vtop-2, unary at vtop-1.
    w_idx = jnp.where(finish_num, vtop, jnp.where(unary, ib, ia))
    w_en = finish_num | reduce
    w_n = jnp.where(finish_num, acc, jnp.where(unary, un_n, r_n))
    w_d = jnp.where(finish_num, 1, jnp.where(unary, s["vden"][ib], r_d))
    vnum = s["vnum"].at[w_idx].set(jnp.where(w_en, w_n, s["vnum"][w_idx]))
    vden = s["vden"].at[w_idx].set(jnp.where(w_en, w_d, s["vden"][w_idx]))
    vtop = vtop + finish_num.astype(i32) - use.astype(i32)

    push = push_lpar | push_unary | push_bin
    p_op = jnp.where(push_lpar, _OP_LPAR, jnp.where(push_unary, jnp.where(c == _MINUS, _OP_NEG, _OP_POS),
                                                   bin_op))
    ops = s["ops"].at[otop].set(jnp.where(push, p_op, s["ops"][otop]))
    otop = otop + push.astype(i32) - (reduce | pop_lpar).astype(i32)

    li = jnp.minimum(s["nlit"], max_literals - 1)
    keep = finish_num & (s["nlit"] < max_literals)
    lits = s["lits"].at[li].set(jnp.where(keep, acc, s["lits"][li]))

    advance = acc_digit | skip | start_num | push_lpar | push_unary | push_bin | pop_lpar
    return dict(
        pos=jnp.minimum(s["pos"] + advance.astype(i32), n), acc=new_acc,
        in_num=(in_num & is_digit) | start_num,
        expect=jnp.where(finish_num, False, jnp.where(push, True, expect)),
        ops=ops, otop=otop, vnum=vnum, vden=vden, vtop=vtop, lits=lits,
        nlit=s["nlit"] + finish_num.astype(i32), syn=s["syn"] | syn_err, arith=arith,
        done=finish, steps=s["steps"] + 1)

  s = jax.lax.while_loop(cond, body, init)
  syntax = s["syn"] | ~s["done"]
  code = jnp.where(syntax, SYNTAX, s["arith"])
  ok = code == OK
  return ArithResult(code=code.astype(i32), num=jnp.where(ok, s["vnum"][0], 0),
                     den=jnp.where(ok, s["vden"][0], 1), literals=s["lits"], n_literals=s["nlit"])


def literals_ok(res: ArithResult, numbers: jax.Array, count: jax.Array, use_all: bool) -> jax.Array:
  """True iff the literals form a sub-multiset of `numbers[:count]` (equal when use_all).

  numbers: [N] int32 (padded); count: int32. Literals beyond `max_literals` fail.
  """
  m = res.literals.shape[-1]
  lit_valid = jnp.arange(m) < res.n_literals
  giv_valid = jnp.arange(numbers.shape[-1]) < count
  same_lit = (res.literals[:, None] == res.literals[None, :]) & lit_valid[None, :]
  in_giv = (res.literals[:, None] == numbers[None, :]) & giv_valid[None, :]
  ok = jnp.all(~lit_valid | (same_lit.sum(-1) <= in_giv.sum(-1)))
  ok = ok & (res.n_literals <= jnp.minimum(count, m))
  return ok & (res.n_literals == count) if use_all else ok
