"""Training small Hugging Face tokenizers locally, written in the hub's file formats.

Nothing can be downloaded, yet loaders, parity tests and end-to-end runs need checkpoint
directories that look exactly like the hub's: `tokenizer.json` (HF `tokenizers`
serialization), `tokenizer_config.json` (with `chat_template`), `special_tokens_map.json`
and `generation_config.json`. `train_hf_tokenizer` learns a BPE vocabulary (Sennrich et al.,
2016, arXiv:1508.07909) on given text with the pipeline of one model family, taken from that
family's own `tokenizer.json`:

  qwen2   Qwen2/2.5/3: NFC, the Qwen regex split (single digits), GPT-2 byte-level pieces,
          specials appended after the vocabulary (<|endoftext|>, <|im_start|>, <|im_end|>; the
          non-special <think>, </think>); pad <|endoftext|>, eos <|im_end|>, no bos.
  llama3  Llama-3: no normalizer, the Llama-3 regex (digits in threes), byte-level pieces,
          `ignore_merges`, bos <|begin_of_text|> added by the post-processor; eos <|eot_id|>,
          no pad token (as shipped).
  gemma   Gemma: spaces -> '▁' normalizer, BPE with byte fallback (256 <0xNN> pieces),
          pad/eos/bos/unk/mask at ids 0-4, <start_of_turn>/<end_of_turn>, bos added.

`synthetic_byte_level(out_dir, vocab_size)` writes a byte-level BPE of any size (e.g.
Qwen's 151,643 entries) without training, from random merges, for benchmarks.
"""
from __future__ import annotations

import json
import os
from typing import Iterable

import numpy as np

from agent_rl.tokenizers import templates
from agent_rl.tokenizers.hf import bytes_to_unicode

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                 r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
                  r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_level(pattern: str, nfc: bool):
  from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
  tok = Tokenizer(models.BPE(ignore_merges=not nfc))   # Llama-3 sets ignore_merges, Qwen not
  if nfc:
    tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  return tok


def _qwen2():
  from tokenizers import processors
  tok = _byte_level(QWEN2_PATTERN, nfc=True)
  tok.post_processor = processors.ByteLevel(trim_offsets=False)
  return tok


def _llama3():
  from tokenizers import processors
  tok = _byte_level(LLAMA3_PATTERN, nfc=False)
  tok.post_processor = processors.Sequence([
      processors.ByteLevel(trim_offsets=False),
      processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                    pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                    special_tokens=[("<|begin_of_text|>", 0)])])  # id fixed below
  return tok


def _gemma():
  from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
  tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
  tok.normalizer = normalizers.Replace(" ", "\u2581")
  tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
  tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                   decoders.Fuse()])
  tok.post_processor = processors.TemplateProcessing(
      single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", 2)])
  return tok


# family -> (pipeline, leading specials (ids 0..), trailing added tokens (special?), config)
STYLES: dict[str, dict] = {
    "qwen2": dict(
        pipeline=_qwen2, leading=[],
        trailing=[("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                  ("<think>", False), ("</think>", False)],
        config=dict(tokenizer_class="Qwen2Tokenizer", bos_token=None, eos_token="<|im_end|>",
                    pad_token="<|endoftext|>", unk_token=None, add_bos_token=False,
                    add_prefix_space=False, errors="replace", split_special_tokens=False),
        eos=["<|im_end|>", "<|endoftext|>"], template=templates.QWEN2_5),
    "llama3": dict(
        pipeline=_llama3, leading=[],
        trailing=[("<|begin_of_text|>", True), ("<|end_of_text|>", True),
                  ("<|start_header_id|>", True), ("<|end_header_id|>", True),
                  ("<|eot_id|>", True)],
        config=dict(tokenizer_class="PreTrainedTokenizerFast", bos_token="<|begin_of_text|>",
                    eos_token="<|eot_id|>", model_input_names=["input_ids", "attention_mask"]),
        eos=["<|end_of_text|>", "<|eot_id|>"], template=templates.LLAMA3),
    "gemma": dict(
        pipeline=_gemma,
        leading=["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"],
        trailing=[],
        config=dict(tokenizer_class="GemmaTokenizer", bos_token="<bos>", eos_token="<eos>",
                    pad_token="<pad>", unk_token="<unk>", add_bos_token=True,
                    add_eos_token=False, spaces_between_special_tokens=False),
        eos=["<eos>", "<end_of_turn>"], template=templates.GEMMA3),
}


def _added(content: str, i: int, special: bool) -> dict:
  return dict(id=i, content=content, single_word=False, lstrip=False, rstrip=False,
              normalized=False, special=special)


def _write(out_dir: str, spec: dict, style: str, chat_template: str | None) -> str:
  s = STYLES[style]
  os.makedirs(out_dir, exist_ok=True)
  ids = {t["content"]: t["id"] for t in spec["added_tokens"]}
  if style == "llama3":   # the post-processor's bos id is only known once the vocab is final
    for p in spec["post_processor"]["processors"]:
      if p["type"] == "TemplateProcessing":
        p["special_tokens"]["<|begin_of_text|>"]["ids"] = [ids["<|begin_of_text|>"]]
  with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(spec, f, ensure_ascii=False, indent=2)
  cfg = dict(s["config"])
  cfg["added_tokens_decoder"] = {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                 for t in spec["added_tokens"]}
  cfg["chat_template"] = s["template"] if chat_template is None else chat_template
  cfg["clean_up_tokenization_spaces"] = False
  cfg["model_max_length"] = 32768
  with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump(cfg, f, ensure_ascii=False, indent=2)
  smap = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if cfg.get(k)}
  with open(os.path.join(out_dir, "special_tokens_map.json"), "w", encoding="utf-8") as f:
    json.dump(smap, f, indent=2)
  gen = dict(eos_token_id=[ids[t] for t in s["eos"]])
  if cfg.get("bos_token"):
    gen["bos_token_id"] = ids[cfg["bos_token"]]
  if cfg.get("pad_token"):
    gen["pad_token_id"] = ids[cfg["pad_token"]]
  with open(os.path.join(out_dir, "generation_config.json"), "w", encoding="utf-8") as f:
    json.dump(gen, f, indent=2)
  return out_dir


def _finish(spec: dict, style: str, learnt: dict[str, int]) -> dict:
  """Lays out ids: leading specials, (gemma) 256 byte pieces, learnt pieces, trailing adds."""
  s = STYLES[style]
  vocab: dict[str, int] = {}
  added = []
  for t in s["leading"]:
    added.append(_added(t, len(vocab), True))
    vocab[t] = len(vocab)
  if style == "gemma":
    for b in range(256):
      vocab[f"<0x{b:02X}>"] = len(vocab)
  for piece, _ in sorted(learnt.items(), key=lambda kv: kv[1]):
    if piece not in vocab:
      vocab[piece] = len(vocab)
  for j, (t, special) in enumerate(s["trailing"]):
    added.append(_added(t, len(vocab) + j, special))
  spec["model"]["vocab"] = vocab
  spec["added_tokens"] = added
  return spec


def train_hf_tokenizer(texts: Iterable[str], out_dir: str, vocab_size: int, *, style: str = "qwen2",
                       chat_template: str | None = None) -> str:
  """Trains a BPE tokenizer of family `style` on `texts`; writes the hub's files to out_dir.

  vocab_size: learnt pieces (bytes included); the specials of the family come on top.
  chat_template: Jinja source for tokenizer_config.json (default: the family's, templates.py).
  Deterministic for the same texts and settings. Returns out_dir.
  """
  from tokenizers import pre_tokenizers, trainers
  if style not in STYLES:
    raise ValueError(f"style must be one of {sorted(STYLES)}, got {style!r}")
  corpus = [t for t in texts if t]
  if not corpus:
    raise ValueError("texts is empty: nothing to train a tokenizer on")
  tok = STYLES[style]["pipeline"]()
  alphabet = pre_tokenizers.ByteLevel.alphabet() if style != "gemma" else []
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet,
                                show_progress=False, special_tokens=[])
  tok.train_from_iterator(corpus, trainer)
  spec = json.loads(tok.to_str())
  spec = _finish(spec, style, spec["model"]["vocab"])
  return _write(out_dir, spec, style, chat_template)


def synthetic_byte_level(out_dir: str, vocab_size: int = 151_643, *, seed: int = 0,
                         max_piece: int = 16, words: Iterable[str] = ()) -> str:
  """A Qwen-style byte-level BPE of exactly `vocab_size` pieces built from random merges.

  Pieces grow by merging two existing pieces (English-like letters, spaces and punctuation
  weighted like real text) until the vocabulary is full, so the file is a valid BPE whose
  pieces share prefixes the way a trained one's do. `words` are merged in first (e.g. an env's
  action words, so they are single tokens as in a real vocabulary).
  """
  rng = np.random.default_rng(seed)
  b2u = bytes_to_unicode()
  pieces: list[bytes] = [bytes([b]) for b in range(256)]
  index = {p: i for i, p in enumerate(pieces)}
  merges: list[tuple[bytes, bytes]] = []

  def add(a: bytes, b: bytes) -> None:
    if a + b not in index and a in index and b in index:
      index[a + b] = len(pieces)
      pieces.append(a + b)
      merges.append((a, b))

  for w in words:
    for seq in (w.encode(), b" " + w.encode()):
      for n in range(2, len(seq) + 1):
        add(seq[:n - 1], seq[n - 1:n])
  common = np.frombuffer(b"etaoinshrdlucmfwypvbgkjqxz ETAOINSHRDL.,-_\n<>/|#0123456789", np.uint8)
  while len(pieces) < vocab_size:
    n = min(vocab_size - len(pieces), 65536)
    left = rng.integers(0, len(pieces), size=n)
    right = np.where(rng.random(n) < 0.7, rng.choice(common, size=n),
                     rng.integers(0, len(pieces), size=n))
    for a, b in zip(left.tolist(), right.tolist()):
      pa = pieces[a]
      pb = bytes([b]) if b < 256 and rng.random() < 0.7 else pieces[b]
      if len(pa) + len(pb) <= max_piece:
        add(pa, pb)
      if len(pieces) >= vocab_size:
        break
  spec = json.loads(_qwen2().to_str())
  m = spec["model"]
  to_str = lambda p: "".join(b2u[x] for x in p)  # noqa: E731
  learnt = {to_str(p): i for i, p in enumerate(pieces)}
  m["merges"] = [[to_str(a), to_str(b)] for a, b in merges]
  spec = _finish(spec, "qwen2", learnt)
  return _write(out_dir, spec, "qwen2", None)

