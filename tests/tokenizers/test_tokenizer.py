"""Tests for the SentencePiece wrapper: reproducible training, exact round-trip, id layout,
and the byte table checked against sentencepiece's own decoder and raw UTF-8."""
import os

import numpy as np
import pytest
import sentencepiece as spm
from hypothesis import given, settings, strategies as st

from agent_rl.tokenizers import (BOS_ID, EOS_ID, NEWLINE, PAD_ID, SPECIAL_TOKENS, UNK_ID,
                                 Tokenizer, train_tokenizer)


def _corpus():
  moves = ["up", "down", "left", "right"]
  out = []
  for i in range(400):
    out.append(
        f"<|im_start|>user\nYou are at ({i % 7}, {i % 5}).  The box is at ({i % 3},{i % 11}).\n"
        f"\tWalls: {'#' * (i % 6)}   Goal: {i * 37}\n<|im_end|>\n<|im_start|>assistant\n"
        f"<think>go {moves[i % 4]} then {moves[(i + 1) % 4]}</think><answer>{moves[i % 4]}</answer>"
        f"<|im_end|>\n<observation>Reward {i % 2}.</observation>")
  return out


ENV_TEXTS = [
    "The box is at (3, 4).\nYou are at  (1,2).\n\n  Move left?",
    "  leading spaces and trailing   ",
    "<answer>left</answer>\n",
    "<|im_start|>system\nSolve it.<|im_end|>\n<think>12 + 30 = 42</think><answer>42</answer>",
    "émoji 🙂 ok\r\n\tTab\n",
    "\n\n\n",
    "zzz qqq xyzzy 9876543210",
    "<prediction>box moves</prediction><observation>ok</observation>",
]


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("tok") / "bpe.model")
  return train_tokenizer(_corpus(), path, 420, extra_symbols=["go north", "<act>"])


@pytest.fixture(scope="module")
def tok(bpe_path):
  return Tokenizer.load(bpe_path)


@pytest.fixture(scope="module")
def unigram_tok(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("tok") / "uni.model")
  return Tokenizer.load(train_tokenizer(_corpus(), path, 320, model_type="unigram"))


@pytest.mark.parametrize("model_type,vocab", [("bpe", 420), ("unigram", 320)])
def test_training_is_byte_identical(tmp_path, model_type, vocab):
  a = train_tokenizer(_corpus(), str(tmp_path / "a.model"), vocab, model_type=model_type)
  b = train_tokenizer(iter(_corpus()), str(tmp_path / "sub" / "b.model"), vocab,
                      model_type=model_type)
  with open(a, "rb") as fa, open(b, "rb") as fb:
    assert fa.read() == fb.read()


def test_id_layout(tok, unigram_tok):
  for t in (tok, unigram_tok):
    assert (t.pad_id, t.unk_id, t.bos_id, t.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    for k, s in enumerate(SPECIAL_TOKENS):
      assert t.special(s) == 4 + k
      assert t.id_to_piece(4 + k) == s
    assert t.special(NEWLINE) == 14
  assert tok.vocab_size == 420 and unigram_tok.vocab_size == 320
  assert tok.special("go north") == 15 and tok.special("<act>") == 16


@pytest.mark.parametrize("s", ENV_TEXTS)
def test_round_trip_env_texts(tok, unigram_tok, s):
  for t in (tok, unigram_tok):
    assert t.decode(t.encode(s)) == s


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\u2581",
                                      blacklist_categories=("Cs",)), max_size=60))
def test_round_trip_property(tok, s):
  ids = tok.encode(s)
  assert tok.decode(ids) == s
  # Byte table: concatenating the rows of encode(s) is exactly the UTF-8 of s.
  table, lengths = tok.byte_table()
  got = b"".join(table[i, :lengths[i]].tobytes() for i in ids)
  assert got == s.encode("utf-8")


@pytest.mark.parametrize("s", ENV_TEXTS)
def test_byte_table_concatenation(tok, unigram_tok, s):
  for t in (tok, unigram_tok):
    table, lengths = t.byte_table()
    ids = np.asarray(t.encode(s, add_bos=True, add_eos=True))
    # Vectorized read as jitted code would do it: gather rows, keep the first `length` bytes.
    mask = np.arange(table.shape[1])[None, :] < lengths[ids][:, None]
    assert table[ids][mask].tobytes() == s.encode("utf-8")


def test_byte_table_matches_sentencepiece_decoder(tok, bpe_path):
  # Reference: sentencepiece's decoder on each id, with a sentinel prefix so a leading
  # '▁' is decoded mid-text; byte pieces checked from their <0xNN> spelling.
  sp = spm.SentencePieceProcessor(model_file=bpe_path)
  table, lengths = tok.byte_table()
  assert table.dtype == np.uint8 and lengths.dtype == np.int32
  assert table.shape[0] == lengths.shape[0] == tok.vocab_size
  x = sp.piece_to_id("x")
  n_byte = 0
  for i in range(tok.vocab_size):
    row = table[i, :lengths[i]].tobytes()
    assert not table[i, lengths[i]:].any()
    if sp.is_byte(i):
      n_byte += 1
      assert row == bytes([int(sp.id_to_piece(i)[3:5], 16)])
    elif sp.is_control(i):
      assert row == b""
    else:
      assert row == sp.decode([x, i]).encode("utf-8")[1:], (i, sp.id_to_piece(i))
  assert n_byte == 256
  assert table[tok.special("<answer>"), :lengths[tok.special("<answer>")]].tobytes() == b"<answer>"
  assert lengths[tok.pad_id] == lengths[tok.bos_id] == lengths[tok.eos_id] == 0


def test_digits_are_split(tok):
  # Every token carrying a digit carries exactly one (maybe with a space before it).
  surfaces = [tok.piece_bytes(i).decode() for i in tok.encode("x 1234567890 y 42")]
  digits = [s.strip() for s in surfaces if any(c.isdigit() for c in s)]
  assert digits == list("123456789042")


def test_specials_and_extra_symbols_are_single_tokens(tok):
  for s in SPECIAL_TOKENS + ("\n", "go north", "<act>"):
    assert tok.encode(s) == [tok.special(s)]
  assert tok.decode(tok.encode("please go north now")) == "please go north now"
  assert tok.special("go north") in tok.encode("please go north now")


def test_decode_ignores_pad_bos_eos_and_accepts_arrays(tok):
  s = "You are at (1,2).\n"
  ids = tok.encode(s, add_bos=True, add_eos=True)
  assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
  padded = np.asarray(ids + [tok.pad_id] * 5, np.int32)
  assert tok.decode(padded) == s
  assert tok.decode([tok.pad_id, *ids]) == s
  with pytest.raises(ValueError, match="token id 99999"):
    tok.decode([3, 99999])


def test_encode_padded(tok):
  tokens, lengths = tok.encode_padded(["go up", "", "<answer>left</answer>"], 12)
  assert tokens.shape == (3, 12) and tokens.dtype == np.int32 and lengths.dtype == np.int32
  for row, n, s in zip(tokens, lengths, ["go up", "", "<answer>left</answer>"]):
    assert list(row[:n]) == tok.encode(s)
    assert (row[n:] == tok.pad_id).all()
    assert tok.decode(row) == s
  with pytest.raises(ValueError, match=r"texts\[1\] needs"):
    tok.encode_padded(["a", "a very long text " * 5], 4)


def test_special_errors(tok):
  with pytest.raises(KeyError, match="<nope>"):
    tok.special("<nope>")
  with pytest.raises(KeyError, match="ordinary piece"):
    tok.special("x")


def test_load_errors_name_the_file(tmp_path):
  missing = str(tmp_path / "missing.model")
  with pytest.raises(FileNotFoundError, match="missing.model"):
    Tokenizer.load(missing)
  bad = tmp_path / "corrupt.model"
  bad.write_bytes(b"\x00not a sentencepiece model")
  with pytest.raises(ValueError, match="corrupt.model"):
    Tokenizer.load(str(bad))


def test_training_argument_errors(tmp_path):
  out = str(tmp_path / "x.model")
  with pytest.raises(ValueError, match="model_type"):
    train_tokenizer(["a b"], out, 400, model_type="wordpiece")
  with pytest.raises(ValueError, match="vocab_size=100"):
    train_tokenizer(["a b"], out, 100)
  with pytest.raises(ValueError, match=r"extra_symbols\[1\]"):
    train_tokenizer(["a b"], out, 400, extra_symbols=["<x>", "<answer>"])
  with pytest.raises(ValueError, match="empty"):
    train_tokenizer(["", ""], out, 400)
  with pytest.raises(ValueError, match="hard_vocab_limit"):
    train_tokenizer(["hello world"] * 3, out, 2000)
  assert not os.path.exists(out)


def test_soft_vocab_limit(tmp_path):
  path = train_tokenizer(["hello world", "foo bar"] * 3, str(tmp_path / "s.model"), 2000,
                         hard_vocab_limit=False)
  t = Tokenizer.load(path)
  assert 4 + 11 + 256 < t.vocab_size < 2000
  assert t.decode(t.encode("hello\n  world")) == "hello\n  world"


def _byte_encode_loop(text: str) -> list[int]:
  """ByteTokenizer's rule as a character loop: at each position the first special token of
  SPECIAL_TOKENS that starts there, else the character's UTF-8 bytes."""
  from agent_rl.tokenizers import ByteTokenizer
  out, i = [], 0
  while i < len(text):
    for j, s in enumerate(SPECIAL_TOKENS):
      if text.startswith(s, i):
        out.append(4 + j)
        i += len(s)
        break
    else:
      out.extend(ByteTokenizer._BASE + b for b in text[i].encode("utf-8"))
      i += 1
  return out


_PIECES = st.sampled_from(["a", "<", "|", ">", "/", " ", "\n", "é", "日", *SPECIAL_TOKENS,
                           *[s[:-1] for s in SPECIAL_TOKENS], *[s[1:] for s in SPECIAL_TOKENS]])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=30).map("".join))
def test_byte_tokenizer_encode_matches_the_character_loop(text):
  from agent_rl.tokenizers import ByteTokenizer
  tok = ByteTokenizer()
  ids = tok.encode(text, add_bos=True, add_eos=True)
  assert ids == [BOS_ID] + _byte_encode_loop(text) + [EOS_ID]
  assert tok.decode(ids) == text
  with pytest.raises(TypeError, match="str"):
    tok.encode(b"bytes")


def test_byte_tokenizer_encode_padded_rows_are_the_character_loop():
  from agent_rl.tokenizers import ByteTokenizer
  texts = ["go <answer>up</answer>", "", "é日"]
  tokens, lengths = ByteTokenizer().encode_padded(texts, 30, add_eos=True)
  for row, n, text in zip(tokens, lengths, texts):
    ids = _byte_encode_loop(text) + [EOS_ID]
    assert int(n) == len(ids) and row[:n].tolist() == ids and not row[n:].any()
  with pytest.raises(ValueError, match=r"texts\[1\] needs"):
    ByteTokenizer().encode_padded(["a", "abcdef"], 4)
