"""The tool-call layer: one place for the prompt format and the parsing of a tool-use turn.

A turn is a tool call or a final answer in Search-R1's format (Jin et al. 2025,
arXiv:2503.09516): an optional `<think>..</think>`, then the FIRST of the declared tags,
`<search>q</search>` / `<calc>e</calc>` / `<memory>op</memory>` / `<answer>a</answer>`. The
tool's result comes back as observation tokens `<information>..</information>` (never in the
loss mask: the rollout puts observations outside it). An env using the layer:

    from agent_rl.envs import tools
    fmt = tools.ToolFormat(tok, tools=("search",), answer="answer", max_arg_bytes=128,
                           budget=4, fatal="*")           # host side, jit-static (hashable)
    fmt.instruction_text("Answer the given question.")    # the prompt that explains the tags
    # in env.step (one example; vmappable):
    call = fmt.parse(action)                  # ToolCall(kind, arg [max_arg_bytes], arg_len, error)
    # ... run the tool on call.arg when call.error == OK and fmt.is_tool(call.kind); a tool that
    # fails passes its own code (registered with tools.register_error) to charge:
    call, used = fmt.charge(call, state.tool_calls, live, error=tool_error_code)
    info.update(fmt.turn_info(call, live))    # tool_call, tool_error, answered, fatal (bools)
    obs = tools.concat([result_text, fmt.message(call)], obs_len, pad_id)

- `ToolCall.kind` indexes `fmt.names` (the tools, then the answer; -1 = no tag); `error` is
  a code of `tools.errors`: OK, NO_CALL (no tag), UNCLOSED (first open tag has no close
  tag), EMPTY (argument empty after stripping ASCII whitespace), TOO_LONG (argument over
  `max_arg_bytes`), BUDGET (a valid tool call with `budget` calls already spent), plus the
  codes tool modules register at import (`DIV0 = register_error("div_by_zero", "division by
  zero")`) and the env declares (`ToolFormat(..., tool_errors=("div_by_zero",))`: the format
  renders messages for its own and the declared codes only, so its hash does not depend on
  what else the process registered; the default None takes every code registered so far). On any error `arg` is zeros and `arg_len` 0. Only the
  first `max_bytes` bytes of a turn are scanned.
- `fmt.message(call)`: pre-tokenized `<information>error: unclosed <search> tag</information>`
  (`[fmt.message_len]` tokens; empty when OK). `fmt.pieces` is the PieceTable holding the
  messages and the result tags (`fmt.open_id`, `fmt.close_id`) for wrapping results.
- `tools.truncate(text, budget, pad)`, `tools.render_results(table, lens, rows, budget, ...)`:
  the per-result token budget inside the graph; `tools.concat(texts, out_len, pad)`.
- Budget: the env keeps the count (`used`, int32) in its state; `charge` counts the calls
  that ran (valid, within budget, live episode).
- `turn_info` gives the standard info keys: `tool_call` (a tool tag, valid or not),
  `tool_error` (any error code, including a turn with no tag), `answered` (a valid answer),
  `fatal` (an error whose code the env declared fatal; `fatal="*"`: every error, the
  OpenSearch-VL rule "a step is erroneous if its observation is a tool error" that the
  `fatal_aware` kernel reads from the fixed `fatal` field).
- `tools.tool_metrics(batch)`: tool calls / errors / fatal turns per episode, answer rate,
  EM / F1 and calls on parametric items, from those extras.

Tests: tests/envs/tools (a plain-Python str.find parser, hypothesis-fuzzed, byte-level and
SentencePiece tokenizers with tags split across tokens).
"""
from agent_rl.envs.tools import errors
from agent_rl.envs.tools.errors import (BUDGET, EMPTY, NO_CALL, OK, TOO_LONG, UNCLOSED,
                                        register_error)
from agent_rl.envs.tools.format import TOOL_HELP, ToolCall, ToolFormat
from agent_rl.envs.tools.metrics import tool_metrics
from agent_rl.envs.tools.text import concat, render_results, truncate

__all__ = ["ToolFormat", "ToolCall", "TOOL_HELP", "register_error", "errors", "tool_metrics",
           "concat", "render_results", "truncate", "OK", "NO_CALL", "UNCLOSED", "EMPTY",
           "TOO_LONG", "BUDGET"]
