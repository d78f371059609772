"""TextHouse's action automaton against the plain-Python rule, its byte path and the
project's byte scanner (actions.ActionParser.scan over the whole action list); fuzzed turns."""
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agent_rl.envs.actions import ActionParser
from agent_rl.envs.base import Text
from agent_rl.envs.texthouse import catalog as C
from agent_rl.envs.texthouse.parse import HouseParser
from conftest import CharTokenizer
from texthouse import reference
from texthouse.common import ChunkTokenizer, turn_bytes, turns

ACTIONS = list(C.all_actions())
WIDTH = 64
_PARSERS = {}


def parser_for(tok):
  if id(tok) not in _PARSERS:
    p = HouseParser(tok)
    _PARSERS[id(tok)] = (p, jax.jit(jax.vmap(p)), jax.jit(jax.vmap(p.scan_bytes)))
  return _PARSERS[id(tok)]


def expected(tok, act):
  out = []
  for i in range(act.tokens.shape[0]):
    b = turn_bytes(tok, act.tokens[i], act.length[i])
    r = None if b is None else reference.parse(b)
    out.append((-1, 0, 0, False) if r is None else (*r, True))
  return np.asarray(out, np.int64)


def check(tok, act):
  _, lifted, by_bytes = parser_for(tok)
  want = expected(tok, act)
  for fn in (lifted, by_bytes):
    got = np.stack([np.asarray(x) for x in fn(act)], axis=1).astype(np.int64)
    np.testing.assert_array_equal(got, want)
  return want


def variants(rng, a):
  """Well-formed and malformed spellings of action `a`."""
  return [f"<answer>{a}</answer>", f"<answer> {a.upper()}\n</answer>", f"x<answer>{a}</answer>y",
          f"<answer>{a} </answer", f"<answer>{a}x</answer>", f"<answer>{a[:-1]}</answer>",
          f"<answer>{a.replace(' ', '  ', 1)}</answer>", f"<answer>{a}<</answer>",
          f"<ans<answer>{a}</answer>", f"<answer>\t{a}\t</answer><answer>look</answer>",
          f"<answer>{a} || look</answer>", a, f"<answer>{rng.choice(ACTIONS)} {a}</answer>"]


@pytest.mark.parametrize("chunked", [False, True])
def test_grammar_round_trip_and_malformed_variants(char_tok, chunked):
  rng = random.Random(0)
  tok = ChunkTokenizer() if chunked else char_tok
  texts = [t for a in rng.sample(ACTIONS, 60) + ["look", "inventory"] for t in variants(rng, a)]
  want = check(tok, turns(tok, texts, WIDTH))
  assert want[::13, 3].all()                          # each plain "<answer>a</answer>" parses
  assert want[:, 3].sum() < len(texts) // 2           # and most variants do not
  for i in range(0, len(texts), 13):
    assert C.action_text(*want[i, :3]) == texts[i][len("<answer>"):-len("</answer>")]


def test_matches_project_byte_scanner(char_tok):
  """The same rule as actions.ActionParser (max_actions=1) over the full word list."""
  rng = random.Random(1)
  words = C.all_actions()
  ap = ActionParser(char_tok, words, max_actions=1, max_answer_bytes=64, token_automaton=False)
  texts = [rng.choice(variants(rng, rng.choice(ACTIONS))) for _ in range(96)]
  act = turns(char_tok, texts, WIDTH)
  want = check(char_tok, act)
  got = jax.jit(jax.vmap(ap.scan))(act)
  np.testing.assert_array_equal(np.asarray(got.valid), want[:, 3].astype(bool))
  flat = np.asarray([C.action_id(*w[:3]) if w[3] else -1 for w in want])
  np.testing.assert_array_equal(np.where(np.asarray(got.valid), np.asarray(got.ids)[:, 0], -1), flat)


def test_random_token_ids_never_crash(char_tok):
  """Random ids (some out of range or negative) in two tokenizers: invalid unless the rule
  says otherwise, identical across the three implementations."""
  rng = np.random.default_rng(0)
  for tok in (ChunkTokenizer(), char_tok):
    v = tok.vocab_size
    ids = rng.integers(-3, v + 40, size=(256, WIDTH)).astype(np.int32)
    good = turns(tok, [f"<answer>{a}</answer>" for a in rng.choice(ACTIONS, 64)], WIDTH)
    ids[:64] = np.where(rng.random((64, WIDTH)) < 0.03, rng.integers(0, v, (64, WIDTH)), good.tokens)
    lens = np.concatenate([np.asarray(good.length), rng.integers(0, WIDTH + 1, 192)]).astype(np.int32)
    want = check(tok, Text(tokens=jnp.asarray(ids), length=jnp.asarray(lens)))
    assert want[64:, 3].sum() == 0 and want[:64, 3].sum() > 10


_ALPHABET = st.sampled_from(["<answer>", "</answer>", "<", ">", "/", " ", "\t", "\n", "|", "take ",
                             "mug 1", " from ", "cabinet 3", "go to ", "look", "Look", "open ",
                             "heat ", " with ", "microwave 1", "x", "1", "answer", "examine "])


_TOK = CharTokenizer()


@settings(max_examples=150, deadline=None)
@given(st.lists(_ALPHABET, max_size=14))
def test_fuzzed_turns(parts):
  check(_TOK, turns(_TOK, ["".join(parts)], WIDTH))
