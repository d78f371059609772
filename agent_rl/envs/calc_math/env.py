"""CalcMath: arithmetic word problems with an exact calculator tool and injectable faults.

Issue 19 §3, the math-with-tools setting of CLEANER (Xu et al. 2026, arXiv:2601.15141),
CARL and fatal-aware GRPO, in pure JAX. The observation is a word problem (problem.py); each
turn is either a calculator call `<calc> 412 + 97 </calc>` (Search-R1-style tags, the shared
tool layer `agent_rl.envs.tools`) answered in the next observation as
`<information>509</information>` or an error message, or the final `<answer> 506 </answer>`,
which ends the episode. Anything else is an invalid turn (the tool layer's message says what
was wrong) and the episode goes on, up to `max_turns` (base.step_limit) and `max_calls` calls
(the tool budget).

Reward terms (0/1 indicators of this turn), weighted by `reward_weights`:
  success     the answer equals the gold answer                         (success_reward 1.0)
  format      a well-formed integer answer that is wrong                (format_reward 0.1)
  invalid     the turn is neither a valid call nor a valid answer       (invalid_penalty -0.1)
  tool_error  a call reached the calculator and failed (parse, div by 0, overflow, budget,
              injected faults)                                           (tool_error_penalty 0)
Info beyond the fixed keys: the tool layer's `tool_call`, `tool_error`, `answered`, `fatal`
(the error codes in `fatal`, default the injected `calc_fault` only), `tool_kind` (the called
tool's index, -1 when none: rollback-purify's "same tool"), `step_correct` (the verifier:
this call succeeded and its value is one of the gold intermediate values), `truncated`.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs import arith
from agent_rl.envs.base import ENVS, Text, TokenizerLike, fingerprint, step_limit
from agent_rl.envs.byte_scan import parse_ints
from agent_rl.envs.calc_math import calc, problem as P
from agent_rl.envs.calc_math.problem import CalcTask
from agent_rl.envs.render import PieceTable, int_pieces
from agent_rl.envs.tools import errors as E
from agent_rl.envs.tools.format import ToolFormat
from agent_rl.envs.tools.text import concat

REWARD_NAMES = ("success", "format", "invalid", "tool_error")
_FORMAT_ERRORS = (E.NO_CALL, E.UNCLOSED, E.EMPTY, E.TOO_LONG, calc.NOT_INT)
_FEEDBACK = ("\n\n<information>correct</information>\n\n",
             "\n\n<information>wrong answer</information>\n\n")


@struct.dataclass
class CalcMathState:
  """task; key: the episode key (faults); turn, calls: int32; hits: [S] bool gold values the
  calculator has produced; solved, done: bool."""
  task: CalcTask
  key: jax.Array
  turn: jax.Array
  calls: jax.Array
  hits: jax.Array
  solved: jax.Array
  done: jax.Array


@ENVS.register("calc_math")
@dataclasses.dataclass(frozen=True)
class CalcMath:
  """CalcMath env (see the module docstring); tables are built from `tokenizer`."""
  tokenizer: TokenizerLike = dataclasses.field(compare=False, hash=False, repr=False)
  min_steps: int = 2
  max_steps: int = 4
  min_digits: int = 1
  max_digits: int = 3
  max_factor: int = 9
  max_value: int = 999_999_999
  max_turns: int = 6
  max_calls: int = 6
  fault_rate: float = 0.0
  busy_rate: float = 0.0
  fatal: tuple = ("calc_fault",)
  success_reward: float = 1.0
  format_reward: float = 0.1
  invalid_penalty: float = -0.1
  tool_error_penalty: float = 0.0
  max_expr_bytes: int = 64
  max_bytes: int = 256
  repeat_problem: bool = False
  fmt: ToolFormat = dataclasses.field(init=False, repr=False)
  pieces: PieceTable = dataclasses.field(init=False, repr=False)
  obs_len: int = dataclasses.field(init=False)
  problem_len: int = dataclasses.field(init=False)
  feedback_len: int = dataclasses.field(init=False)

  reward_names = REWARD_NAMES
  # Plan turns are whole tool-format turns (`<calc> .. </calc>`, `<answer> .. </answer>`), to
  # be used as written by demo / corpus builders (not wrapped in `<answer>`).
  plan_format = "{}"

  def __post_init__(self):
    kind = type(self).__name__
    if self.tokenizer is None:
      raise ValueError(f"{kind} needs tokenizer= (anything with encode/decode/pad_id/byte_table)")
    if not 1 <= self.min_steps <= self.max_steps:
      raise ValueError(f"{kind} needs 1 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}")
    if not 1 <= self.min_digits <= self.max_digits <= 8:
      raise ValueError(f"{kind} needs 1 <= min_digits <= max_digits <= 8, got "
                       f"{self.min_digits}, {self.max_digits}")
    if not 2 <= self.max_factor <= 99:
      raise ValueError(f"{kind}.max_factor must lie in [2, 99], got {self.max_factor}")
    if not 10 ** self.max_digits <= self.max_value < arith.LIMIT:
      raise ValueError(f"{kind}.max_value must lie in [10**max_digits, 2**30), got {self.max_value}")
    for name in ("max_turns", "max_expr_bytes"):
      if int(getattr(self, name)) < 1:
        raise ValueError(f"{kind}.{name} must be >= 1, got {getattr(self, name)}")
    if self.max_calls < 0:
      raise ValueError(f"{kind}.max_calls must be >= 0, got {self.max_calls}")
    for name in ("fault_rate", "busy_rate"):
      if not 0.0 <= float(getattr(self, name)) <= 1.0:
        raise ValueError(f"{kind}.{name} must lie in [0, 1], got {getattr(self, name)}")
    object.__setattr__(self, "fatal", tuple(self.fatal) if not isinstance(self.fatal, str) else self.fatal)
    fmt = ToolFormat(self.tokenizer, tools=("calc",), answer="answer",
                     max_arg_bytes=self.max_expr_bytes, max_bytes=self.max_bytes,
                     budget=self.max_calls, fatal=self.fatal, tool_errors=calc.ERRORS)
    object.__setattr__(self, "fmt", fmt)
    pieces = (list(_FEEDBACK) + [fmt.result_open, fmt.result_close, "-", "/", " has ", " ", "."]
              + [str(d) for d in range(10)] + list(P.NAMES) + list(P.ITEMS))
    for part in [x for t in P.OP_TEXT for x in t] + list(P.QUESTION):
      if part not in pieces:
        pieces.append(part)
    table = PieceTable(self.tokenizer, pieces)
    object.__setattr__(self, "pieces", table)
    digits, names, items = [str(d) for d in range(10)], list(P.NAMES), list(P.ITEMS)
    event = [[P.OP_TEXT[0][0]], names, [t[1] for t in P.OP_TEXT]] + [digits] * self.number_digits \
        + [[t[2] for t in P.OP_TEXT]]
    slots = ([names, [" has "]] + [digits] * self.number_digits + [[" "], items, ["."]]
             + event * self.max_steps + [[P.QUESTION[0]], items, [P.QUESTION[1]], names, [P.QUESTION[2]]])
    problem_len = table.max_tokens(slots)
    value = [["-"]] + [digits] * calc.RESULT_DIGITS + [["/"]] + [digits] * calc.RESULT_DIGITS
    result_len = table.max_tokens([[fmt.result_open]] + value + [[fmt.result_close]])
    feedback = max(result_len, fmt.message_len, table.max_tokens([list(_FEEDBACK)]))
    object.__setattr__(self, "problem_len", problem_len)
    object.__setattr__(self, "feedback_len", feedback)
    object.__setattr__(self, "obs_len", max(problem_len, feedback + (problem_len if self.repeat_problem else 0)))

  # -- host side -----------------------------------------------------------------------------
  @property
  def number_digits(self) -> int:
    """Digits of the numbers a problem shows (start, operands, factors)."""
    return max(self.max_digits, len(str(self.max_factor)))

  @property
  def problem_config(self) -> P.ProblemConfig:
    return P.ProblemConfig(min_steps=self.min_steps, max_steps=self.max_steps,
                           min_digits=self.min_digits, max_digits=self.max_digits,
                           max_factor=self.max_factor, max_value=self.max_value)

  @property
  def instruction(self) -> str:
    return self.fmt.instruction_text(
        "Solve the arithmetic word problem; its answer is one integer. Call the calculator "
        "once per event, for example <calc> 412 + 97 </calc>, then answer, for example "
        "<answer> 509 </answer>.")

  def render_text(self, task: CalcTask) -> str:
    """Host-side text of the first observation (the problem)."""
    return P.problem_text(task)

  def solve(self, task: CalcTask) -> list[str]:
    """The expert plan: one `<calc>` per event (the gold steps), then `<answer>`."""
    steps = P.gold_steps(task)
    if len(steps) > self.max_calls or len(steps) + 1 > self.max_turns:
      raise ValueError(f"the plan needs {len(steps)} calls and {len(steps) + 1} turns; "
                       f"max_calls={self.max_calls}, max_turns={self.max_turns}")
    return [f"<calc> {s} </calc>" for s in steps] + [f"<answer> {int(task.answer)} </answer>"]

  @property
  def reward_weights(self) -> tuple[float, float, float, float]:
    return (self.success_reward, self.format_reward, self.invalid_penalty, self.tool_error_penalty)

  # -- jitted side ---------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> CalcTask:
    cfg = self.problem_config
    return P.sample(jax.random.uniform(key, (cfg.draws(),)), cfg)

  def _problem_ids(self, task: CalcTask) -> tuple[jax.Array, jax.Array]:
    p, nd = self.pieces.id, self.number_digits
    digit_ids = jnp.asarray([p(str(d)) for d in range(10)], jnp.int32)
    name = jnp.asarray([p(x) for x in P.NAMES], jnp.int32)[task.name]
    item = jnp.asarray([p(x) for x in P.ITEMS], jnp.int32)[task.item]
    mid = jnp.asarray([p(t[1]) for t in P.OP_TEXT], jnp.int32)
    post = jnp.asarray([p(t[2]) for t in P.OP_TEXT], jnp.int32)
    s_ids, s_mask = int_pieces(task.start, digit_ids, nd)
    ids = [jnp.stack([name, p(" has ")]), s_ids, jnp.stack([p(" "), item, p(".")])]
    mask = [jnp.ones((2,), bool), s_mask, jnp.ones((3,), bool)]
    o_ids, o_mask = jax.vmap(lambda v: int_pieces(v, digit_ids, nd))(task.operands)   # [S, nd]
    live = jnp.arange(self.max_steps) < task.num_steps
    ev = jnp.concatenate([jnp.full((self.max_steps, 1), p(P.OP_TEXT[0][0])),
                          jnp.broadcast_to(name, (self.max_steps, 1)), mid[task.ops][:, None], o_ids,
                          post[task.ops][:, None]], axis=1)
    ev_mask = jnp.concatenate([jnp.ones((self.max_steps, 3), bool), o_mask,
                               jnp.ones((self.max_steps, 1), bool)], axis=1) & live[:, None]
    q = P.QUESTION
    ids += [ev.reshape(-1), jnp.stack([p(q[0]), item, p(q[1]), name, p(q[2])])]
    mask += [ev_mask.reshape(-1), jnp.ones((5,), bool)]
    return jnp.concatenate(ids).astype(jnp.int32), jnp.concatenate(mask)

  def _problem(self, task: CalcTask) -> Text:
    ids, mask = self._problem_ids(task)
    return self.pieces.render(ids, self.problem_len, mask)

  def reset(self, key: jax.Array, task: CalcTask) -> tuple[CalcMathState, Text]:
    raw = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    state = CalcMathState(task=task, key=raw, turn=jnp.int32(0), calls=jnp.int32(0),
                          hits=jnp.zeros((self.max_steps,), bool), solved=jnp.bool_(False),
                          done=jnp.bool_(False))
    prob = self._problem(task)
    return state, Text(tokens=jnp.pad(prob.tokens, (0, self.obs_len - self.problem_len),
                                      constant_values=self.pieces.pad_id), length=prob.length)

  def step(self, state: CalcMathState, action: Text):
    task, fmt, live = state.task, self.fmt, ~state.done
    call = fmt.parse(action)
    call, calls = fmt.charge(call, state.calls, live)
    ran = (call.kind == 0) & (call.error == E.OK)            # reached the calculator
    draws = calc.fault_draws(jax.random.wrap_key_data(state.key), state.turn)
    err, res = calc.evaluate(call.arg, call.arg_len, draws, self.fault_rate, self.busy_rate)
    call = call.replace(error=jnp.where(ran, err, call.error))
    calc_ok = live & ran & (err == E.OK)
    is_answer = (call.kind == fmt.answer_kind) & (call.error == E.OK)
    value, is_int = parse_ints(call.arg[None], call.arg_len[None])
    call = call.replace(error=jnp.where(is_answer & ~is_int[0], calc.NOT_INT, call.error))
    answered = live & is_answer & is_int[0]
    correct = answered & (value[0] == task.answer)
    gold = (jnp.arange(self.max_steps) < task.num_steps) & (task.values == res.num) & (res.den == 1)
    step_correct = calc_ok & jnp.any(gold)
    format_err = jnp.any(call.error == jnp.asarray(_FORMAT_ERRORS, jnp.int32))
    invalid = live & format_err
    tool_err = live & (call.kind == 0) & (call.error != E.OK) & ~format_err
    terms = jnp.stack([correct, answered & ~correct, invalid, tool_err]).astype(jnp.float32)
    turn, done, truncated = step_limit(state.turn, 1, live, answered, state.done, self.max_turns)
    new = CalcMathState(task=task, key=state.key, turn=turn, calls=calls,
                        hits=state.hits | (gold & calc_ok), solved=state.solved | correct, done=done)
    info = dict(fmt.turn_info(call, live), success=new.solved, valid_action=live & ~format_err,
                state_hash=self.state_hash(new), reward_terms=terms, truncated=truncated,
                tool_kind=jnp.where(live & fmt.is_tool(call.kind), call.kind, -1).astype(jnp.int32),
                step_correct=step_correct)
    obs = self._feedback(state.task, call, res, calc_ok, answered, correct)
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    return new, obs, reward, done, info

  def _feedback(self, task, call, res, calc_ok, answered, correct) -> Text:
    p = self.pieces.id
    v_ids, v_mask = calc.value_pieces(self.pieces, res.num, res.den)
    ids = jnp.concatenate([jnp.asarray([p(self.fmt.result_open)]), v_ids,
                           jnp.asarray([p(self.fmt.result_close)])])
    mask = jnp.concatenate([jnp.ones((1,), bool), v_mask, jnp.ones((1,), bool)])
    fb = jnp.where(correct, p(_FEEDBACK[0]), p(_FEEDBACK[1]))
    ids = jnp.where(answered, jnp.zeros_like(ids).at[0].set(fb), ids)
    mask = jnp.where(answered, jnp.zeros_like(mask).at[0].set(True), mask)
    result = self.pieces.render(ids, self.feedback_len, mask)
    msg = self.fmt.message(call)
    msg_tokens = jnp.pad(msg.tokens, (0, self.feedback_len - msg.tokens.shape[0]),
                         constant_values=self.pieces.pad_id)
    use_result = calc_ok | answered
    parts = [Text(tokens=jnp.where(use_result, result.tokens, msg_tokens),
                  length=jnp.where(use_result, result.length, msg.length))]
    if self.repeat_problem:
      parts.append(self._problem(task))
    return concat(parts, self.obs_len, self.pieces.pad_id)

  def progress(self, state: CalcMathState) -> jax.Array:
    """f32 share of the gold intermediate values computed so far (TSR's env_progress)."""
    return jnp.sum(state.hits) / jnp.maximum(state.task.num_steps, 1).astype(jnp.float32)

  def state_hash(self, state: CalcMathState) -> jax.Array:
    t = state.task
    return fingerprint(t.name, t.item, t.start, t.num_steps, t.ops, t.operands, state.turn,
                       state.calls, state.hits, state.solved, state.done)
