"""load_hf against transformers.AutoTokenizer (the reference) on locally trained Qwen2-,
Llama-3- and Gemma-style tokenizer.json directories: encode/decode parity on fuzzed text
(unicode, whitespace runs, special tokens inside text), the byte table against raw UTF-8,
special ids from the config files, and clear errors for bad directories."""
import json
import os
import unicodedata

import numpy as np
import pytest
import transformers
from hypothesis import HealthCheck, given, settings, strategies as st

from agent_rl.tokenizers import HFTokenizer, Tokenizer, load_hf, load_tokenizer
from tests.tokenizers.hf_fixtures import PADS, edited_copy, hf_dir

STYLES = ("qwen2", "llama3", "gemma")
SPECIALS = {"qwen2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>"],
            "llama3": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"],
            "gemma": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<pad>"]}
_TOKS: dict = {}


def _pair(style):
  if style not in _TOKS:
    d = hf_dir(style)
    _TOKS[style] = (load_hf(d, pad_token=PADS.get(style)), transformers.AutoTokenizer.from_pretrained(d))
  return _TOKS[style]


FRAGMENT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8),
    st.sampled_from(["  ", "\n\n", " \n ", "\t\t", "\r\n", "   x", "e\u0301", "日本語", "🙂🙂",
                     "don't", "12345", "<answer>up || down</answer>", "Ġ", "\u2581", "<0x41>"]),
    st.sampled_from(sorted({t for v in SPECIALS.values() for t in v})))
TEXT = st.lists(FRAGMENT, max_size=10).map("".join)


@pytest.mark.parametrize("style", STYLES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
def test_encode_decode_match_transformers(style, text):
  ours, ref = _pair(style)
  ids = ours.encode(text)
  assert ids == ref.encode(text, add_special_tokens=False)
  # Pad ids decode to nothing (the protocol envs rely on); everything else as transformers.
  assert ours.decode(ids) == ref.decode([i for i in ids if i != ours.pad_id])
  table, lengths = ours.byte_table()
  raw = b"".join(bytes(table[i, :lengths[i]]) for i in ids)
  # The byte table reproduces the text exactly wherever the normalizer keeps it (Qwen: NFC).
  expect = unicodedata.normalize("NFC", text) if style == "qwen2" else text
  expect = expect.replace(ours.pad_token, "")
  if style == "gemma":    # '▁' is the space marker itself; byte fallback rebuilds the rest
    expect = expect.replace("\u2581", " ")
  assert raw == expect.encode("utf-8")


@pytest.mark.parametrize("style", STYLES)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1))
def test_decode_of_random_ids_matches_transformers(style, seed):
  # Arbitrary id strings, split multi-byte characters and specials included.
  ours, ref = _pair(style)
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, ours.vocab_size, size=rng.integers(0, 30)).tolist()
  ids = [i for i in ids if i != ours.pad_id]
  assert ours.decode(ids) == ref.decode(ids)


@pytest.mark.parametrize("style", STYLES)
def test_special_ids_and_config(style):
  ours, ref = _pair(style)
  assert ours.vocab_size == len(ref)
  for t in SPECIALS[style]:
    assert ours.special(t) == ref.convert_tokens_to_ids(t)
    assert ours.encode(f"a{t}b")[1:-1] == [ours.special(t)] or style == "gemma"
  assert ours.eos_id == ref.eos_token_id
  if ref.bos_token_id is not None:
    assert ours.bos_id == ref.bos_token_id
    assert ours.encode("hi", add_bos=True) == ref.encode("hi")[:1] + ours.encode("hi")
  else:                                   # Qwen: no bos; asking for one names file and key
    with pytest.raises(ValueError, match=r"tokenizer_config.json: key 'bos_token' is not set"):
      ours.encode("hi", add_bos=True)
  with open(os.path.join(hf_dir(style), "generation_config.json")) as f:
    assert list(ours.eos_ids) == json.load(f)["eos_token_id"]
  assert ours.pad_id == ref.convert_tokens_to_ids(PADS.get(style) or ref.pad_token)
  assert ours.piece_bytes(ours.pad_id) == b""
  assert ours.chat_template == ref.chat_template
  assert ours.decode([ours.pad_id]) == ""


def test_byte_level_and_metaspace_pieces():
  qwen, _ = _pair("qwen2")
  i = qwen.encode(" the")
  assert len(i) == 1 and qwen.id_to_piece(i[0]) == "Ġthe" and qwen.piece_bytes(i[0]) == b" the"
  gemma, _ = _pair("gemma")
  b = gemma.encode("\x07")              # not in the learnt alphabet: a byte-fallback piece
  assert [gemma.id_to_piece(x) for x in b] == ["<0x07>"] and gemma.piece_bytes(b[0]) == b"\x07"
  w = gemma.encode(" the")
  assert gemma.id_to_piece(w[0]).startswith("\u2581") and gemma.piece_bytes(w[0]).startswith(b" ")


def test_encode_padded_and_errors():
  tok, _ = _pair("qwen2")
  toks, lens = tok.encode_padded(["up", "the box"], 8)
  assert toks.shape == (2, 8) and toks.dtype == np.int32
  assert toks[0, :lens[0]].tolist() == tok.encode("up") and (toks[0, lens[0]:] == tok.pad_id).all()
  with pytest.raises(ValueError, match=r"texts\[1\]"):
    tok.encode_padded(["a", "the box is at the wall " * 4], 4)
  with pytest.raises(ValueError, match="outside"):
    tok.decode([tok.vocab_size])
  with pytest.raises(TypeError):
    tok.encode(b"bytes")
  with pytest.raises(KeyError, match=r"<\|nope\|>.*tokenizer.json"):
    tok.special("<|nope|>")


def test_bad_directories(tmp_path):
  src = hf_dir("qwen2")
  with pytest.raises(FileNotFoundError, match="not found"):
    load_hf(str(tmp_path / "missing"))
  d = edited_copy(src, str(tmp_path / "no_json"), "tokenizer.json", lambda j: None)
  with pytest.raises(FileNotFoundError, match="tokenizer.json"):
    load_hf(d)
  d = edited_copy(src, str(tmp_path / "no_cfg"), "tokenizer_config.json", lambda j: None)
  with pytest.raises(FileNotFoundError, match="tokenizer_config.json"):
    load_hf(d)
  d = edited_copy(src, str(tmp_path / "bad_eos"), "tokenizer_config.json",
                  lambda j: {**j, "eos_token": "<|missing|>"})
  with pytest.raises(ValueError, match=r"tokenizer_config.json: eos_token='<\|missing\|>'"):
    load_hf(d)
  d = edited_copy(src, str(tmp_path / "no_eos"), "tokenizer_config.json",
                  lambda j: {k: v for k, v in j.items() if k != "eos_token"})
  d = edited_copy(d, d, "special_tokens_map.json", lambda j: {k: v for k, v in j.items() if k != "eos_token"})
  with pytest.raises(ValueError, match="key 'eos_token' is missing"):
    load_hf(d)
  d = edited_copy(src, str(tmp_path / "decoder"), "tokenizer.json", lambda j: {**j, "decoder": None})
  with pytest.raises(ValueError, match="tokenizer.json: key 'decoder'"):
    load_hf(d)
  d = edited_copy(src, str(tmp_path / "garbage"), "tokenizer.json", lambda j: {**j, "model": {"type": "Nope"}})
  with pytest.raises(ValueError, match="tokenizer.json cannot be loaded"):
    load_hf(d)
  d = edited_copy(src, str(tmp_path / "bad_cfg"), "none", None)
  with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
    f.write("{not json")
  with pytest.raises(ValueError, match="tokenizer_config.json is not valid JSON"):
    HFTokenizer(d)


def test_missing_pad_token_names_file_and_key():
  # Llama-3 ships no pad token; envs need one: the error says where and how to give one.
  tok = load_hf(hf_dir("llama3"))
  assert tok.eos_id == tok.special("<|eot_id|>")
  with pytest.raises(ValueError, match=r"tokenizer_config.json: key 'pad_token' is missing.*pad_token="):
    tok.pad_id
  with pytest.raises(ValueError, match=r"pad_token='<\|nope\|>' is not a token"):
    load_hf(hf_dir("llama3"), pad_token="<|nope|>")
  assert load_hf(hf_dir("llama3"), pad_token="<|end_of_text|>").pad_id == tok.special("<|end_of_text|>")


def test_load_tokenizer_dispatches_on_path(tmp_path):
  # config.tokenizer.path: a HF directory or a sentencepiece .model file.
  from agent_rl.tokenizers import train_tokenizer
  assert isinstance(load_tokenizer(hf_dir("qwen2")), HFTokenizer)
  model = train_tokenizer(["the box is up", "left right down"] * 20, str(tmp_path / "t.model"), 300,
                          hard_vocab_limit=False)
  assert isinstance(load_tokenizer(model), Tokenizer)
  with pytest.raises(ValueError, match="pad_token= applies"):
    load_tokenizer(model, pad_token="<pad>")
  with pytest.raises(FileNotFoundError):
    load_tokenizer(str(tmp_path / "nothing.model"))
