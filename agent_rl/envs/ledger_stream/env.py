"""LedgerStream: UMA's Ledger-QA memory agent as a pure-JAX world (issue 19 §4).

UMA (unified memory agent, ictnlp/unified-memory-agent; shared/ALGORITHMS.md §4.2) reads a
long context chunk by chunk, keeps a memory through tool calls, then answers questions from
that memory. Here the context is a stream of account events (ledger.py), the memory a bank
of S `(name, balance)` slots changed by CRUD calls (memory.py; why structured: see there),
and the questions ask about the ledger after the stream ("balance of X", "who holds the
largest balance", "how many accounts are open", "current name of the account opened as
X", "total balance").

One episode row = C memory turns, then Q QA turns (T = C + Q turns, `max_turns` must be C + Q):

- memory turn c shows the previous call's result, chunk c's events and the bank; the turn
  is one `<memory>op || op</memory>` call (tool layer `agent_rl.envs.tools`); a wrong tag,
  a malformed call or a failing op is a tool error with its message in the next
  observation, never an exception.
- QA turn q shows the final bank, the last `raw_window` events and question q; the turn is
  `<answer>NAME or NUMBER</answer>` (case-insensitive exact match). QA turns never change
  the bank and their observation holds no earlier answer or feedback.

Why one row and not a one-to-many rollout branch: UMA builds each QA prompt from (final
memory, question q) alone (`_build_final_prompt_ids`), so its Q branches are Q samples of
one state. With `rollout.history="windowed"` and `window_turns=0` each turn's context is the
prompt plus its own observation (a fresh cache per turn), so QA turn q of a row is exactly
such a branch: the same as if the final state were copied Q times and each copy asked one
question, at no extra cost and with no new rollout strategy. (Concatenated history would
let QA turn q see the earlier QA turns: configs/uma_ledger.py uses windowed/0.) The batch
carries `info["question_index"]` (0 on memory turns, q in 1..Q on QA turn q) and the `uma`
kernel (credit/stratified.py) scores each memory turn with the mean QA reward of its row
plus its own reward, UMA's rule (tested end to end in tests/envs/ledger_stream/test_uma.py).

Reward terms (weights `reward_weights`, default (1, -0.1, -0.05)):
    success     1 on a QA turn answered right (UMA's per-question outcome)
    format      1 on a turn that is not a well-formed call of its phase's tag
    tool_error  1 on a memory call with a failing operation (the memory row's tool reward)
Info: `success` (all Q answered right, on the last turn), `question_index`, `qa_correct`,
the tool layer's `tool_call / tool_error / answered / fatal`, `truncated`.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import ENVS, Text, fingerprint, step_limit, validate_fields
from agent_rl.envs.byte_scan import match_words, parse_ints
from agent_rl.envs import tools
from agent_rl.envs.ledger_stream import ledger as L
from agent_rl.envs.ledger_stream import memory as M
from agent_rl.envs.ledger_stream.text import Layout
from agent_rl.envs.tools import errors as E

REWARD_NAMES = ("success", "format", "tool_error")
ANSWER_EARLY = E.register_error("mem_answer_early", "the stream is not over: call <memory> now")
READ_ONLY = E.register_error("mem_read_only", "the memory is read-only during questions: <answer> now")


@struct.dataclass
class LedgerTask:
  """events `[E, 4]` int32 (type, a, b, amount); questions `[Q, 2]` int32 (type, subject);
  final: the ledger after the stream (answers are computed from it)."""
  events: jax.Array
  questions: jax.Array
  final: L.Ledger


@struct.dataclass
class LedgerState:
  task: LedgerTask
  bank: M.MemoryBank
  turn: jax.Array        # int32 turns taken (memory turns 0..C-1, then QA turns)
  done: jax.Array        # bool
  correct: jax.Array     # [Q] bool
  tool_calls: jax.Array  # int32 memory calls that ran
  feedback: jax.Array    # int32 0 none, 1 ok, 2 error (shown on the next memory turn)
  error: jax.Array       # int32 the last call's tool error code
  kind: jax.Array        # int32 the last call's tag (index into fmt.names, -1 none)


@ENVS.register("ledger_stream")
@dataclasses.dataclass(frozen=True)
class LedgerStream:
  """`make("ledger_stream", tokenizer=tok, num_chunks=4, chunk_events=3, num_questions=3)`."""
  tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)
  num_accounts: int = 4
  num_names: int = 12
  num_slots: int = 4
  num_chunks: int = 4
  chunk_events: int = 3
  num_questions: int = 3
  raw_window: int = 2
  max_ops: int = 6
  question_types: tuple = tuple(L.QUESTIONS)
  event_weights: tuple = (2.0, 3.0, 2.0, 2.0, 1.0, 1.0)
  unit: int = 5
  max_amount: int = 100
  max_arg_bytes: int = 160
  max_bytes: int = 224
  reward_weights: tuple = (1.0, -0.1, -0.05)
  fmt: Any = dataclasses.field(init=False, repr=False)
  layout: Any = dataclasses.field(init=False, repr=False)
  obs_len: int = dataclasses.field(init=False)
  _digest: str = dataclasses.field(init=False, repr=False)

  reward_names = REWARD_NAMES
  plan_format = "{}"  # solve() returns whole turn texts (<memory>..</memory>, <answer>..</answer>)

  def __post_init__(self):
    validate_fields(self, REWARD_NAMES, ("num_accounts", "num_slots", "num_chunks", "chunk_events",
                                         "num_questions", "max_ops", "unit", "max_amount"))
    cls = "LedgerStream"
    object.__setattr__(self, "question_types", tuple(self.question_types))
    object.__setattr__(self, "event_weights", tuple(float(w) for w in self.event_weights))
    bad = [t for t in self.question_types if t not in L.QUESTIONS]
    if bad or not self.question_types:
      raise ValueError(f"{cls}.question_types: unknown {bad or 'empty'}; known: {', '.join(L.QUESTIONS)}")
    if not self.num_accounts <= self.num_names <= len(L.NAMES):
      raise ValueError(f"{cls}.num_names must be in [num_accounts={self.num_accounts}, "
                       f"{len(L.NAMES)}], got {self.num_names}")
    if self.num_slots < self.num_accounts:
      raise ValueError(f"{cls}.num_slots={self.num_slots} cannot hold num_accounts="
                       f"{self.num_accounts} (the expert keeps one slot per account)")
    if self.max_ops < min(2 * self.chunk_events, self.num_accounts):
      raise ValueError(f"{cls}.max_ops={self.max_ops} is below the accounts one chunk can touch "
                       f"(min(2 * chunk_events, num_accounts) = "
                       f"{min(2 * self.chunk_events, self.num_accounts)})")
    if len(self.event_weights) != 6 or min(self.event_weights) <= 0:
      raise ValueError(f"{cls}.event_weights needs 6 weights > 0 {L.EVENT_WORDS}, got "
                       f"{self.event_weights}")
    if not 0 <= self.raw_window <= self.num_events:
      raise ValueError(f"{cls}.raw_window must be in [0, {self.num_events}], got {self.raw_window}")
    if self.max_amount < self.unit:
      raise ValueError(f"{cls}.max_amount={self.max_amount} is below unit={self.unit}")
    fmt = tools.ToolFormat(self.tokenizer, tools=("memory",), answer="answer",
                           max_arg_bytes=self.max_arg_bytes, max_bytes=self.max_bytes,
                           budget=self.num_chunks)
    layout = Layout(self.tokenizer, fmt, self.num_names, self.num_slots, self.num_chunks,
                    self.chunk_events, self.num_questions, self.raw_window, self.question_types,
                    len(str(self.num_events * self.max_amount)))
    object.__setattr__(self, "fmt", fmt)
    object.__setattr__(self, "layout", layout)
    object.__setattr__(self, "obs_len", layout.obs_len(
        jax.ShapeDtypeStruct((self.num_events, 4), jnp.int32), M.MemoryBank.empty(self.num_slots),
        jax.ShapeDtypeStruct((2,), jnp.int32)))
    object.__setattr__(self, "_digest", layout._digest)

  @property
  def num_events(self) -> int:
    return self.num_chunks * self.chunk_events

  @property
  def num_turns(self) -> int:
    """Turns of an episode: C memory turns + Q QA turns (set rollout.max_turns to this)."""
    return self.num_chunks + self.num_questions

  @property
  def names(self) -> tuple[bytes, ...]:
    return tuple(n.encode() for n in L.NAMES[:self.num_names])

  @property
  def instruction(self) -> str:
    c, q = self.num_chunks, self.num_questions
    task = (f"You are a memory agent for a bank ledger. You read a stream of account events in "
            f"{c} chunks (open NAME AMOUNT, deposit NAME AMOUNT, withdraw NAME AMOUNT, transfer "
            f"FROM TO AMOUNT, rename OLD NEW, close NAME) and keep a memory bank of "
            f"{self.num_slots} slots, each one account's name and balance. After each chunk, "
            f"write <memory> ops </memory> with up to {self.max_ops} ops separated by ||: add "
            f"NAME AMOUNT, add SLOT NAME AMOUNT, update SLOT NAME AMOUNT, delete SLOT, noop; "
            f"for example <memory> add alice 120 || update 2: bob 35 </memory>. Then {q} "
            f"questions come, one at a time, with only your memory and the last events shown: "
            f"answer each with a name or a number, e.g. <answer> alice </answer>.")
    return task

  # -- tasks ----------------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> LedgerTask:
    ke, kq = jax.random.split(key)
    events, final = L.sample_stream(ke, self.num_events, self.num_accounts, self.num_names,
                                    self.event_weights, self.unit, self.max_amount // self.unit)
    questions = L.sample_questions(kq, final, self.question_types, self.num_questions)
    return LedgerTask(events=events, questions=questions, final=final)

  def answer(self, task: LedgerTask, q) -> L.Answer:
    """Gold answer of question q (0-based) of a task."""
    return L.answer(task.final, task.questions[q], self.question_types, self.num_names)

  # -- pure pieces of the step ----------------------------------------------------------------
  def grade(self, task: LedgerTask, q, call: tools.ToolCall) -> jax.Array:
    """bool: the answer bytes of `call` are question q's answer (a name, or an integer)."""
    gold = self.answer(task, q)
    win = call.arg[None, :M.WORD_BYTES]
    n = jnp.where(call.arg_len <= M.WORD_BYTES, call.arg_len, -1)[None]
    name = match_words(win, n, self.names)[0]
    value, ok = parse_ints(win, jnp.maximum(n, 0))
    by_name = (name >= 0) & gold.accept[jnp.maximum(name, 0)]
    by_value = ok[0] & (n[0] > 0) & (value[0] == gold.value)
    return jnp.where(gold.is_name, by_name, by_value)

  def memory_call(self, bank: M.MemoryBank, call: tools.ToolCall):
    """`(bank', op error, ops applied)` of a memory call's argument."""
    ops = M.parse_ops(call.arg, call.arg_len, self.names, self.num_slots, self.max_ops)
    return M.apply_ops(bank, ops)

  def render(self, state: LedgerState) -> Text:
    """Observation `[obs_len]`: memory turn, QA turn or the end (text.py)."""
    ids, mask = self.pieces(state)
    return self.layout.table.render(ids, self.obs_len, mask)

  def pieces(self, state: LedgerState):
    """`(ids [S], mask [S])`: the observation's pieces (rows of `layout.table`)."""
    q = jnp.clip(state.turn - self.num_chunks, 0, self.num_questions - 1)
    return self.layout.slots(state.task.events, state.bank, state.turn, state.feedback,
                             state.error, state.kind, state.task.questions[q], state.done).done()

  # -- contract -------------------------------------------------------------------------------
  def initial_state(self, task: LedgerTask) -> LedgerState:
    z = jnp.int32(0)
    return LedgerState(task=task, bank=M.MemoryBank.empty(self.num_slots), turn=z,
                       done=jnp.bool_(False), correct=jnp.zeros((self.num_questions,), bool),
                       tool_calls=z, feedback=z, error=z, kind=jnp.int32(-1))

  def reset(self, key: jax.Array, task: LedgerTask):
    del key  # the task fixes the start
    state = self.initial_state(task)
    return state, self.render(state)

  def step(self, state: LedgerState, action: Text):
    live = ~state.done
    c = self.num_chunks
    mem_turn = state.turn < c
    q = jnp.clip(state.turn - c, 0, self.num_questions - 1)
    call = self.fmt.parse(action)
    parsed = call.error == E.OK
    is_mem = parsed & (call.kind == self.fmt.kind("memory"))
    is_ans = parsed & (call.kind == self.fmt.answer_kind)
    bank, op_error, _ = self.memory_call(state.bank, call)
    phase_error = jnp.select([mem_turn & is_ans, ~mem_turn & is_mem], [ANSWER_EARLY, READ_ONLY], E.OK)
    run = mem_turn & is_mem
    call, used = self.fmt.charge(call, state.tool_calls, live & mem_turn,
                                 error=jnp.where(run, op_error, phase_error))
    write = live & run & (call.error != E.BUDGET)
    right = live & ~mem_turn & is_ans & self.grade(state.task, q, call)
    correct = jnp.where(live & ~mem_turn & (jnp.arange(self.num_questions) == q), right,
                        state.correct)
    bad_format = live & (~parsed | (phase_error != E.OK))
    tool_bad = live & run & (call.error != E.OK)
    turn, done, truncated = step_limit(state.turn, 1, live, state.turn + 1 >= self.num_turns,
                                       state.done, self.num_turns)
    new = state.replace(
        bank=jax.tree.map(lambda a, b: jnp.where(write, a, b), bank, state.bank),
        turn=turn, done=done, correct=correct, tool_calls=used,
        feedback=jnp.where(live, jnp.where(call.error == E.OK, 1, 2), state.feedback).astype(jnp.int32),
        error=jnp.where(live, call.error, state.error).astype(jnp.int32),
        kind=jnp.where(live, call.kind, state.kind).astype(jnp.int32))
    terms = jnp.stack([right, bad_format, tool_bad]).astype(jnp.float32)
    info = {"success": done & jnp.all(correct), "valid_action": live & ~bad_format & ~tool_bad,
            "state_hash": self.state_hash(new), "reward_terms": terms, "truncated": truncated,
            "question_index": jnp.where(live & ~mem_turn, q + 1, 0).astype(jnp.int32),
            "qa_correct": right, **self.fmt.turn_info(call, live)}
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    return new, self.render(new), reward, done, info

  def state_hash(self, state: LedgerState) -> jax.Array:
    """uint32 fingerprint of (task, bank, turn, done, answers, last call's feedback)."""
    t = state.task
    return fingerprint(t.events, t.questions, state.bank.name, state.bank.balance, state.turn,
                       state.done, state.correct, state.feedback, state.error, state.kind)

  # -- host side ------------------------------------------------------------------------------
  def render_text(self, state_or_task) -> str:
    """Host text of a state's observation (a task: its first); equals decode(render(state))."""
    state = state_or_task
    if isinstance(state, LedgerTask):
      state = self.initial_state(state)
    return self.layout.text(*_pieces(self, jax.tree.map(jnp.asarray, state)))

  def solve(self, task: LedgerTask) -> list[str]:
    """Expert plan (whole turn texts): after each chunk, the fewest ops that make the bank
    equal the live accounts (deletes, then updates, then adds into the first free slot; a
    noop when nothing changed), then the gold answers."""
    ev = np.asarray(task.events)
    e_c = self.chunk_events
    names = L.NAMES[:self.num_names]
    accts: dict[int, list] = {}            # account index -> [name, balance, live]
    slot_of: dict[int, int] = {}           # account index -> slot
    bank = [None] * self.num_slots
    plan = []
    for ch in range(self.num_chunks):
      before = {k: tuple(v) for k, v in accts.items()}
      for kind, a, b, x in ev[ch * e_c:(ch + 1) * e_c].tolist():
        by_name = {v[0]: k for k, v in accts.items() if v[2]}
        if kind == L.OPEN:
          accts[len(accts)] = [a, x, True]
          continue
        k = by_name[a]
        if kind == L.DEPOSIT:
          accts[k][1] += x
        elif kind == L.WITHDRAW:
          accts[k][1] -= x
        elif kind == L.TRANSFER:
          accts[k][1] -= x
          accts[by_name[b]][1] += x
        elif kind == L.RENAME:
          accts[k][0] = b
        elif kind == L.CLOSE:
          accts[k][2] = False
      ops = []
      for k in sorted(slot_of):
        if not accts[k][2]:
          s = slot_of.pop(k)
          bank[s] = None
          ops.append(f"delete {s + 1}")
      for k in sorted(slot_of):
        if before.get(k) != tuple(accts[k]):
          ops.append(f"update {slot_of[k] + 1}: {names[accts[k][0]]} {accts[k][1]}")
      for k in sorted(accts):
        if accts[k][2] and k not in slot_of:
          s = bank.index(None)
          bank[s], slot_of[k] = k, s
          ops.append(f"add {names[accts[k][0]]} {accts[k][1]}")
      arg = " || ".join(ops) or "noop"
      if len(arg) > self.max_arg_bytes:
        raise ValueError(f"expert memory call {arg!r} exceeds max_arg_bytes={self.max_arg_bytes}")
      plan.append(f"<memory> {arg} </memory>")
    for q in range(self.num_questions):
      gold = jax.tree.map(np.asarray, _answer(self, jax.tree.map(jnp.asarray, task), jnp.int32(q)))
      text = names[int(np.argmax(gold.accept))] if gold.is_name else str(int(gold.value))
      plan.append(f"<answer> {text} </answer>")
    return plan


@functools.partial(jax.jit, static_argnums=0)
def _pieces(env, state):
  return env.pieces(state)


@functools.partial(jax.jit, static_argnums=0)
def _answer(env, task, q):
  return env.answer(task, q)
