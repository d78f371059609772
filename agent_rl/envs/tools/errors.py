"""Tool-error codes and their messages: one registry shared by the tool layer and tool modules.

A code is an int32 that rides in `ToolCall.error` through the jitted step; its message is
pre-tokenized by `ToolFormat` into an observation such as
`<information>error: unclosed <search> tag</information>`. The layer's own codes are
registered here; a tool module registers its own at import, e.g. a calculator's

    DIV_ZERO = register_error("div_by_zero", "division by zero in <{tag}>")

Messages may name `{tag}` (the called tag), `{tags}` (every tag of the format, "<search> or
<answer>"), `{max_arg_bytes}` and `{budget}`; they are filled per format. Codes are given in
registration order (so within a process they are stable; they never leave the process: the
rendered message is what the model sees).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ErrorCode:
  code: int
  name: str
  message: str


_ERRORS: dict[str, ErrorCode] = {}


def register_error(name: str, message: str) -> int:
  """Registers (idempotently) a tool-error code; returns its int code. Raises ValueError when
  `name` is already registered with another message."""
  if not name or not name.replace("_", "").isalnum():
    raise ValueError(f"tool error name must be a non-empty identifier, got {name!r}")
  old = _ERRORS.get(name)
  if old is not None:
    if old.message != message:
      raise ValueError(f"tool error {name!r} is already registered with message {old.message!r}")
    return old.code
  _ERRORS[name] = ErrorCode(len(_ERRORS), name, message)
  return _ERRORS[name].code


def errors() -> tuple[ErrorCode, ...]:
  """Every registered code, by code."""
  return tuple(sorted(_ERRORS.values(), key=lambda e: e.code))


def code(name: str) -> int:
  """The code of a registered error; KeyError listing the known names when absent."""
  try:
    return _ERRORS[name].code
  except KeyError:
    raise KeyError(f"unknown tool error {name!r}; known: {', '.join(sorted(_ERRORS))}") from None


OK = register_error("ok", "")
NO_CALL = register_error("no_call", "no {tags} tag found")
UNCLOSED = register_error("unclosed", "unclosed <{tag}> tag")
EMPTY = register_error("empty", "empty <{tag}> argument")
TOO_LONG = register_error("too_long", "<{tag}> argument longer than {max_arg_bytes} bytes")
BUDGET = register_error("budget", "tool budget of {budget} calls spent")
BASE = ("ok", "no_call", "unclosed", "empty", "too_long", "budget")   # every ToolFormat has these
