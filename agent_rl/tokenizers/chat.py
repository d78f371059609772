"""A checkpoint's own Jinja chat template, rendered as transformers renders it, split into the
constant token pieces the multi-turn rollout concatenates.

Rendering: `jinja2.sandbox.ImmutableSandboxedEnvironment` with `trim_blocks`/`lstrip_blocks`,
the `loopcontrols` extension, a `tojson` filter and the `raise_exception` / `strftime_now`
globals, with bos/eos/pad/unk token strings in scope: the template of a downloaded directory is
untrusted input, and this is the environment transformers' `apply_chat_template` uses.

Pieces (the way verl / prime-rl get per-turn deltas): render one probe conversation whose
contents are sentinels,

    [system, user(instruction + "\\n" + S0), assistant(S1), user(S2), assistant(S3), user(S4)]
    with add_generation_prompt=True   ->   p0 S0 p1 S1 p2 S2 p3 S3 p4 S4 p5

and cut it at the sentinels: `first = p0` (system turn, first user header, instruction),
`header = p5` (end of a user turn + the generation prompt the model answers after),
`turn_end + turn_prefix = p2` (what the template writes after an assistant message: the
turn-end token, which the policy itself generates as its stop token, then the next user
header). Each piece is tokenized once; `verify` then checks that first + obs + header + action
+ turn_end + turn_prefix + ... equals the tokenization of the rendered conversation, so the
ids the rollout builds turn by turn are the ids `apply_chat_template` gives (or an error
names the template and the first differing token).

Where the template rewrites history (Qwen3 drops the `<think>` block of assistant turns
before the last user message; Llama-3/Gemma `trim` contents; Qwen3's non-thinking generation
prompt adds an empty think block that history omits), the rollout keeps what the policy
actually saw and generated: the learner must score the exact ids it sampled (the
token-in-token-out rule; re-rendering is what makes verl/prime-rl runs drift).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Any, Mapping, Sequence

_SENTINELS = tuple(f"\u2063S{k}\u2063" for k in range(5))   # invisible separator: never trimmed


@dataclasses.dataclass(frozen=True)
class ChatPieces:
  """Rendered pieces (strings) and their ids; see the module docstring for the layout.

  `history_header` is the header the template writes before an assistant message already in
  the conversation; it equals `header` except for templates whose generation prompt differs
  (Qwen3 with enable_thinking=False).
  """
  first: str
  header: str
  history_header: str
  turn_end: str
  turn_prefix: str
  first_ids: tuple[int, ...]
  header_ids: tuple[int, ...]
  history_header_ids: tuple[int, ...]
  turn_end_id: int
  turn_prefix_ids: tuple[int, ...]


def compile_template(source: str, where: str = "chat_template"):
  """The sandboxed Jinja template object; ValueError naming `where` on a syntax error."""
  import jinja2
  import jinja2.ext
  from jinja2.sandbox import ImmutableSandboxedEnvironment

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)

  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[jinja2.ext.loopcontrols])
  env.filters["tojson"] = tojson
  env.globals["raise_exception"] = raise_exception
  env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
  try:
    return env.from_string(source)
  except jinja2.exceptions.TemplateError as e:
    raise ValueError(f"{where} is not a valid Jinja template: {e}") from e


def _where(tokenizer) -> str:
  return f"{os.path.join(getattr(tokenizer, 'path', '<tokenizer>'), 'tokenizer_config.json')}: " \
         f"key 'chat_template'"


def render(tokenizer, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = False,
           **template_kwargs) -> str:
  """The tokenizer's chat template applied to `messages` ([{"role", "content"}, ...])."""
  import jinja2
  source = getattr(tokenizer, "chat_template", None)
  if not source:
    raise ValueError(f"{_where(tokenizer)} is missing: this tokenizer has no chat template")
  template = compile_template(source, _where(tokenizer))
  names = {k: getattr(tokenizer, k, None) for k in ("bos_token", "eos_token", "pad_token",
                                                     "unk_token")}
  try:
    return template.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                           **{k: v for k, v in names.items() if v is not None}, **template_kwargs)
  except jinja2.exceptions.TemplateError as e:
    raise ValueError(f"{_where(tokenizer)} failed to render {len(messages)} messages: {e}") from e


def _cut(text: str, sentinels: Sequence[str], where: str) -> list[str]:
  parts, rest = [], text
  for s in sentinels:
    if rest.count(s) != 1:
      raise ValueError(f"{where}: the template does not render each message's content exactly once "
                       f"(probe content {s!r} appears {rest.count(s)} times); pieces need it")
    head, rest = rest.split(s)
    parts.append(head)
  return parts + [rest]


def _conversation(system: str | None, instruction: str, users: Sequence[str],
                  assistants: Sequence[str]) -> list[dict]:
  msgs = [{"role": "system", "content": system}] if system is not None else []
  for t, u in enumerate(users):
    msgs.append({"role": "user", "content": instruction + "\n" + u if t == 0 else u})
    if t < len(assistants):
      msgs.append({"role": "assistant", "content": assistants[t]})
  return msgs


def prompt_pieces(tokenizer, instruction: str, system: str | None = None,
                  **template_kwargs) -> ChatPieces:
  """Pieces of the tokenizer's template (module docstring), verified with `verify`."""
  where = _where(tokenizer)
  s = _SENTINELS
  text = render(tokenizer, _conversation(system, instruction, [s[0], s[2], s[4]], [s[1], s[3]]),
                add_generation_prompt=True, **template_kwargs)
  p = _cut(text, s, where)
  if p[2] != p[4] or p[1] != p[3]:
    raise ValueError(f"{where}: turns render differently at different depths ({p[2]!r} vs "
                     f"{p[4]!r}); a fixed per-turn piece cannot express this template")
  added = sorted((t for t in tokenizer.added_tokens if p[2].startswith(t)), key=len)
  if not added:
    raise ValueError(f"{where}: an assistant message is followed by {p[2][:24]!r}, which does not "
                     f"start with a special token; the policy needs a token to end its turn")
  turn_end = added[-1]
  enc = tokenizer.encode
  pieces = ChatPieces(
      first=p[0], header=p[5], history_header=p[1], turn_end=turn_end,
      turn_prefix=p[2][len(turn_end):], first_ids=tuple(enc(p[0])), header_ids=tuple(enc(p[5])),
      history_header_ids=tuple(enc(p[1])), turn_end_id=tokenizer.special(turn_end),
      turn_prefix_ids=tuple(enc(p[2][len(turn_end):])))
  if not pieces.first_ids:
    raise ValueError(f"{where}: the first prompt piece renders empty")
  verify(tokenizer, pieces, instruction, system, **template_kwargs)
  return pieces


def episode_ids(pieces: ChatPieces, obs_ids: Sequence[Sequence[int]],
                action_ids: Sequence[Sequence[int]], *, history_header: bool = False) -> list[int]:
  """Token ids the rollout writes for an episode: first + obs_0 + header + action_0 + turn_end +
  turn_prefix + obs_1 + header + ... (+ a last header when there is one more observation
  than actions). `history_header=True` uses the template's in-history header for answered
  turns, i.e. what re-rendering the finished conversation gives."""
  out = list(pieces.first_ids)
  for t, obs in enumerate(obs_ids):
    if t:
      out += list(pieces.turn_prefix_ids)
    out += list(obs)
    answered = t < len(action_ids)
    out += list(pieces.history_header_ids if history_header and answered else pieces.header_ids)
    if answered:
      out += list(action_ids[t]) + [pieces.turn_end_id]
  return out


def verify(tokenizer, pieces: ChatPieces, instruction: str, system: str | None,
           observations: Sequence[str] = ("#_P\n_O#", "Box at 1.", "wall"),
           actions: Sequence[str] = ("<answer>Up</answer>", "<answer>Left || Down</answer>"),
           **template_kwargs) -> None:
  """Raises ValueError (naming the template and the first differing token) unless the pieces
  with these contents tokenize like the rendered conversation (history headers in history)."""
  msgs = _conversation(system, instruction, observations, actions)
  want = tokenizer.encode(render(tokenizer, msgs, add_generation_prompt=True, **template_kwargs))
  enc = tokenizer.encode
  got = episode_ids(pieces, [enc(o) for o in observations], [enc(a) for a in actions],
                    history_header=True)
  if got != want:
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    raise ValueError(f"{_where(tokenizer)}: the per-turn pieces do not reproduce the rendered "
                     f"conversation: first difference at token {k} (pieces give "
                     f"{tokenizer.decode(got[k:k + 8])!r}, the template "
                     f"{tokenizer.decode(want[k:k + 8])!r})")


def turn_end_id(tokenizer) -> int:
  """The token that ends an assistant turn: the chat template's (`prompt_pieces`), else
  ChatML's `<|im_end|>` (the local sentencepiece tokenizers)."""
  if getattr(tokenizer, "chat_template", None):
    return prompt_pieces(tokenizer, "probe").turn_end_id
  return tokenizer.special("<|im_end|>")


def stop_ids(tokenizer) -> tuple[int, ...]:
  """Tokens that stop the policy's turn: the turn end, then every eos id the checkpoint's
  generation_config names (Llama-3 and Gemma list several), deduplicated in order."""
  ids = [turn_end_id(tokenizer), *getattr(tokenizer, "eos_ids", (tokenizer.eos_id,))]
  return tuple(dict.fromkeys(int(i) for i in ids))
