"""Training a SentencePiece tokenizer locally, reproducibly, from environment / task text.

SentencePiece (Kudo & Richardson, 2018, arXiv:1808.06226) with BPE (Sennrich et al., 2016,
arXiv:1508.07909) or unigram-LM (Kudo, 2018, arXiv:1804.10959) segmentation. No download:
the vocabulary is learnt from the texts the experiment's environments render.

Fixed id layout (documented contract, relied on by envs and rollout):

    0 <pad>   1 <unk>   2 <s> (bos)   3 </s> (eos)
    4..13     SPECIAL_TOKENS, in the order listed below
    14        "\n" (a user symbol, so newlines are one token and never normalized away)
    15..      extra_symbols, in the order given
    then      256 byte-fallback pieces <0x00>..<0xFF>, then learnt pieces

Text round-trips exactly (`decode(encode(s)) == s` for every string): identity
normalization, no collapsing of whitespace, whitespace-only pieces allowed, byte fallback
for characters outside the learnt alphabet, and no dummy prefix. The last one is the
"leading-space rule": a word at the start of a text is encoded without the '▁' it gets
mid-text ("The" vs "▁The"), exactly like byte-level BPE tokenizers (Llama-3, Qwen).
The one character that does not round-trip is U+2581 '▁' itself, which decodes to a space.
"""
from __future__ import annotations

import io
import os
from typing import Iterable, Sequence

import sentencepiece as spm

# Chat/turn markers the rollout writes around turns (ChatML `<|im_start|>`, reasoning
# `<think>`, the env-parsed `<answer>`, observations, world-model predictions).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|im_start|>", "<|im_end|>",
    "<think>", "</think>",
    "<answer>", "</answer>",
    "<observation>", "</observation>",
    "<prediction>", "</prediction>",
)
NEWLINE = "\n"
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
MODEL_TYPES = ("bpe", "unigram")


def _user_symbols(extra_symbols: Sequence[str]) -> list[str]:
  symbols = list(SPECIAL_TOKENS) + [NEWLINE]
  for i, s in enumerate(extra_symbols):
    if not isinstance(s, str) or not s:
      raise ValueError(f"extra_symbols[{i}] must be a non-empty string, got {s!r}")
    if s.replace(" ", "\u2581") in symbols or s in ("<pad>", "<unk>", "<s>", "</s>"):
      raise ValueError(f"extra_symbols[{i}] = {s!r} is already a special token")
    # sentencepiece matches user symbols after turning spaces into '▁', so a symbol
    # written with a space ("go north") must be stored in that form to ever match.
    symbols.append(s.replace(" ", "\u2581"))
  return symbols


def train_tokenizer(
    texts: Iterable[str],
    out_path: str,
    vocab_size: int,
    *,
    model_type: str = "bpe",
    extra_symbols: Sequence[str] = (),
    seed: int = 0,
    hard_vocab_limit: bool = True,
) -> str:
  """Trains a SentencePiece model on `texts` and writes it to `out_path`; returns the path.

  Reproducible: the same texts in the same order and the same settings give a
  byte-identical `.model` file (one thread, fixed seed, no input sampling or shuffling).

  Args:
    texts: training text; each item may contain newlines and runs of spaces. Empty items
      are skipped. Order matters only for byte-identity, not for the id layout.
    out_path: where to write the serialized model (parent folders are created).
    vocab_size: total number of ids, specials and the 256 byte pieces included.
    model_type: "bpe" or "unigram".
    extra_symbols: more user symbols (e.g. action words that must be one token, spaces
      allowed: "go north"); they get ids 15, 16, ... in order.
    seed: sentencepiece's random-generator seed (matters for unigram's seeding sampler).
    hard_vocab_limit: if False, `vocab_size` is an upper bound and a small corpus yields a
      smaller vocabulary (read `Tokenizer.vocab_size`; a model may pad its embedding
      table above it). If True, a corpus too small for `vocab_size` raises.
  """
  if model_type not in MODEL_TYPES:
    raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
  symbols = _user_symbols(extra_symbols)
  corpus = [t for t in texts if t]
  for i, t in enumerate(corpus):
    if not isinstance(t, str):
      raise TypeError(f"texts must be strings; item {i} is {type(t).__name__}")
  if not corpus:
    raise ValueError("texts is empty: nothing to train a tokenizer on")
  minimum = 4 + len(symbols) + 256 + 1
  if vocab_size < minimum:
    raise ValueError(f"vocab_size={vocab_size} is below the minimum {minimum} "
                     f"(4 control ids + {len(symbols)} user symbols + 256 byte pieces + 1)")
  longest = max(len(t.encode("utf-8")) for t in corpus)
  buf = io.BytesIO()
  spm.set_random_generator_seed(seed)
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        user_defined_symbols=symbols,
        byte_fallback=True,
        split_digits=True,
        character_coverage=1.0,
        # Exact round-trip of env text: no NFKC, keep every space and newline.
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        add_dummy_prefix=False,
        # Determinism: one thread, all sentences, original order.
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        # The default (4192 bytes) silently drops longer texts.
        max_sentence_length=max(4192, longest + 1),
        hard_vocab_limit=hard_vocab_limit,
        minloglevel=2,
    )
  except RuntimeError as e:
    raise ValueError(f"sentencepiece training failed for vocab_size={vocab_size}, "
                     f"model_type={model_type!r} on {len(corpus)} texts (pass "
                     f"hard_vocab_limit=False to treat vocab_size as an upper bound): {e}") from e
  parent = os.path.dirname(os.path.abspath(out_path))
  os.makedirs(parent, exist_ok=True)
  with open(out_path, "wb") as f:
    f.write(buf.getvalue())
  return out_path
