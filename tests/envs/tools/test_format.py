"""The tool-call layer vs a plain-Python parser (str.find on the turn's bytes), fuzzed with
hypothesis over tag fragments and garbage bytes, with byte-level, character-level and
SentencePiece tokenizers (tags split across tokens); budget, info keys, messages, metrics."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agent_rl.envs import tools
from agent_rl.envs.base import Text
from agent_rl.envs.tools import errors as E
from agent_rl.tokenizers import ByteTokenizer
from conftest import CharTokenizer

A_LEN = 96
NAMES = ("search", "calc", "answer")
MAX_ARG, MAX_BYTES = 16, 80


def ref_parse(b: bytes, names=NAMES, max_arg=MAX_ARG, max_bytes=MAX_BYTES):
  """(kind, arg, error): the documented rule, written with bytes.find."""
  b = b[:max_bytes]
  t0 = b.find(b"<think>")
  t0 = len(b) if t0 < 0 else t0
  c = b.find(b"</think>", t0 + 7) if t0 < len(b) else -1
  t1 = c + 8 if c >= 0 else t0
  best = None
  for k, name in enumerate(names):
    tag, p = f"<{name}>".encode(), -1
    while True:
      p = b.find(tag, p + 1)
      if p < 0 or not t0 <= p < t1:
        break
    if p >= 0 and (best is None or p < best[1]):
      best = (k, p)
  if best is None:
    return -1, b"", E.NO_CALL
  k, p = best
  start = p + len(names[k]) + 2
  end = b.find(f"</{names[k]}>".encode(), start)
  if end < 0:
    return k, b"", E.UNCLOSED
  arg = b[start:end].strip()
  if not arg:
    return k, b"", E.EMPTY
  if len(arg) > max_arg:
    return k, b"", E.TOO_LONG
  return k, arg, E.OK


def encode_batch(tok, strs, a_len=A_LEN):
  toks = np.zeros((len(strs), a_len), np.int32)
  lens = np.zeros((len(strs),), np.int32)
  for i, s in enumerate(strs):
    ids = list(tok.encode(s))[:a_len]
    toks[i, :len(ids)] = ids
    lens[i] = len(ids)
  return Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))


def surface(tok, text: Text, i: int) -> bytes:
  """The turn's bytes by the tokenizer's byte table (what the model 'wrote')."""
  table, lens = tok.byte_table()
  ids = np.asarray(text.tokens[i])[:int(text.length[i])]
  return b"".join(bytes(table[t, :lens[t]]) for t in ids)


@functools.lru_cache(maxsize=None)
def fmt_for(tok):
  return tools.ToolFormat(tok, tools=NAMES[:-1], answer=NAMES[-1], max_arg_bytes=MAX_ARG,
                          max_bytes=MAX_BYTES, budget=2, fatal=("unclosed", "budget"), tool_errors=())


@functools.partial(jax.jit, static_argnums=0)
def vparse(fmt, text):
  return jax.vmap(fmt.parse)(text)


def check(tok, strs):
  fmt = fmt_for(tok)
  text = encode_batch(tok, strs)
  call = vparse(fmt, text)
  for i in range(len(strs)):
    kind, arg, err = ref_parse(surface(tok, text, i))
    got = (int(call.kind[i]), bytes(np.asarray(call.arg[i])[:int(call.arg_len[i])]), int(call.error[i]))
    assert got == (kind, arg, err), (strs[i], got, (kind, arg, err))
    assert not np.asarray(call.arg[i])[int(call.arg_len[i]):].any()


CASES = [
    "<search>capital of france</search>",
    "<think>I should <search>x</search></think><answer> Paris </answer>",
    "<think>unclosed think <search>q</search>",
    "<search>q",                                    # unclosed
    "<search>   </search>",                         # empty
    "<search>" + "a" * 40 + "</search>",            # too long
    "no tags at all",
    "<answer>1</answer><search>later</search>",     # the first tag wins
    "<search><search>nested</search></search>",
    "<search>a</calc></search>",
    "</search><search>ok</search>",
    "<calc> 2 + 3 </calc>",
    "<answer></answer>",
    "x" * 70 + "<search>cut at max_bytes</search>",  # the close tag lies past MAX_BYTES
    "<think></think><calc>1</calc>",
    "<SEARCH>case</SEARCH>",                        # tags are case-sensitive, like Search-R1's regex
]


@pytest.mark.parametrize("tok", [ByteTokenizer(), CharTokenizer()], ids=["byte", "char"])
def test_cases_match_reference(tok):
  check(tok, CASES)


class PieceTokenizer:
  """BPE-like: the 256 bytes plus multi-byte pieces that cut tags at odd places, encoded by
  greedy longest match (so a tag may be one token, or split across 2-3 tokens)."""
  pad_id = 0
  PIECES = ("<se", "arch>", "</s", "earch", "<search>", "</answer>", "<ans", "wer>", "</think",
            "> ", "paris", " q", "<calc>", "c>", "</", "1+")

  def __init__(self):
    self.vocab = [b""] + [bytes([b]) for b in range(256)] + [p.encode() for p in self.PIECES]

  def encode(self, text):
    b, out, i = text.encode(), [], 0
    while i < len(b):
      j = max((k for k, v in enumerate(self.vocab) if v and b.startswith(v, i)),
              key=lambda k: len(self.vocab[k]))
      out.append(j)
      i += len(self.vocab[j])
    return out

  def decode(self, ids):
    return b"".join(self.vocab[int(i)] for i in ids).decode("utf-8", "replace")

  def byte_table(self):
    k = max(len(v) for v in self.vocab)
    table = np.zeros((len(self.vocab), k), np.uint8)
    for i, v in enumerate(self.vocab):
      table[i, :len(v)] = np.frombuffer(v, np.uint8)
    return table, np.array([len(v) for v in self.vocab], np.int32)


PIECE_TOK = PieceTokenizer()


def test_cases_bpe_like():
  check(PIECE_TOK, CASES)


@pytest.mark.slow
def test_cases_sentencepiece(sp_tok):
  check(sp_tok, CASES)


FRAGMENTS = ["<think>", "</think>", "<search>", "</search>", "<calc>", "</calc>", "<answer>",
             "</answer>", "<", ">", "/", "search", " ", "\n", "q", "paris", "1+2", "\t", "é", "<se",
             "arch>", "</"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join), min_size=4, max_size=4))
def test_fuzz_fragments_byte_tokenizer(strs):
  check(ByteTokenizer(), strs)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join), min_size=4, max_size=4))
def test_fuzz_fragments_bpe_like(strs):
  check(PIECE_TOK, strs)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join), min_size=4, max_size=4))
def test_fuzz_fragments_sentencepiece(sp_tok, strs):
  check(sp_tok, strs)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, ByteTokenizer().vocab_size + 50), max_size=A_LEN),
                min_size=4, max_size=4))
def test_fuzz_garbage_token_ids(rows):
  """Any ids (out-of-range ones included) never raise; in-range ones match the reference."""
  tok = ByteTokenizer()
  fmt = fmt_for(tok)
  toks = np.zeros((4, A_LEN), np.int32)
  lens = np.array([len(r) for r in rows], np.int32)
  for i, r in enumerate(rows):
    toks[i, :len(r)] = r
  call = vparse(fmt, Text(jnp.asarray(toks), jnp.asarray(lens)))
  table, blens = tok.byte_table()
  for i, r in enumerate(rows):
    ids = np.clip(np.asarray(r, np.int64), 0, table.shape[0] - 1)
    b = b"".join(bytes(table[t, :blens[t]]) for t in ids)
    kind, arg, err = ref_parse(b)
    assert (int(call.kind[i]), int(call.error[i])) == (kind, err)
    assert bytes(np.asarray(call.arg[i])[:int(call.arg_len[i])]) == arg


def test_charge_budget_and_turn_info():
  tok = CharTokenizer()
  fmt = fmt_for(tok)
  strs = ["<search>a</search>", "<search>b</search>", "<search>c</search>", "<answer>x</answer>",
          "<search>d", "nothing"]
  calls = vparse(fmt, encode_batch(tok, strs))
  used, infos = jnp.int32(0), []
  charge = jax.jit(lambda c, u: (lambda c2, u2: (c2, u2, fmt.turn_info(c2)))(*fmt.charge(c, u)))
  for i in range(len(strs)):
    call, used, info = charge(jax.tree.map(lambda x: x[i], calls), used)
    infos.append((int(call.error), {k: bool(v) for k, v in info.items()}))
  assert int(used) == 2 and fmt.budget == 2
  assert [e for e, _ in infos] == [E.OK, E.OK, E.BUDGET, E.OK, E.UNCLOSED, E.NO_CALL]
  assert [i["tool_call"] for _, i in infos] == [True, True, True, False, True, False]
  assert [i["tool_error"] for _, i in infos] == [False, False, True, False, True, True]
  assert [i["answered"] for _, i in infos] == [False, False, False, True, False, False]
  assert [i["fatal"] for _, i in infos] == [False, False, True, False, True, False]  # declared fatal
  # a tool-specific code replaces OK only; a finished episode reports nothing
  code = tools.register_error("test_tool_fault", "the <{tag}> tool failed")
  call = jax.tree.map(lambda x: x[0], calls)
  c2, u2 = fmt.charge(call, jnp.int32(0), error=jnp.int32(code))
  assert int(c2.error) == code and int(u2) == 0
  assert not any(bool(v) for v in fmt.turn_info(call, live=jnp.bool_(False)).values())
  assert tools.register_error("test_tool_fault", "the <{tag}> tool failed") == code
  with pytest.raises(ValueError, match="test_tool_fault"):
    tools.register_error("test_tool_fault", "another message")
  # a format renders its declared codes; another registration leaves other formats as they were
  before = tools.ToolFormat(tok, tools=("calc",), tool_errors=())
  tools.register_error("test_other_fault", "unrelated")
  assert tools.ToolFormat(tok, tools=("calc",), tool_errors=()) == before
  assert tools.ToolFormat(tok, tools=("calc",)).message_text(code, 0).endswith("tool failed</information>\n\n")
  decl = tools.ToolFormat(tok, tools=("calc",), tool_errors=("test_tool_fault",), fatal="*")
  assert decl.message_text(code, 0) == "\n\n<information>error: the <calc> tool failed</information>\n\n"
  assert before.message_text(code, 0) == "\n\n<information>error: tool error</information>\n\n"
  assert code in decl.fatal_codes
  with pytest.raises(ValueError, match="tool_errors"):
    tools.ToolFormat(tok, tools=("calc",), fatal=("test_tool_fault",), tool_errors=())


def test_messages_render():
  tok = ByteTokenizer()
  fmt = fmt_for(tok)
  calls = vparse(fmt, encode_batch(tok, ["<search>q", "<calc> </calc>", "hello", "<search>ok</search>"]))
  want = ["\n\n<information>error: unclosed <search> tag</information>\n\n",
          "\n\n<information>error: empty <calc> argument</information>\n\n",
          "\n\n<information>error: no <search> or <calc> or <answer> tag found</information>\n\n", ""]
  msgs = jax.jit(jax.vmap(fmt.message))(calls)
  for i, w in enumerate(want):
    m = jax.tree.map(lambda x: x[i], msgs)
    assert m.tokens.shape == (fmt.message_len,)
    assert tok.decode(np.asarray(m.tokens)[:int(m.length)]) == w
  assert fmt.message_text(E.TOO_LONG, 0).endswith(f"argument longer than {MAX_ARG} bytes</information>\n\n")
  text = fmt.instruction_text()
  assert "<search> query </search>" in text and "<answer> Beijing </answer>" in text


def test_text_helpers_against_numpy():
  rng = np.random.default_rng(0)
  table = rng.integers(5, 50, (7, 6)).astype(np.int32)
  lens = np.array([6, 3, 0, 5, 2, 6, 1], np.int32)
  rows = np.array([3, -1, 0, 6], np.int32)
  sep = Text(tokens=jnp.asarray([9, 9, 0], jnp.int32), length=jnp.int32(2))
  out = tools.render_results(table, lens, rows, budget=4, out_len=20, pad_id=0, sep=sep)
  ref = [t for r in rows if r >= 0 for t in list(table[r, :min(lens[r], 4)]) + [9, 9]][:20]
  assert int(out.length) == len(ref) and list(np.asarray(out.tokens)[:len(ref)]) == ref
  assert not np.asarray(out.tokens)[len(ref):].any()
  t = tools.truncate(Text(jnp.asarray(table[0]), jnp.int32(6)), 4, pad_id=0)
  assert list(np.asarray(t.tokens)) == list(table[0, :4]) + [0, 0] and int(t.length) == 4
  c = tools.concat([Text(jnp.asarray(table[1]), jnp.int32(3)), Text(jnp.asarray([1, 2]), jnp.int32(2))],
                   out_len=4, pad_id=0)
  assert list(np.asarray(c.tokens)) == list(table[1, :3]) + [1] and int(c.length) == 4


def test_tool_metrics_against_loops():
  from types import SimpleNamespace
  rng = np.random.default_rng(1)
  n, t = 5, 4
  valid = np.arange(t)[None, :] < rng.integers(1, t + 1, (n, 1))
  ex = {k: rng.random((n, t)) < 0.5 for k in ("tool_call", "tool_error", "answered", "parametric")}
  ex["em"] = rng.random((n, t)).astype(np.float32)
  fatal = rng.random((n, t)) < 0.3
  batch = SimpleNamespace(valid=jnp.asarray(valid), fatal=jnp.asarray(fatal),
                          extras={k: jnp.asarray(v) for k, v in ex.items()})
  m = tools.tool_metrics(batch)
  p = "rollout/tools/"
  calls = [sum(ex["tool_call"][i, j] for j in range(t) if valid[i, j]) for i in range(n)]
  np.testing.assert_allclose(m[p + "calls_per_episode"], np.mean(calls), rtol=1e-6)
  np.testing.assert_allclose(m[p + "answer_rate"],
                             np.mean([any(ex["answered"][i, j] and valid[i, j] for j in range(t)) for i in range(n)]))
  np.testing.assert_allclose(m[p + "em"], np.mean([ex["em"][i, valid[i].sum() - 1] for i in range(n)]), rtol=1e-6)
  par = [any(ex["parametric"][i] & valid[i]) for i in range(n)]
  np.testing.assert_allclose(m[p + "calls_per_parametric_episode"],
                             sum(c for c, q in zip(calls, par) if q) / max(sum(par), 1), rtol=1e-6)
  np.testing.assert_allclose(m[p + "fatal_per_episode"], np.mean((fatal & valid).sum(axis=1)), rtol=1e-6)
  assert tools.tool_metrics(SimpleNamespace(valid=batch.valid, fatal=batch.fatal, extras={})) == {}


def test_construction_errors():
  tok = CharTokenizer()
  with pytest.raises(ValueError, match="tools"):
    tools.ToolFormat(tok, tools=())
  with pytest.raises(ValueError, match="tag names"):
    tools.ToolFormat(tok, tools=("se<arch",))
  with pytest.raises(ValueError, match="help"):
    tools.ToolFormat(tok, tools=("browse",))
  with pytest.raises(KeyError, match="nonexistent"):
    tools.ToolFormat(tok, tools=("search",), fatal=("nonexistent",))
  with pytest.raises(ValueError, match="max_arg_bytes"):
    tools.ToolFormat(tok, tools=("search",), max_arg_bytes=0)
  a, b = (tools.ToolFormat(tok, tools=("search",), tool_errors=()) for _ in range(2))
  assert a == b and hash(a) == hash(b)
