"""Tests for the env text modules (render, byte_scan, actions) against plain-Python references
(str.join, bytes.split, re)."""
import re

import chex
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck

from agent_rl.envs import actions, byte_scan, render
from agent_rl.envs.base import Text
from conftest import CharTokenizer

TOK = CharTokenizer()
WORDS = {"up": 0, "Down": 1, "LEFT": 2, "right": 3, "north": 0}
A_LEN = 48


def ref_parse(raw: bytes, words, max_actions, max_answer_bytes):
  """Plain-Python statement of the well-formedness rule in actions.py's docstring."""
  i = raw.find(b"<answer>")
  if i < 0:
    return False, []
  j = raw.find(b"</answer>", i + 8)
  if j < 0 or j - (i + 8) > max_answer_bytes:
    return False, []
  lookup = {w.lower().encode(): v for w, v in words.items()}
  ids = []
  for seg in raw[i + 8:j].split(b"||")[:max_actions]:
    key = seg.strip().lower()
    if key not in lookup:
      return False, []
    ids.append(lookup[key])
  return True, ids


def _text(ids, length=A_LEN):
  toks = np.zeros((length,), np.int32)
  ids = list(ids)[:length]
  toks[:len(ids)] = ids
  return Text(tokens=jnp.asarray(toks), length=jnp.int32(len(ids)))


def test_compact_matches_join():
  rng = np.random.default_rng(0)
  for _ in range(20):
    vals = rng.integers(1, 50, size=(7, 4))
    lens = rng.integers(0, 5, size=(7,))
    out, n = render.compact(jnp.asarray(vals), jnp.asarray(lens), 20, -1)
    ref = [int(v) for r, l in zip(vals, lens) for v in r[:l]][:20]
    assert int(n) == len(ref)
    np.testing.assert_array_equal(np.asarray(out)[:len(ref)], ref)
    assert np.all(np.asarray(out)[len(ref):] == -1)


def test_piece_table_render_decodes_to_join():
  pieces = ["#", "_", "P", "√", "\n", "State:\n", "10"]
  table = render.PieceTable(TOK, pieces)
  render_fn = jax.jit(lambda ids, m: table.render(ids, 30, m))
  rng = np.random.default_rng(1)
  for _ in range(10):
    ids = rng.integers(0, len(pieces), size=(9,))
    mask = rng.random(9) < 0.8
    out = render_fn(jnp.asarray(ids), jnp.asarray(mask))
    want = "".join(pieces[i] for i, m in zip(ids, mask) if m)
    assert TOK.decode(np.asarray(out.tokens)[:int(out.length)]) == want
    assert table.render_host([pieces[i] for i, m in zip(ids, mask) if m]) == TOK.encode(want)
  assert table.max_tokens([["State:\n"], ["#", "10"]]) == 7 + 2
  with pytest.raises(KeyError, match="'nope'"):
    table.id("nope")


def test_tables_hash_by_content():
  a, b = render.PieceTable(TOK, ["a", "b"]), render.PieceTable(CharTokenizer(), ["a", "b"])
  assert a == b and hash(a) == hash(b)
  assert a != render.PieceTable(TOK, ["a", "c"])


def test_int_pieces():
  digit_ids = jnp.arange(10) + 100
  for v in (0, 7, 42, 905, 12345):
    ids, mask = render.int_pieces(jnp.int32(v), digit_ids, 5)
    assert [int(i) - 100 for i in np.asarray(ids)[np.asarray(mask)]] == [int(c) for c in str(v)]


@pytest.mark.parametrize("s,want", [
    (b"<answer>Up || LEFT</answer>", (True, [0, 2])),
    (b"xx<answer> north </answer><answer>down</answer>", (True, [0])),
    (b"<answer>up||||down</answer>", (False, [])),
    (b"<answer>up|||down</answer>", (False, [])),
    (b"<answer></answer>", (False, [])),
    (b"<answer>up", (False, [])),
    (b"up</answer><answer>down", (False, [])),
    (b"<answer>up || down || left || right</answer>", (True, [0, 1, 2])),  # truncated to 3
    (b"<answer>upp</answer>", (False, [])),
])
def test_parser_examples(s, want):
  assert ref_parse(s, WORDS, 3, 40) == want
  got = _PARSE3(_text(TOK.encode(s.decode())))
  assert bool(got.valid) == want[0]
  n = int(got.count)
  assert list(np.asarray(got.ids)[:n]) == want[1]
  assert np.all(np.asarray(got.ids)[n:] == -1)


_PARSE3 = jax.jit(actions.ActionParser(TOK, WORDS, max_actions=3, max_answer_bytes=40).__call__)
FRAGMENTS = ["<answer>", "</answer>", "up", "Up", "DOWN", "left", "Right", "north", " ", "|", "||",
             "\n", "x", "1", "<think>", "ans", "<", ">"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=16).map("".join),
    st.lists(st.integers(0, TOK.vocab_size + 5), max_size=A_LEN).map(
        lambda ids: [min(i, TOK.vocab_size - 1) for i in ids]),
))
def test_parser_fuzz_matches_reference(sample):
  parser = _PARSER
  ids = TOK.encode(sample) if isinstance(sample, str) else sample
  ids = ids[:A_LEN]
  raw = "".join(TOK.vocab[i] for i in ids if i != 0).encode()
  want = ref_parse(raw, WORDS, 2, 24)
  got = _PARSE(_text(ids))
  assert bool(got.valid) == want[0], raw
  assert list(np.asarray(got.ids)[:int(got.count)]) == want[1], raw


_PARSER = actions.ActionParser(TOK, WORDS, max_actions=2, max_answer_bytes=24)
_PARSE = jax.jit(_PARSER.__call__)


def test_parser_garbage_tokens_never_crash():
  # Out-of-range and negative ids are clamped, lengths beyond the array are fine.
  bad = Text(tokens=jnp.asarray([-5, 10 ** 6, 3, 2] * 12, jnp.int32), length=jnp.int32(999))
  got = _PARSE(bad)
  assert not bool(got.valid)


@jax.jit
def _split_ints(b, n):
  starts, lens, count = byte_scan.split_segments(b, n, max_segments=4)
  vals, ok = byte_scan.parse_ints(byte_scan.segment_windows(b, starts, lens, 11), lens)
  return vals, ok, count


@given(st.lists(st.sampled_from(["7", "-", "+", "0", "12", " ", "a", "||", "1234567890"]), max_size=8))
@settings(max_examples=100, deadline=None)
def test_parse_ints_matches_regex(parts):
  s = "".join(parts).encode()
  b = jnp.asarray(np.frombuffer(s.ljust(32, b"\0")[:32], np.uint8))
  vals, ok, count = _split_ints(b, jnp.int32(min(len(s), 32)))
  segs = s[:32].split(b"||")
  assert int(count) == len(segs)
  for k, seg in enumerate(segs[:4]):
    seg = seg.strip()
    m = re.fullmatch(rb"[+-]?[0-9]{1,9}", seg)
    assert bool(ok[k]) == bool(m), seg
    if m:
      assert int(vals[k]) == int(seg)


def test_parser_vmap_no_retrace():
  parser = actions.ActionParser(TOK, WORDS, max_actions=2)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def parse(batch):
    return jax.vmap(parser)(batch)

  for s in (["<answer>up</answer>", "bad"], ["<answer>Down||left</answer>", "<answer>x</answer>"]):
    batch = jax.tree.map(lambda *x: jnp.stack(x), *[_text(TOK.encode(t)) for t in s])
    out = parse(batch)
    for t, v in zip(s, np.asarray(out.valid)):
      assert bool(v) == ref_parse(t.encode(), WORDS, 2, 128)[0]
