"""Hugging Face tokenizers (`tokenizer.json` directories) behind the project's tokenizer protocol.

A downloaded checkpoint directory (Qwen2/2.5/3, Llama-3, Gemma) carries its tokenizer as
`tokenizer.json` (the `tokenizers` library's serialization: normalizer, pre-tokenizer, model,
decoder, added tokens) plus `tokenizer_config.json` (special-token names, `chat_template`),
`special_tokens_map.json` and `generation_config.json` (the eos ids generation stops on).
`load_hf(dir)` reads them with the `tokenizers` library itself, so encoding is the checkpoint's
own (no re-implementation of its regexes), and exposes what envs and the rollout use: `encode`
/ `decode`, `pad_id` / `bos_id` / `eos_id` / `special(name)`, `byte_table()` for the jitted
parsers, and the checkpoint's `chat_template` (rendered by `agent_rl.tokenizers.chat`).

Two vocabulary families are supported, told apart by the decoder in `tokenizer.json`:
  * byte-level BPE (GPT-2's byte-to-unicode map, `Ġ` = space; Qwen, Llama-3): every piece is a
    string of mapped bytes, so `byte_table` inverts the map;
  * sentencepiece-style BPE with byte fallback (`▁` = space, `<0xNN>` byte pieces; Gemma).
`encode` never adds bos/eos implicitly (like `add_special_tokens=False`): envs tokenize text
pieces and the chat template writes its own bos where the checkpoint wants one.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Iterable, Sequence

import numpy as np

from agent_rl.tokenizers import padded
from agent_rl.tokenizers.tokenizer import BYTE_PIECE

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"
GENERATION_FILE = "generation_config.json"


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable character map (byte-level BPE pieces use it)."""
  bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
      range(ord("®"), ord("ÿ") + 1))
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


def _read_json(path: str, required: bool) -> dict:
  if not os.path.isfile(path):
    if required:
      raise FileNotFoundError(f"{path} not found (a Hugging Face tokenizer directory needs it)")
    return {}
  try:
    with open(path, encoding="utf-8") as f:
      out = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path} is not valid JSON: {e}") from e
  if not isinstance(out, dict):
    raise ValueError(f"{path} must hold a JSON object, got {type(out).__name__}")
  return out


def _token_name(value: Any, where: str, key: str) -> str | None:
  """A special-token entry is a string or an AddedToken dict {"content": ...}."""
  if value is None or isinstance(value, str):
    return value
  if isinstance(value, dict) and isinstance(value.get("content"), str):
    return value["content"]
  raise ValueError(f"{where}: {key} must be a token string or {{'content': ...}}, got {value!r}")


def _decoder_kind(decoder: dict | None, where: str) -> tuple[str, str]:
  """("byte_level", "") or ("metaspace", space_char) from tokenizer.json's decoder."""
  if not decoder:
    raise ValueError(f"{where}: key 'decoder' is missing; cannot tell how pieces map to bytes")
  parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
  types = [p.get("type") for p in parts]
  if "ByteLevel" in types:
    return "byte_level", ""
  for p in parts:
    if p.get("type") == "Metaspace":
      return "metaspace", p.get("replacement", "\u2581")
    if p.get("type") == "Replace" and p.get("content") == " ":
      return "metaspace", p.get("pattern", {}).get("String", "\u2581")
  raise ValueError(f"{where}: unsupported decoder {types}; supported are byte-level BPE "
                   f"(ByteLevel) and sentencepiece-style (Metaspace / Replace '▁' + ByteFallback)")


class HFTokenizer:
  """A `tokenizer.json` directory as a project tokenizer (see module docstring).

  Attributes: `path` (the directory), `chat_template` (Jinja source or None), `eos_ids`
  (generation stop ids from generation_config.json, else [eos_id]), `kind` ("byte_level" or
  "metaspace").
  """

  def __init__(self, path: str, *, pad_token: str | None = None):
    from tokenizers import Tokenizer as _HF  # the dependency is only needed for HF checkpoints
    self.path = self.name = path
    tok_file = os.path.join(path, TOKENIZER_FILE)
    spec = _read_json(tok_file, required=True)
    try:
      self._tok = _HF.from_file(tok_file)
    except Exception as e:  # noqa: BLE001 — tokenizers raises plain Exception subclasses
      raise ValueError(f"{tok_file} cannot be loaded by the tokenizers library: {e}") from e
    self._tok.no_padding()
    self._tok.no_truncation()
    self.kind, self._space = _decoder_kind(spec.get("decoder"), tok_file)
    model = spec.get("model") or {}
    self._model_vocab = model.get("vocab")
    self._byte_fallback = bool(model.get("byte_fallback", False))
    self._added = {t["content"]: int(t["id"]) for t in spec.get("added_tokens", [])}
    self._special_ids = {int(t["id"]) for t in spec.get("added_tokens", []) if t.get("special")}
    cfg_file = os.path.join(path, CONFIG_FILE)
    cfg = _read_json(cfg_file, required=True)
    smap_file = os.path.join(path, SPECIAL_MAP_FILE)
    smap = _read_json(smap_file, required=False)
    gen = _read_json(os.path.join(path, GENERATION_FILE), required=False)

    def named(key: str) -> tuple[str | None, str]:
      """(token string, file it came from) for bos/eos/pad/unk."""
      for where, d in ((cfg_file, cfg), (smap_file, smap)):
        t = _token_name(d.get(key), where, key)
        if t is not None:
          return t, where
      return None, cfg_file

    def resolve(key: str, token: str | None, where: str) -> int | None:
      if token is None:
        return None
      i = self._tok.token_to_id(token)
      if i is None:
        raise ValueError(f"{where}: {key}={token!r} is not a token of {tok_file}")
      return int(i)

    pad, pad_where = (pad_token, "pad_token=") if pad_token is not None else named("pad_token")
    self.bos_token, self.eos_token = named("bos_token")[0], named("eos_token")[0]
    self.pad_token = pad
    self._pad_id = resolve("pad_token", pad, pad_where)
    self._bos_id = resolve("bos_token", self.bos_token, named("bos_token")[1])
    self._eos_id = resolve("eos_token", self.eos_token, named("eos_token")[1])
    self.unk_token = named("unk_token")[0]
    if self._eos_id is None:
      raise ValueError(f"{cfg_file}: key 'eos_token' is missing (nor in {smap_file}); generation "
                       f"needs an end-of-sequence token")
    eos = gen.get("eos_token_id", self._eos_id)
    self.eos_ids = tuple(int(i) for i in (eos if isinstance(eos, list) else [eos]))
    template = cfg.get("chat_template")
    if isinstance(template, list):     # the hub's named-template form [{"name", "template"}]
      template = {t.get("name"): t.get("template") for t in template}.get("default")
    if template is None and os.path.isfile(os.path.join(path, "chat_template.jinja")):
      with open(os.path.join(path, "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    self.chat_template: str | None = template
    self._byte_table: tuple[np.ndarray, np.ndarray] | None = None

  # -- ids ------------------------------------------------------------------------------------
  @property
  def vocab_size(self) -> int:
    """Number of ids (model vocabulary + added tokens); a model may pad its embedding above."""
    return int(self._tok.get_vocab_size(with_added_tokens=True))

  @property
  def pad_id(self) -> int:
    if self._pad_id is None:
      raise ValueError(
          f"{os.path.join(self.path, CONFIG_FILE)}: key 'pad_token' is missing (nor in "
          f"{SPECIAL_MAP_FILE}); token arrays need a pad id: pass load_hf(path, pad_token=...) "
          f"with a token of the vocabulary, e.g. the eos token {self.eos_token!r}")
    return self._pad_id

  @property
  def bos_id(self) -> int:
    if self._bos_id is None:
      raise ValueError(f"{os.path.join(self.path, CONFIG_FILE)}: key 'bos_token' is not set; "
                       f"this tokenizer has no beginning-of-sequence token")
    return self._bos_id

  @property
  def eos_id(self) -> int:
    return self._eos_id

  def special(self, name: str) -> int:
    """Id of an added token such as "<|im_end|>"; KeyError naming tokenizer.json if absent."""
    if name in self._added:
      return self._added[name]
    raise KeyError(f"special token {name!r} is not among the added_tokens of "
                   f"{os.path.join(self.path, TOKENIZER_FILE)}")

  @property
  def added_tokens(self) -> dict[str, int]:
    """{content: id} of tokenizer.json's added_tokens (special or not)."""
    return dict(self._added)

  def is_special(self, i: int) -> bool:
    """True for added tokens flagged `special` (control tokens such as <|im_end|>)."""
    return int(i) in self._special_ids

  def id_to_piece(self, i: int) -> str:
    self._check_id(i)
    return self._tok.id_to_token(int(i))

  def _check_id(self, i: int) -> None:
    if not 0 <= int(i) < self.vocab_size:
      raise ValueError(f"token id {int(i)} is outside [0, {self.vocab_size}) of {self.path}")

  # -- text -----------------------------------------------------------------------------------
  def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
    """Ids of `text`; special-token strings inside it become their ids (as in transformers)."""
    if not isinstance(text, str):
      raise TypeError(f"encode expects str, got {type(text).__name__}")
    ids = self._tok.encode(text, add_special_tokens=False).ids
    return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids` with special tokens written out; pad ids decode to nothing."""
    flat = [int(i) for i in np.asarray(ids).reshape(-1)]
    for i in flat:
      self._check_id(i)
    return self._tok.decode([i for i in flat if i != self._pad_id], skip_special_tokens=False)

  def encode_padded(self, texts: Sequence[str], length: int, *, add_bos: bool = False,
                    add_eos: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`tokens [B, length] int32` right-padded with pad_id and `lengths [B] int32`
    (padded.encode_padded; ValueError naming the text that needs more than `length`)."""
    return padded.encode_padded(self, texts, length, add_bos=add_bos, add_eos=add_eos)

  # -- tables for jitted code -----------------------------------------------------------------
  def piece_bytes(self, i: int) -> bytes:
    """UTF-8 bytes id `i` contributes in the middle of a text (pad: b'')."""
    self._check_id(i)
    i = int(i)
    if i == self._pad_id:
      return b""
    piece = self._tok.id_to_token(i)
    added = self._added.get(piece)
    if added == i:
      return piece.encode("utf-8")
    if self.kind == "byte_level":
      inv = _unicode_to_bytes()
      try:
        return bytes(inv[c] for c in piece)
      except KeyError:
        raise ValueError(f"piece {piece!r} (id {i}) of {self.path} has a character outside the "
                         f"byte-level alphabet") from None
    if self._byte_fallback:
      m = BYTE_PIECE.match(piece)
      if m is not None:
        return bytes([int(m.group(1), 16)])
    return piece.replace(self._space, " ").encode("utf-8")

  def _all_piece_bytes(self) -> list[bytes]:
    """`piece_bytes(i)` for every id at once (C-level str.translate: ~0.2 s for 151k pieces)."""
    by_id = [""] * self.vocab_size
    vocab = self._model_vocab        # as parsed from tokenizer.json (get_vocab() is ~4x slower)
    items = vocab.items() if isinstance(vocab, dict) else (
        (p[0], i) for i, p in enumerate(vocab or ()))
    for piece, i in items:
      by_id[int(i)] = piece
    if self.kind == "byte_level":
      tr = {ord(c): b for c, b in _unicode_to_bytes().items()}
      try:                                                        # 1 char -> 1 byte
        flat = "".join(by_id).translate(tr).encode("latin-1")
      except UnicodeEncodeError:
        raise ValueError(f"a piece of {self.path}/{TOKENIZER_FILE} has a character outside the "
                         f"byte-level alphabet") from None
      ends = np.cumsum([len(p) for p in by_id]).tolist()
      rows = [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]
    else:
      fb = self._byte_fallback
      rows = [bytes([int(p[3:5], 16)]) if fb and BYTE_PIECE.match(p) else
              p.replace(self._space, " ").encode("utf-8") for p in by_id]
    for piece, i in self._added.items():
      rows[i] = piece.encode("utf-8")
    if self._pad_id is not None:
      rows[self._pad_id] = b""
    return rows

  def byte_table(self) -> tuple[np.ndarray, np.ndarray]:
    """`(bytes_ [V, Kmax] uint8, lengths [V] int32)`: row i holds `piece_bytes(i)`, zero-padded.

    Concatenating the rows of `encode(s)` reproduces `s.encode()` whenever the normalizer
    keeps `s` (NFC-normal text for Qwen; every text for Llama-3 and Gemma).
    """
    if self._byte_table is None:
      rows = self._all_piece_bytes()
      lengths = np.fromiter(map(len, rows), np.int32, len(rows))
      table = np.zeros((len(rows), max(1, int(lengths.max()))), np.uint8)
      flat = np.frombuffer(b"".join(rows), np.uint8)
      mask = np.arange(table.shape[1])[None, :] < lengths[:, None]
      table[mask] = flat                              # row-major fill = concatenation order
      table.setflags(write=False)
      lengths.setflags(write=False)
      self._byte_table = (table, lengths)
    return self._byte_table

  def __repr__(self) -> str:
    return f"HFTokenizer({self.path!r}, kind={self.kind}, vocab_size={self.vocab_size})"


@functools.lru_cache(maxsize=1)
def _unicode_to_bytes() -> dict[str, int]:
  return {c: b for b, c in bytes_to_unicode().items()}


def load_hf(path: str, *, pad_token: str | None = None) -> HFTokenizer:
  """The tokenizer of a Hugging Face checkpoint directory (see module docstring).

  pad_token: a token of the vocabulary to pad with when the directory sets none (Llama-3
    ships without one); errors otherwise name the file and key that is missing or wrong.
  """
  if not os.path.isdir(path):
    raise FileNotFoundError(f"Hugging Face tokenizer directory not found: {path}")
  return HFTokenizer(path, pad_token=pad_token)


def load_tokenizer(path: str, *, pad_token: str | None = None):
  """`config.tokenizer.path` semantics: a Hugging Face directory (with tokenizer.json) loads
  with `load_hf`, a `.model` file as the project's sentencepiece `Tokenizer`."""
  from agent_rl.tokenizers.tokenizer import Tokenizer
  if os.path.isdir(path):
    return load_hf(path, pad_token=pad_token)
  if pad_token is not None:
    raise ValueError(f"pad_token= applies to Hugging Face directories; {path} is a file "
                     f"(sentencepiece models fix pad at id 0)")
  return Tokenizer.load(path)
