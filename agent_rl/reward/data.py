"""Reward-model training data: episodes of rollouts, preference pairs, step labels.

Three sources, all ending as host NumPy rows the scoring pass reads (`Rows`: tokens,
positions, valid, turn_index `[R, L]`):
  - rollout pairs: within a group (same task), every (i, j) with env return R_i > R_j is a
    pair (chosen i, rejected j) (the ranking recipe of RLHF's comparison data, Ouyang et al.
    2022, with the env's return as the labeller);
  - step labels: every valid turn of a rollout episode, labelled by the env's verifier
    (`reward.config.STEP_LABELS`, Sokoban: the turn put a box on a target);
  - a pairs dataset (TFDS builder over a JSONL file, the documented format below).

Pairs dataset format: one JSON object a line with three strings,
    {"prompt": "...", "chosen": "...", "rejected": "..."}
The prompt's tokens are context (turn_index -1), the completion's are turn 0; the score is
read at the completion's last token. A line lacking a field, or with a non-string one, is
refused naming the file, the line and the field.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

import numpy as np
import tensorflow_datasets as tfds

from agent_rl.tokenizers.padded import pack_prompt_completion

PAIR_FIELDS = ("prompt", "chosen", "rejected")


class Rows(NamedTuple):
  """Forward rows `[R, L]` (host or device): what `reward.model.score_rows` reads."""
  tokens: Any
  position: Any
  attention_mask: Any
  turn_index: Any


class Episodes(NamedTuple):
  """Rollout episodes on the host: rows `[N, L]`, env return `[N]`, group `[N]` (unique over
  batches), step labels and the valid turns `[N, T]`."""
  rows: Rows
  returns: np.ndarray
  group: np.ndarray
  labels: np.ndarray
  valid: np.ndarray


def episodes_of(batch, labels=None, group_offset: int = 0) -> Episodes:
  """An EpisodeBatch (device) -> host Episodes; labels [N, T] (None: zeros)."""
  g = lambda x: np.asarray(x)
  attn = g(batch.attention_mask) if batch.attention_mask is not None else np.ones(batch.tokens.shape, bool)
  rows = Rows(g(batch.tokens), g(batch.position), attn, g(batch.turn_index))
  valid = g(batch.valid)
  ret = (g(batch.reward) * valid).sum(axis=1)
  lab = np.zeros(valid.shape, np.float32) if labels is None else g(labels).astype(np.float32)
  return Episodes(rows, ret.astype(np.float32), g(batch.group_id) + group_offset, lab, valid)


def concat_episodes(parts: list[Episodes]) -> Episodes:
  cat = lambda *xs: np.concatenate(xs, axis=0)
  return Episodes(Rows(*(cat(*f) for f in zip(*(p.rows for p in parts)))),
                  *(cat(*f) for f in zip(*(p[1:] for p in parts))))


def rank_pairs(returns: np.ndarray, group: np.ndarray, min_gap: float = 1e-6) -> np.ndarray:
  """[P, 2] (chosen, rejected) episode indices: every ordered pair of one group whose returns
  differ by more than `min_gap` (ties make no pair), in index order (deterministic)."""
  out = []
  for gid in np.unique(group):
    idx = np.flatnonzero(group == gid)
    for a in idx:
      for b in idx:
        if returns[a] > returns[b] + min_gap:
          out.append((a, b))
  return np.asarray(out, np.int64).reshape(-1, 2)


def pair_rows(rows: Rows, pairs: np.ndarray) -> Rows:
  """Rows `[2P, L]` interleaved (chosen_0, rejected_0, chosen_1, ...)."""
  order = pairs.reshape(-1)
  return Rows(*(np.asarray(x)[order] for x in rows))


# -- the pairs dataset ------------------------------------------------------------------------

def read_pairs_jsonl(path: str) -> list[dict]:
  """Validated records of a pairs JSONL file (see the module docstring)."""
  out = []
  with open(path) as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        rec = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"config.rm.pairs_path: {path} line {n} is not JSON ({e.msg})") from None
      if not isinstance(rec, dict):
        raise ValueError(f"config.rm.pairs_path: {path} line {n} is not a JSON object")
      for k in PAIR_FIELDS:
        if k not in rec:
          raise ValueError(f"config.rm.pairs_path: {path} line {n} lacks field {k!r} (each line "
                           f"needs {', '.join(PAIR_FIELDS)})")
        if not isinstance(rec[k], str):
          raise ValueError(f"config.rm.pairs_path: {path} line {n} field {k!r} must be a string, "
                           f"got {type(rec[k]).__name__}")
      out.append({k: rec[k] for k in PAIR_FIELDS})
  if not out:
    raise ValueError(f"config.rm.pairs_path: {path} holds no pairs")
  return out


class PairsBuilder(tfds.core.GeneratorBasedBuilder):
  """Preference pairs (prompt, chosen, rejected) from a JSONL file, as a TFDS dataset
  (array_record, no TensorFlow); the name embeds a digest of the file's bytes."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "prompt / chosen / rejected strings."}

  def __init__(self, *, path: str, **kwargs: Any):
    self._path = path
    self._records = read_pairs_jsonl(path)  # refused here, before anything is written
    with open(path, "rb") as f:
      self._digest = hashlib.sha1(f.read()).hexdigest()[:10]
    kwargs.setdefault("file_format", "array_record")
    super().__init__(**kwargs)

  @property
  def name(self) -> str:  # type: ignore[override]
    return f"pairs_{self._digest}"

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description="Preference pairs: prompt, chosen and rejected completions.",
        features=tfds.features.FeaturesDict({"index": np.int64, **{
            k: tfds.features.Text() for k in PAIR_FIELDS}}))

  def _split_generators(self, dl_manager):  # noqa: ARG002
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    for i, rec in enumerate(self._records):
      yield i, {"index": i, **rec}


def load_pairs(path: str, data_dir: str) -> list[dict]:
  """The pairs of `path` through their TFDS dataset (built once), in file order."""
  b = PairsBuilder(path=path, data_dir=data_dir)
  tfds.disable_progress_bar()
  b.download_and_prepare()
  src = b.as_data_source()["train"]
  dec = lambda v: v.decode() if isinstance(v, bytes) else str(v)
  recs = sorted((int(src[i]["index"]), {k: dec(src[i][k]) for k in PAIR_FIELDS})
                for i in range(len(src)))
  return [r for _, r in recs]


def encode_pairs(records: list[dict], tokenizer, max_len: int = 0) -> Rows:
  """Text pairs -> Rows `[2P, L]` interleaved (chosen, rejected): prompt tokens then the
  completion's (turn 0), right-padded with 0; L = the longest row (or `max_len`, which
  truncates the prompt's left side so the completion is kept)."""
  seqs = []
  for r in records:
    p = tokenizer.encode(r["prompt"])
    for k in ("chosen", "rejected"):
      c = tokenizer.encode(r[k])
      if not c:
        raise ValueError(f"config.rm.pairs_path: a {k!r} completion encodes to no tokens: {r[k]!r}")
      seqs.append((p, c))
  length = max_len or max(len(p) + len(c) for p, c in seqs)
  cut = [(p[max(0, len(p) + len(c[-length:]) - length):], c[-length:]) for p, c in seqs]
  return Rows(*pack_prompt_completion(cut, length))
