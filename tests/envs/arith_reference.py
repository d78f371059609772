"""Plain-Python reference for agent_rl.envs.arith, written from its docstring's rules.

A hand-written tokenizer + recursive-descent parser to an AST, then a post-order evaluation
with `fractions.Fraction` (big ints, so overflow is checked against the stated bounds, not
simulated). No eval.
"""
from collections import Counter
from fractions import Fraction

LIMIT = 2 ** 30
OK, SYNTAX, DIV_ZERO, OVERFLOW = 0, 1, 2, 3
WS = b" \t\r\n"


class _Syntax(Exception):
  pass


class _Arith(Exception):
  def __init__(self, code):
    super().__init__(code)
    self.code = code


def tokenize(raw: bytes):
  s = raw.replace("×".encode(), b"*").replace("÷".encode(), b"/").replace("−".encode(), b"-")
  toks, i = [], 0
  while i < len(s):
    ch = s[i:i + 1]
    if ch in (b" ", b"\t", b"\r", b"\n"):
      i += 1
    elif ch.isdigit():
      j = i
      while j < len(s) and s[j:j + 1].isdigit():
        j += 1
      toks.append(("num", int(s[i:j])))
      i = j
    elif ch in (b"+", b"-", b"*", b"/", b"(", b")"):
      toks.append(("op", ch.decode()))
      i += 1
    else:
      raise _Syntax()
  return toks


class _Parser:
  def __init__(self, toks):
    self.toks, self.i = toks, 0

  def peek(self):
    return self.toks[self.i] if self.i < len(self.toks) else ("end", None)

  def take(self):
    t = self.peek()
    self.i += 1
    return t

  def expr(self):
    node = self.term()
    while self.peek() in (("op", "+"), ("op", "-")):
      node = (self.take()[1], node, self.term())
    return node

  def term(self):
    node = self.unary()
    while self.peek() in (("op", "*"), ("op", "/")):
      node = (self.take()[1], node, self.unary())
    return node

  def unary(self):
    if self.peek() in (("op", "+"), ("op", "-")):
      sign = self.take()[1]
      return ("neg" if sign == "-" else "pos", self.unary())
    return self.atom()

  def atom(self):
    kind, val = self.take()
    if kind == "num":
      return ("num", val)
    if (kind, val) == ("op", "("):
      node = self.expr()
      if self.take() != ("op", ")"):
        raise _Syntax()
      return node
    raise _Syntax()


def _check(*quantities):
  if any(abs(q) >= LIMIT for q in quantities):
    raise _Arith(OVERFLOW)


def _eval(node) -> Fraction:
  kind = node[0]
  if kind == "num":
    _check(node[1])
    return Fraction(node[1])
  if kind in ("neg", "pos"):
    v = _eval(node[1])
    return -v if kind == "neg" else v
  x, y = _eval(node[1]), _eval(node[2])
  a, b, c, d = x.numerator, x.denominator, y.numerator, y.denominator
  if kind in "+-":
    sc = c if kind == "+" else -c
    _check(a * d, sc * b, b * d, a * d + sc * b)
    return x + y if kind == "+" else x - y
  if kind == "*":
    _check(a * c, b * d)
    return x * y
  if c == 0:
    raise _Arith(DIV_ZERO)
  _check(a * d, b * c)
  return x / y


def literals(node):
  if node[0] == "num":
    return [node[1]]
  return [v for child in node[1:] for v in literals(child)]


def evaluate(raw: bytes):
  """-> (code, value Fraction or None, literals list or None (syntax error))."""
  try:
    p = _Parser(tokenize(raw))
    tree = p.expr()
    if p.peek() != ("end", None):
      raise _Syntax()
  except _Syntax:
    return SYNTAX, None, None
  try:
    return OK, _eval(tree), literals(tree)
  except _Arith as e:
    return e.code, None, literals(tree)


def uses_allowed(lits, numbers, use_all):
  """Literal multiset within (equal to, if use_all) the given numbers' multiset."""
  have, want = Counter(lits), Counter(numbers)
  ok = all(have[v] <= want[v] for v in have)
  return ok and (not use_all or have == want)


def answer_span(raw: bytes, max_len: int):
  """actions.py's rule: content between the first <answer> and the next </answer>, or None."""
  i = raw.find(b"<answer>")
  if i < 0:
    return None
  j = raw.find(b"</answer>", i + 8)
  if j < 0 or j - (i + 8) > max_len:
    return None
  return raw[i + 8:j]
