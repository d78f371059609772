"""The token automaton (envs/token_parse.py) against the byte scanner and a plain-Python rule.

Five tokenizers: character-level (tags are single tokens), byte-level, a greedy longest-match
tokenizer whose vocabulary has pieces that straddle tags, separators and words ("er>up",
"p||d", "</ans", " || "), so one token can close a tag, end a segment and start the next, and
two Hugging Face byte-level BPEs (load_hf): a trained Qwen2-style one and a 40k-piece one of
random merges (many classes, every kind of straddling piece). Every fuzzed turn must give the same (valid, count, ids) on both paths and match
`ref_parse` (bytes.find / bytes.split / bytes.strip).
"""
import os
import tempfile
import time

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from agent_rl.envs import actions, render, token_parse
from agent_rl.envs.base import Text
from agent_rl.tokenizers import ByteTokenizer, load_hf, synthetic_byte_level
from tests.tokenizers.hf_fixtures import hf_dir
from conftest import CharTokenizer
from test_text import ref_parse

WORDS = {"up": 0, "Down": 1, "LEFT": 2, "right": 3, "north": 0, "go on": 1}
L = 40


class MergeTokenizer:
  """Greedy longest match over a vocabulary of odd multi-byte pieces plus every ASCII byte."""
  pad_id = 0
  PIECES = ["<answer>", "</answer>", "<ans", "wer>", "er>up", "</ans", "p||d", "||", " || ", "|",
            "own", "Up", "up</answer>", "left ", " Right", "n||", "go", " on", "\t"]

  def __init__(self):
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    self.vocab = ["<pad>"] + self.PIECES + [c for c in chars if c not in self.PIECES]

  def encode(self, s):
    out, i = [], 0
    while i < len(s):
      best = max((p for p in self.vocab[1:] if s.startswith(p, i)), key=len)
      out.append(self.vocab.index(best))
      i += len(best)
    return out

  def decode(self, ids):
    return "".join(self.vocab[int(i)] for i in ids if int(i))

  def byte_table(self):
    rows = [b""] + [p.encode() for p in self.vocab[1:]]
    t = np.zeros((len(rows), max(map(len, rows))), np.uint8)
    for i, r in enumerate(rows):
      t[i, :len(r)] = np.frombuffer(r, np.uint8)
    return t, np.array([len(r) for r in rows], np.int32)


_DIRS: list = []


def _synthetic(vocab_size):
  """A byte-level BPE (Qwen's format) of random merges: pieces straddle tags, words and "|"."""
  _DIRS.append(tempfile.TemporaryDirectory(prefix="synth_bpe_"))  # removed at exit
  out = os.path.join(_DIRS[-1].name, "tok")
  return load_hf(synthetic_byte_level(out, vocab_size, seed=1, words=[
      "up", "Down", "LEFT", "right", "<answer>", "</answer>", "||", " || ", "go on"]))


# qwen: a trained Qwen2-style byte-level BPE (hf_fixtures); synth: 40k random-merge pieces.
TOKENIZERS = {"char": CharTokenizer(), "byte": ByteTokenizer(), "merge": MergeTokenizer(),
              "qwen": load_hf(hf_dir("qwen2")), "synth": _synthetic(40_000)}
# (max_actions, max_answer_bytes) per tokenizer: one compile each keeps the room fast, and the
# small byte budgets make the length limit bind on some fuzzed turns.
CONFIGS = {"char": (2, 24), "byte": (1, 96), "merge": (3, 12), "qwen": (2, 20), "synth": (3, 16)}
_FNS = {}


def _parsers(name, max_actions, max_answer_bytes):
  """(automaton parse, scanner parse), jitted over a batch; built once per configuration."""
  key = (name, max_actions, max_answer_bytes)
  if key not in _FNS:
    p = actions.ActionParser(TOKENIZERS[name], WORDS, max_actions=max_actions,
                             max_answer_bytes=max_answer_bytes)
    assert p.automaton is not None
    _FNS[key] = (p, jax.jit(jax.vmap(p)), jax.jit(jax.vmap(p.scan)))
  return _FNS[key]


def _batch(rows):
  toks = np.zeros((len(rows), L), np.int32)
  lens = np.zeros((len(rows),), np.int32)
  for i, r in enumerate(rows):
    r = list(r)[:L]
    toks[i, :len(r)], lens[i] = r, len(r)
  return Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))


def _raw(tok, ids):
  table, lengths = tok.byte_table()
  ids = np.clip(np.asarray(ids, np.int64), 0, len(lengths) - 1)[:L]
  return b"".join(bytes(table[i, :lengths[i]]) for i in ids)


def _check(name, cfg, rows):
  tok = TOKENIZERS[name]
  _, fast, slow = _parsers(name, *cfg)
  batch = _batch(rows)
  a, b = fast(batch), slow(batch)
  np.testing.assert_array_equal(np.asarray(a.valid), np.asarray(b.valid))
  np.testing.assert_array_equal(np.asarray(a.count), np.asarray(b.count))
  np.testing.assert_array_equal(np.asarray(a.ids), np.asarray(b.ids))
  for i, r in enumerate(rows):
    raw = _raw(tok, r)
    want = ref_parse(raw, WORDS, *cfg)
    assert bool(a.valid[i]) == want[0], raw
    assert list(np.asarray(a.ids[i])[:int(a.count[i])]) == want[1], raw


FRAGMENTS = ["<answer>", "</answer>", "<ans", "wer>", "</ans", "up", "Up", "DOWN", "left", " Right",
             "north", "go on", "go", " ", "\t", "|", "||", " || ", "p||d", "er>up", "x", "<", ">", "n"]
TEXTS = st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join)
WELL_FORMED = st.tuples(
    st.sampled_from(["", "think ", "<answer", "</answer>"]),
    st.lists(st.tuples(st.sampled_from(["", " ", "\t "]),
                       st.sampled_from(["up", "DOWN", "Left", "rIGHT", "north", "go on", "go  on", "x", ""]),
                       st.sampled_from(["", " ", "\n"])).map("".join), min_size=1, max_size=4),
    st.sampled_from(["||", " || ", "|", "|||"]),
    st.sampled_from(["</answer>", "</answer> tail", "</ans", ""]),
).map(lambda t: t[0] + "<answer>" + t[2].join(t[1]) + t[3])


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.one_of(TEXTS, WELL_FORMED), min_size=16, max_size=16))
def test_automaton_matches_scanner_on_texts(name, texts):
  _check(name, CONFIGS[name], [TOKENIZERS[name].encode(s) for s in texts])


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31 - 1))
def test_automaton_matches_scanner_on_random_ids(name, seed):
  # Arbitrary ids, out-of-range and negative ones included (both paths clip them).
  rng = np.random.default_rng(seed)
  n = len(TOKENIZERS[name].byte_table()[1])
  rows = [rng.integers(-3, n + 3, size=rng.integers(0, L + 1)) for _ in range(16)]
  _check(name, CONFIGS[name], rows)


def test_well_formed_turns_parse():
  # A deterministic spot check (the fuzz above draws these too): the merge tokenizer splits
  # "<answer>up||down</answer>" across tag, separator and word boundaries.
  tok = TOKENIZERS["merge"]
  s = "<answer>up||down</answer>"
  assert any(len(tok.vocab[i]) > 1 and "|" in tok.vocab[i] for i in tok.encode(s))
  p, fast, _ = _parsers("merge", *CONFIGS["merge"])
  got = fast(_batch([tok.encode(s), tok.encode("<answer>go on||LEFT</answer>")]))
  assert np.asarray(got.valid).tolist() == [True, True]
  assert np.asarray(got.ids).tolist() == [[0, 1, -1], [1, 2, -1]]


def test_fallbacks_to_scanner():
  tok = TOKENIZERS["char"]
  t, lengths = tok.byte_table()
  # Too many states for the budget: no automaton, the parser scans bytes.
  assert token_parse.build(t, lengths, [b"up"], [0], 1, max_entries=100) is None
  small = actions.ActionParser(tok, {"up": 0}, token_automaton=False)
  assert small.automaton is None
  # A byte budget shorter than a full turn truncates mid-token: the scanner handles it.
  p = actions.ActionParser(tok, {"up": 0}, max_bytes=20)
  turn = _batch([tok.encode("<answer>up</answer>"), tok.encode("xyz <answer>up</answer>")])
  got = jax.vmap(p)(turn)
  assert np.asarray(got.valid).tolist() == [True, False]   # 20 bytes cut the second closing tag
  assert bool(jax.vmap(small)(turn).valid[1])


def test_render_static_layout_matches_compaction():
  # Character tokens make every piece's length fixed, so GridRenderer takes the gather path;
  # it must equal the general compaction of the same pieces and decode to the grid text.
  tok = TOKENIZERS["char"]
  glyphs = ("#", "_", "O", "√", "X", "P", "S")
  grid = render.GridRenderer(tok, glyphs, (5, 7), chunk=3)
  assert grid.static
  codes = jnp.asarray(np.random.default_rng(0).integers(0, len(glyphs), size=(16, 5, 7)), jnp.int32)
  fast = jax.jit(jax.vmap(grid.render))(codes)
  slow = jax.jit(jax.vmap(lambda c: grid.table.render(grid.piece_ids(c), grid.obs_len)))(codes)
  np.testing.assert_array_equal(np.asarray(fast.tokens), np.asarray(slow.tokens))
  np.testing.assert_array_equal(np.asarray(fast.length), np.asarray(slow.length))
  for i in range(3):
    assert tok.decode(np.asarray(fast.tokens[i])[:int(fast.length[i])]) == grid.text(codes[i])


def test_register_keeps_repeated_and_shared_words():
  # Words are written into the register digit by digit: repeats and aliases (north = up = 0,
  # "go on" = Down = 1) must come back in order, and segments past max_actions are dropped.
  tok = TOKENIZERS["synth"]
  _, fast, _ = _parsers("synth", *CONFIGS["synth"])
  rows = ["<answer>up||up||north</answer>", "<answer>go on||LEFT</answer>",
          "<answer>up||up||LEFT||x</answer>", "<answer>up||</answer>"]
  got = fast(_batch([tok.encode(r) for r in rows]))
  assert np.asarray(got.valid).tolist() == [True, True, True, False]
  assert np.asarray(got.ids).tolist() == [[0, 0, 0], [1, 2, -1], [0, 0, 2], [-1, -1, -1]]
  assert np.asarray(got.count).tolist() == [3, 2, 3, 0]
  _check("synth", CONFIGS["synth"], [tok.encode(r) for r in rows])


def test_large_vocab_builds_fast_with_few_classes():
  # The automaton's size does not follow the vocabulary: 40k pieces fall into ~10^3 classes.
  # (benchmarks/text_io.py times the 151,643-piece case: ~1 s per build.)
  t, lengths = TOKENIZERS["synth"].byte_table()
  start = time.perf_counter()
  auto = token_parse.build(t, lengths, [b"up", b"down", b"left", b"right"], [0, 1, 2, 3], 2)
  took = time.perf_counter() - start
  assert auto is not None and auto.cls.shape == (len(lengths),)
  assert auto.next.shape[1] < 2000 and took < 10.0, (auto.next.shape, took)
