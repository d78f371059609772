"""The tool-call turn format (Search-R1's tags) and its jitted parser; see the package docstring.

Search-R1 (Jin et al. 2025, arXiv:2503.09516, `search_r1/llm_agent/generation.py`
`postprocess_predictions`) takes the first `<(search|answer)>(.*?)</\\1>` of a response. We
keep that rule for any declared tag set, with two explicit choices that its regex leaves
implicit: tags inside the first `<think>..</think>` block are not calls (models write
"I should <search> ..." while thinking), and a first open tag with no matching close tag is
an *unclosed* error rather than a fall-through to a later tag (the model is told what was
wrong). Everything is a fixed-shape scan of the turn's bytes (`byte_scan.find_all`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import Digest, Text, TokenizerLike, digest
from agent_rl.envs.byte_scan import ByteTable, find_all
from agent_rl.envs.render import PieceTable
from agent_rl.envs.tools import errors as E

_WS = (32, 9, 10, 13, 11, 12)   # what bytes.strip() strips

# How the instruction explains each tag (Search-R1's prompt wording for search/answer);
# a tool module may add its own with `TOOL_HELP[tag] = "..."` before building a format.
TOOL_HELP = {
    "search": ("if you find you lack some knowledge, you can call a search engine by "
               "<search> query </search> and it will return the top searched results between "
               "<information> and </information>"),
    "calc": ("to compute exactly, call the calculator by <calc> expression </calc> and it "
             "will return the value between <information> and </information>"),
    "memory": ("to change your memory bank, call <memory> operation </memory> and the result "
               "comes back between <information> and </information>"),
}


@struct.dataclass
class ToolCall:
  """One parsed turn. kind: int32 index into `fmt.names` (tools, then the answer), -1 none;
  arg: `[max_arg_bytes] uint8` the stripped argument (0-padded; zeros on an error); arg_len:
  int32; error: int32 code (`tools.errors`, OK = 0)."""
  kind: jax.Array
  arg: jax.Array
  arg_len: jax.Array
  error: jax.Array


class ToolFormat(Digest):
  """`ToolFormat(tok, tools=("search",), answer="answer", max_arg_bytes=128, budget=4)`.

  names: tools + (answer,); kind k of a ToolCall is names[k]; `is_tool(kind)` = k < num_tools.
  max_bytes: bytes of a turn scanned (later bytes are ignored: a tag cut there is unclosed).
  budget: tool calls allowed per episode (`charge`). tool_errors: names of the tool-specific
  codes (`register_error`) this env passes to `charge` (None: every code registered so far,
  which makes the format depend on what the process imported); an undeclared code renders
  as "error: tool error". fatal: names of the codes the env declares fatal (`"*"` = every
  declared error), reported as info `fatal` by `turn_info`.
  result_open / result_close: the tags around tool results and error messages.
  """

  def __init__(self, tokenizer: TokenizerLike, tools: Sequence[str] = ("search",),
               answer: str = "answer", *, max_arg_bytes: int = 128, max_bytes: int = 512,
               budget: int = 4, fatal: Sequence[str] | str = (), tool_errors: Sequence[str] | None = None,
               result_open: str = "\n\n<information>", result_close: str = "</information>\n\n",
               help: Mapping[str, str] | None = None):
    self.names = tuple(tools) + (answer,)
    if not tools or len(set(self.names)) != len(self.names):
      raise ValueError(f"ToolFormat.tools must be >= 1 distinct tags besides answer={answer!r}, "
                       f"got {tuple(tools)}")
    for t in self.names:
      if not t or any(c in t for c in "<>/ \n\t"):
        raise ValueError(f"ToolFormat tag names must be non-empty without '<>/' or spaces, got {t!r}")
    if max_arg_bytes < 1 or budget < 0 or max_bytes < max_arg_bytes:
      raise ValueError(f"ToolFormat needs max_arg_bytes >= 1, budget >= 0 and max_bytes >= "
                       f"max_arg_bytes, got {max_arg_bytes}, {budget}, {max_bytes}")
    self.num_tools = len(tools)
    self.max_arg_bytes, self.max_bytes, self.budget = int(max_arg_bytes), int(max_bytes), int(budget)
    self.opens = tuple(f"<{t}>".encode() for t in self.names)
    self.closes = tuple(f"</{t}>".encode() for t in self.names)
    self.help = {**TOOL_HELP, **(help or {})}
    missing = [t for t in tools if t not in self.help]
    if missing:
      raise ValueError(f"ToolFormat has no help text for tools {missing}; pass help={{tag: text}}")
    # The layer's own codes plus the tool-specific ones this env declares (so unrelated
    # registrations elsewhere in the process do not change this format or its hash).
    if tool_errors is None:   # every code registered so far
      tool_errors = [e.name for e in E.errors()]
    declared = set(E.BASE) | {E.errors()[E.code(n)].name for n in tool_errors}
    self.errors = tuple(e for e in E.errors() if e.name in declared)
    fatal = [e.name for e in self.errors if e.code != E.OK] if fatal == "*" else list(fatal)
    for f in fatal:
      if E.code(f) not in [e.code for e in self.errors]:
        raise ValueError(f"ToolFormat.fatal names {f!r}, which is not in tool_errors={tuple(tool_errors)}")
    self.fatal_codes = tuple(sorted(E.code(n) for n in fatal))
    self.bytes_ = ByteTable(tokenizer)
    # Messages per (error code, kind; the last column = no kind), deduplicated into one table.
    tags = " or ".join(f"<{t}>" for t in self.names)
    self.result_open, self.result_close = result_open, result_close
    generic = f"{result_open}error: tool error{result_close}"   # codes this env did not declare
    pieces = ["", result_open, result_close, generic]
    ids = np.full((max(e.code for e in self.errors) + 1, len(self.names) + 1), 3, np.int32)
    for e in self.errors:
      for k in range(len(self.names) + 1):
        if e.code == E.OK:
          continue
        tag = self.names[k] if k < len(self.names) else "tool"
        msg = e.message.format(tag=tag, tags=tags, max_arg_bytes=max_arg_bytes, budget=budget)
        text = f"{result_open}error: {msg}{result_close}"
        if text not in pieces:
          pieces.append(text)
        ids[e.code, k] = pieces.index(text)
      if e.code == E.OK:
        ids[e.code] = 0
    self.pieces = PieceTable(tokenizer, pieces)
    self.message_ids = ids
    self.open_id, self.close_id = 1, 2
    self.message_len = int(self.pieces.lengths[ids].max())
    self._digest = digest(self.bytes_._digest, self.names, self.max_arg_bytes, self.max_bytes,
                          self.budget, self.fatal_codes, self.pieces._digest, self.message_ids)

  def kind(self, name: str) -> int:
    """Index of a tag in `names`; KeyError naming it."""
    if name not in self.names:
      raise KeyError(f"tag {name!r} is not in this ToolFormat {self.names}")
    return self.names.index(name)

  @property
  def answer_kind(self) -> int:
    return len(self.names) - 1

  # -- parsing ----------------------------------------------------------------------------
  def parse(self, action: Text) -> ToolCall:
    """A generated turn -> ToolCall (one example; vmap for batches). Never raises."""
    b, n = self.bytes_.text_bytes(action, self.max_bytes)
    return self.parse_bytes(b, n)

  def parse_bytes(self, b: jax.Array, n: jax.Array) -> ToolCall:
    """Parses turn bytes `b [L] uint8` (first n valid), the rule of the module docstring."""
    length = b.shape[0]
    idx = jnp.arange(length, dtype=jnp.int32)
    t_open = find_all(b, n, b"<think>")
    t0 = jnp.where(jnp.any(t_open), jnp.argmax(t_open), length).astype(jnp.int32)
    t_close = find_all(b, n, b"</think>") & (idx >= t0 + 7)
    t1 = jnp.where(jnp.any(t_close), jnp.argmax(t_close) + 8, t0).astype(jnp.int32)
    thinking = (idx >= t0) & (idx < t1)
    firsts = []
    for tag in self.opens:
      hit = find_all(b, n, tag) & ~thinking
      firsts.append(jnp.where(jnp.any(hit), jnp.argmax(hit), length).astype(jnp.int32))
    firsts = jnp.stack(firsts)
    kind = jnp.argmin(firsts).astype(jnp.int32)              # tags are distinct: no ties
    has = firsts[kind] < length
    start = firsts[kind] + jnp.asarray([len(t) for t in self.opens], jnp.int32)[kind]
    closes = jnp.stack([find_all(b, n, tag) for tag in self.closes])[kind] & (idx >= start)
    closed = jnp.any(closes)
    end = jnp.argmax(closes).astype(jnp.int32)
    ws = jnp.zeros((length,), bool)
    for w in _WS:
      ws |= b == w
    solid = (idx >= start) & (idx < end) & ~ws
    s0 = jnp.min(jnp.where(solid, idx, length))
    s1 = jnp.max(jnp.where(solid, idx + 1, 0))
    arg_len = jnp.maximum(s1 - s0, 0).astype(jnp.int32)
    error = jnp.select([~has, ~closed, arg_len == 0, arg_len > self.max_arg_bytes],
                       [E.NO_CALL, E.UNCLOSED, E.EMPTY, E.TOO_LONG], E.OK).astype(jnp.int32)
    ok = error == E.OK
    pos = jnp.arange(self.max_arg_bytes, dtype=jnp.int32)
    arg = jnp.where(ok & (pos < arg_len), b[jnp.clip(s0 + pos, 0, length - 1)], 0).astype(jnp.uint8)
    return ToolCall(kind=jnp.where(has, kind, -1), arg=arg, arg_len=jnp.where(ok, arg_len, 0),
                    error=error)

  # -- episode bookkeeping ----------------------------------------------------------------
  def is_tool(self, kind: jax.Array) -> jax.Array:
    return (kind >= 0) & (kind < self.num_tools)

  def charge(self, call: ToolCall, used: jax.Array, live: jax.Array | bool = True,
             error: jax.Array | None = None) -> tuple[ToolCall, jax.Array]:
    """Applies the per-episode tool budget: an otherwise valid tool call made with
    `used >= budget` calls spent becomes a BUDGET error. `error` (optional int32) is a
    tool-specific code the env found while running the call (OK = none); it replaces OK.
    Returns `(call', used')`: used' counts the calls that ran (valid, within budget, live)."""
    err = call.error if error is None else jnp.where(call.error == E.OK, error, call.error)
    over = self.is_tool(call.kind) & (err == E.OK) & (used >= self.budget)
    err = jnp.where(over, E.BUDGET, err).astype(jnp.int32)
    ran = live & self.is_tool(call.kind) & (err == E.OK)
    return call.replace(error=err), (used + ran).astype(jnp.int32)

  def turn_info(self, call: ToolCall, live: jax.Array | bool = True) -> dict[str, jax.Array]:
    """The standard per-turn info keys (bools, False on a finished episode's steps):
    tool_call (the turn called a tool, ok or not), tool_error (the turn is not a valid call
    or answer: any error code), answered (a valid answer), fatal (an error the env declared
    fatal; the fixed `fatal` field read by the `fatal_aware` kernel)."""
    err = call.error != E.OK
    fatal = jnp.any(call.error == jnp.asarray(self.fatal_codes or (-1,), jnp.int32))
    return {"tool_call": live & self.is_tool(call.kind), "tool_error": live & err,
            "answered": live & ~err & (call.kind == self.answer_kind),
            "fatal": live & err & fatal}

  # -- text -------------------------------------------------------------------------------
  def message(self, call: ToolCall) -> Text:
    """`[message_len]` tokens of the call's error message ("" when OK), wrapped in the
    result tags: `<information>error: unclosed <search> tag</information>`."""
    col = jnp.where(call.kind >= 0, call.kind, len(self.names))
    rows = self.message_ids.shape[0]
    pid = jnp.asarray(self.message_ids)[jnp.clip(call.error, 0, rows - 1), col]
    pid = jnp.where((call.error >= 0) & (call.error < rows), pid, 3)   # undeclared: generic
    return self.pieces.render(pid[None], self.message_len)

  def message_text(self, error: int, kind: int = -1) -> str:
    """Host string of an error's message (tests, docs)."""
    if not 0 <= error < self.message_ids.shape[0]:
      return self.pieces.pieces[3]
    return self.pieces.pieces[self.message_ids[error, kind if kind >= 0 else len(self.names)]]

  def instruction_text(self, task: str = "Answer the given question.") -> str:
    """Search-R1's prompt (its `make_prefix`), generalized to the declared tags."""
    tools = "; ".join(self.help[t] for t in self.names[:-1])
    a = self.names[-1]
    return (f"{task} You must conduct reasoning inside <think> and </think> first every time "
            f"you get new information. After reasoning, {tools}. You can call tools at most "
            f"{self.budget} times. If you find no further external knowledge needed, you can "
            f"directly provide the answer inside <{a}> and </{a}>, without detailed "
            f"illustrations. For example, <{a}> Beijing </{a}>.")
