"""Countdown: reach a target number with + - * / over given numbers (TinyZero / RAGEN).

Countdown as used for reasoning RL by TinyZero (Pan et al., 2025) and RAGEN (Wang et al.,
2025, arXiv:2504.20073): the observation gives numbers and a target; the answer is an
arithmetic expression in `<answer>...</answer>` using each given number at most once
(`use_all=True`: exactly once, as TinyZero/RAGEN check). The expression is parsed and
evaluated in JAX with exact rationals (`agent_rl.envs.arith`), never with Python `eval`.

Scoring (RAGEN's CountdownEnvConfig: score 1.0, format_score 0.1, invalid_act_score -0.1):
  - success: the answer is well-formed, uses allowed numbers and equals the target.
  - format: well-formed (parses, no division by zero, no overflow) but wrong value or
    wrong numbers (TinyZero gives format_score for wrong numbers, too).
  - invalid: no `<answer>` span, or it does not parse / divides by zero / overflows.
`reward_terms = [success, format, invalid]` are 0/1 indicators of this turn's outcome and
`reward = reward_terms . reward_weights` (success_reward, format_reward, invalid_penalty).
`info["success"]` is the episode state (solved so far). Single-turn by default; with
`max_turns > 1` a wrong answer gets feedback and another try (turns counted by
base.step_limit; `info["truncated"]` when the last try fails); a step after `done` is
absorbing (zero reward, all terms 0).

Tasks: `sample_task(key)` draws numbers and builds the target from a random expression tree
over all of them (merging random pairs with a random operator whose result stays an integer
in [1, max_target]), so every sampled task is solvable; `task_from_numbers` builds one
explicitly. `solve(task)` is a host brute force over expression trees (exact fractions).
"""
from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs import arith
from agent_rl.envs.base import ENVS, Text, TokenizerLike, fingerprint, step_limit
from agent_rl.envs.byte_scan import ByteTable
from agent_rl.envs.render import PieceTable, int_pieces

REWARD_NAMES = ("success", "format", "invalid")
_FEEDBACK = ("Correct! ", "Wrong: the expression does not equal the target. ",
             "Wrong: use only the given numbers, each at most once. ",
             "Invalid answer: give one arithmetic expression in <answer> </answer>. ")
_FEEDBACK_ALL = "Wrong: use every given number exactly once. "
_OK, _WRONG_VALUE, _WRONG_NUMBERS, _INVALID = range(4)


@struct.dataclass
class CountdownTask:
  """numbers: [N] int32 (0-padded past count); count: int32; target: int32."""
  numbers: jax.Array
  count: jax.Array
  target: jax.Array


@struct.dataclass
class CountdownState:
  task: CountdownTask
  turn: jax.Array     # int32, turns taken
  solved: jax.Array   # bool
  done: jax.Array     # bool


def _digits(x: int) -> int:
  return len(str(int(x)))


@ENVS.register("countdown")
@dataclasses.dataclass(frozen=True)
class Countdown:
  """Countdown env. Config fields as RAGEN/TinyZero; tables are built from `tokenizer`."""
  tokenizer: TokenizerLike = dataclasses.field(compare=False, hash=False, repr=False)
  min_numbers: int = 3
  max_numbers: int = 4
  min_value: int = 1
  max_value: int = 99
  max_target: int = 100
  use_all: bool = False
  max_turns: int = 1
  success_reward: float = 1.0
  format_reward: float = 0.1
  invalid_penalty: float = -0.1
  max_answer_bytes: int = 96
  max_bytes: int | None = None  # bytes of the generated turn scanned for the answer (None: all)
  pieces: PieceTable = dataclasses.field(init=False, repr=False)
  bytes_: ByteTable = dataclasses.field(init=False, repr=False)
  obs_len: int = dataclasses.field(init=False)

  reward_names = REWARD_NAMES

  def __post_init__(self):
    if not 1 <= self.min_numbers <= self.max_numbers:
      raise ValueError(f"need 1 <= min_numbers <= max_numbers, got min_numbers={self.min_numbers}, "
                       f"max_numbers={self.max_numbers}")
    if not 1 <= self.min_value <= self.max_value < arith.LIMIT:
      raise ValueError(f"need 1 <= min_value <= max_value < 2**30, got min_value={self.min_value}, "
                       f"max_value={self.max_value}")
    if self.max_target < self.max_value:
      # Merging a, b <= max(max_value, max_target) always has a result in [1, max(a, b)].
      raise ValueError(f"max_target={self.max_target} must be >= max_value={self.max_value}")
    if self.max_target >= arith.LIMIT:
      raise ValueError(f"max_target={self.max_target} must be < 2**30")
    if self.max_turns < 1:
      raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
    if self.max_answer_bytes < 1:
      raise ValueError(f"max_answer_bytes must be >= 1, got {self.max_answer_bytes}")
    feedback = list(_FEEDBACK)
    if self.use_all:
      feedback[_WRONG_NUMBERS] = _FEEDBACK_ALL
    pieces = feedback + ["Target: ", ", nums: [", ", ", "]"] + [str(d) for d in range(10)]
    table = PieceTable(self.tokenizer, pieces)
    object.__setattr__(self, "pieces", table)
    object.__setattr__(self, "bytes_", ByteTable(self.tokenizer))
    digits = [str(d) for d in range(10)]
    task_slots = ([["Target: "]] + [digits] * self.target_digits + [[", nums: ["]]
                  + ([digits] * self.value_digits + [[", "]]) * self.max_numbers + [["]"]])
    obs_len = table.max_tokens([feedback] + task_slots)
    object.__setattr__(self, "obs_len", obs_len)

  # -- host side -----------------------------------------------------------------------------
  @property
  def target_digits(self) -> int:
    return _digits(self.max_target)

  @property
  def value_digits(self) -> int:
    return _digits(self.max_value)

  @property
  def instruction(self) -> str:
    rule = "each number exactly once" if self.use_all else "each number at most once"
    return ("You are playing Countdown. Using the given numbers, write an arithmetic expression "
            f"that equals the target. You may use + - * / and parentheses, {rule}. Think inside "
            "<think> </think>, then give only the expression inside <answer> </answer>, "
            "for example <answer> (1 + 2) * 3 </answer>.")

  def render_text(self, task: CountdownTask, feedback: str = "") -> str:
    """Host-side text of the observation (tests, tokenizer corpora)."""
    nums = ", ".join(str(int(x)) for x in np.asarray(task.numbers)[:int(task.count)])
    return f"{feedback}Target: {int(task.target)}, nums: [{nums}]"

  def task_from_numbers(self, numbers: Sequence[int], target: int) -> CountdownTask:
    """An explicit task; ValueError naming the field when it does not fit this env."""
    numbers = [int(x) for x in numbers]
    if not 1 <= len(numbers) <= self.max_numbers:
      raise ValueError(f"numbers must hold 1..max_numbers={self.max_numbers} values, got {len(numbers)}")
    if any(not 0 <= x < 10 ** self.value_digits for x in numbers):
      raise ValueError(f"numbers must lie in [0, {10 ** self.value_digits}), got {numbers}")
    if not 0 <= int(target) < 10 ** self.target_digits:
      raise ValueError(f"target must lie in [0, {10 ** self.target_digits}), got {target}")
    padded = np.zeros((self.max_numbers,), np.int32)
    padded[:len(numbers)] = numbers
    return CountdownTask(numbers=jnp.asarray(padded), count=jnp.int32(len(numbers)),
                         target=jnp.int32(int(target)))

  def solve(self, task: CountdownTask) -> list[str]:
    """`[expression]` reaching the target (brute force); ValueError if there is none."""
    count = int(task.count)
    numbers = [int(x) for x in np.asarray(task.numbers)[:count]]
    expr = solve_numbers(numbers, int(task.target), use_all=self.use_all)
    if expr is None:
      raise ValueError(f"Countdown task numbers={numbers} target={int(task.target)} has no solution "
                       f"(use_all={self.use_all})")
    return [expr]

  # -- jitted side ---------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> CountdownTask:
    n = self.max_numbers
    # One uniform draw feeds every choice (a single threefry call keeps compiles short).
    u = jax.random.uniform(key, (1 + n + 3 * max(n - 1, 1),))

    def uniform_int(x, lo, size):  # int in [lo, lo + size) from x ~ U[0, 1)
      return lo + jnp.minimum(jnp.floor(x * size).astype(jnp.int32), size - 1)

    count = uniform_int(u[0], self.min_numbers, self.max_numbers - self.min_numbers + 1)
    numbers = uniform_int(u[1:1 + n], self.min_value, self.max_value - self.min_value + 1)
    numbers = jnp.where(jnp.arange(n) < count, numbers, 0)
    pool = numbers
    for step in range(n - 1):
      u_i, u_j, u_op = u[1 + n + 3 * step: 4 + n + 3 * step]
      # Live values sit in slots [0, live); pick two distinct ones uniformly.
      live = jnp.maximum(count - step, 2)
      i = uniform_int(u_i, 0, live)
      j = uniform_int(u_j, 0, live - 1)
      j = j + (j >= i)
      a, b = pool[i], pool[j]
      hi, lo = jnp.maximum(a, b), jnp.minimum(a, b)
      cand = jnp.stack([a + b, hi - lo, a * b, hi // jnp.maximum(lo, 1)])
      ok = (cand >= 1) & (cand <= self.max_target)
      ok = ok.at[2].set(ok[2] & (a <= self.max_target // jnp.maximum(b, 1)))
      ok = ok.at[3].set(ok[3] & (hi % jnp.maximum(lo, 1) == 0))
      # A uniformly chosen allowed operator (one always is: |a-b| or a/a = 1).
      r = uniform_int(u_op, 0, jnp.maximum(jnp.sum(ok), 1))
      merged = cand[jnp.argmax(jnp.cumsum(ok) > r)]
      # Merged value into the lower slot; the last live value fills the other one.
      last = live - 1
      lo_i, hi_i = jnp.minimum(i, j), jnp.maximum(i, j)
      new = pool.at[lo_i].set(merged)
      new = new.at[hi_i].set(new[last]).at[last].set(0)
      pool = jnp.where(step < count - 1, new, pool)
    return CountdownTask(numbers=numbers.astype(jnp.int32), count=count.astype(jnp.int32),
                         target=pool[0].astype(jnp.int32))

  def _render(self, task: CountdownTask, feedback: jax.Array, show_feedback: jax.Array) -> Text:
    p = self.pieces.id
    digit_ids = jnp.asarray([p(str(d)) for d in range(10)], jnp.int32)
    t_ids, t_mask = int_pieces(task.target, digit_ids, self.target_digits)
    v_ids, v_mask = jax.vmap(lambda v: int_pieces(v, digit_ids, self.value_digits))(task.numbers)
    live = jnp.arange(self.max_numbers) < task.count
    sep_mask = jnp.arange(self.max_numbers) < task.count - 1
    n = self.max_numbers
    num_ids = jnp.concatenate([v_ids, jnp.full((n, 1), p(", "))], axis=1).reshape(-1)
    num_mask = jnp.concatenate([v_mask & live[:, None], sep_mask[:, None]], axis=1).reshape(-1)
    ids = jnp.concatenate([jnp.atleast_1d(feedback), jnp.array([p("Target: ")]), t_ids,
                           jnp.array([p(", nums: [")]), num_ids, jnp.array([p("]")])])
    mask = jnp.concatenate([jnp.atleast_1d(show_feedback), jnp.ones((1,), bool), t_mask,
                            jnp.ones((1,), bool), num_mask, jnp.ones((1,), bool)])
    return self.pieces.render(ids, self.obs_len, mask)

  def reset(self, key: jax.Array, task: CountdownTask) -> tuple[CountdownState, Text]:
    del key  # Countdown has no randomness after the task.
    state = CountdownState(task=task, turn=jnp.int32(0), solved=jnp.bool_(False), done=jnp.bool_(False))
    return state, self._render(task, jnp.int32(0), jnp.bool_(False))

  def score(self, action: Text, task: CountdownTask) -> tuple[jax.Array, jax.Array, arith.ArithResult]:
    """`(outcome, valid, result)`: outcome in {OK, WRONG_VALUE, WRONG_NUMBERS, INVALID}."""
    span = self.bytes_.answer(action, max_answer_bytes=self.max_answer_bytes, max_bytes=self.max_bytes)
    res = arith.evaluate(span.bytes, span.length, max_literals=self.max_numbers)
    valid = span.found & (res.code == arith.OK)
    nums_ok = arith.literals_ok(res, task.numbers, task.count, self.use_all)
    hit = (res.den == 1) & (res.num == task.target)
    outcome = jnp.where(~valid, _INVALID, jnp.where(~nums_ok, _WRONG_NUMBERS,
                                                     jnp.where(hit, _OK, _WRONG_VALUE)))
    return outcome.astype(jnp.int32), valid, res

  @property
  def reward_weights(self) -> tuple[float, float, float]:
    """Weights of `reward_terms` (success, format, invalid): RAGEN's score/format/penalty."""
    return (self.success_reward, self.format_reward, self.invalid_penalty)

  def step(self, state: CountdownState, action: Text):
    outcome, valid, _ = self.score(action, state.task)
    live = ~state.done
    hit = live & (outcome == _OK)
    terms = jnp.stack([hit, live & valid & ~hit, live & ~valid]).astype(jnp.float32)
    turn, done, truncated = step_limit(state.turn, 1, live, hit, state.done, self.max_turns)
    new = CountdownState(task=state.task, turn=turn, solved=state.solved | hit, done=done)
    feedback = jnp.asarray([self.pieces.id(f) for f in self.pieces.pieces[:4]], jnp.int32)[outcome]
    obs = self._render(state.task, feedback, jnp.bool_(True))
    info = dict(success=new.solved, valid_action=live & valid, state_hash=self.state_hash(new),
                reward_terms=terms, truncated=truncated)
    return new, obs, jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32)), done, info

  def state_hash(self, state: CountdownState) -> jax.Array:
    t = state.task
    return fingerprint(t.numbers, t.count, t.target, state.turn, state.solved, state.done)


# -- host brute-force solver -------------------------------------------------------------------
def _combine(x: Fraction, y: Fraction, op: str) -> Fraction | None:
  """x op y under arith's rules (None on division by zero or a quantity >= 2**30)."""
  a, b, c, d = x.numerator, x.denominator, y.numerator, y.denominator
  if op in "+-":
    sc = c if op == "+" else -c
    parts = (a * d, sc * b, b * d, a * d + sc * b)
  elif op == "*":
    parts = (a * c, b * d)
  else:
    if c == 0:
      return None
    parts = (a * d, b * c)
  if any(abs(p) >= arith.LIMIT for p in parts):
    return None
  return {"+": x + y, "-": x - y, "*": x * y, "/": x / y if c else None}[op]


def solve_numbers(numbers: Sequence[int], target: int, *, use_all: bool = False) -> str | None:
  """An expression over `numbers` equal to `target` (each used at most / exactly once), or None.

  Depth-first over merges of two items with + - * / (both orders), remembering the value
  multisets already explored; fully parenthesized output, e.g. "((3 + 5) * 4) - 8".
  """
  goal = Fraction(int(target))
  seen: set[tuple[Fraction, ...]] = set()

  def search(items: list[tuple[Fraction, str]]) -> str | None:
    key = tuple(sorted(v for v, _ in items))
    if key in seen:
      return None
    seen.add(key)
    if use_all:
      if len(items) == 1 and items[0][0] == goal:
        return items[0][1]
    else:
      for v, e in items:
        if v == goal:
          return e
    for i, j in itertools.combinations(range(len(items)), 2):
      (x, ex), (y, ey) = items[i], items[j]
      rest = [it for k, it in enumerate(items) if k not in (i, j)]
      for swapped, ((u, eu), (w, ew)) in enumerate((((x, ex), (y, ey)), ((y, ey), (x, ex)))):
        for op in "+-*/":
          if op in "+*" and swapped:
            continue  # commutative: one order is enough
          v = _combine(u, w, op)
          if v is not None:
            found = search(rest + [(v, f"({eu} {op} {ew})")])
            if found is not None:
              return found
    return None

  expr = search([(Fraction(int(n)), str(int(n))) for n in numbers])
  if expr is not None and expr.startswith("(") and expr.endswith(")") and _outer_pair(expr):
    expr = expr[1:-1]
  return expr


def _outer_pair(expr: str) -> bool:
  """True iff expr's first '(' closes at its last character."""
  depth = 0
  for k, ch in enumerate(expr):
    depth += ch == "("
    depth -= ch == ")"
    if depth == 0:
      return k == len(expr) - 1
  return False
