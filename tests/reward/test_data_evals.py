"""Reward-model data and metrics against plain-Python references: pair ranking within groups,
interleaved pair rows, the pairs JSONL format (refusals name the line and field) through its
TFDS dataset, prompt/completion encoding, pairwise accuracy / calibration and per-step AUC."""
import itertools
import json

import numpy as np
import pytest

from agent_rl.reward import data as rdata
from agent_rl.reward.evals import expected_calibration_error, pairwise_metrics, roc_auc, step_metrics


def test_rank_pairs_equals_brute_force():
  r = np.random.default_rng(0)
  ret = r.integers(0, 3, 12).astype(np.float32)
  grp = np.repeat(np.arange(3), 4)
  got = {tuple(p) for p in rdata.rank_pairs(ret, grp)}
  want = {(i, j) for i, j in itertools.permutations(range(12), 2)
          if grp[i] == grp[j] and ret[i] > ret[j]}
  assert got == want and len(got) > 0
  assert rdata.rank_pairs(np.zeros(4), np.zeros(4, int)).shape == (0, 2)  # ties: no pairs


def test_pair_rows_interleave():
  rows = rdata.Rows(*(np.arange(5)[:, None] * np.ones((1, 3), int) + k for k in range(4)))
  out = rdata.pair_rows(rows, np.array([[3, 1], [0, 4]]))
  np.testing.assert_array_equal(out.tokens[:, 0], [3, 1, 0, 4])
  np.testing.assert_array_equal(out.turn_index[:, 0], [6, 4, 3, 7])


def _write(tmp_path, recs, name="pairs.jsonl"):
  p = tmp_path / name
  p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in recs) + "\n")
  return str(p)


def test_pairs_jsonl_refusals_name_line_and_field(tmp_path):
  ok = {"prompt": "p", "chosen": "a", "rejected": "b"}
  with pytest.raises(ValueError, match=r"line 2 lacks field 'rejected'"):
    rdata.read_pairs_jsonl(_write(tmp_path, [ok, {"prompt": "p", "chosen": "a"}]))
  with pytest.raises(ValueError, match=r"line 1 field 'chosen' must be a string"):
    rdata.read_pairs_jsonl(_write(tmp_path, [{**ok, "chosen": 3}]))
  with pytest.raises(ValueError, match=r"line 1 is not JSON"):
    rdata.read_pairs_jsonl(_write(tmp_path, ["{oops"]))
  with pytest.raises(ValueError, match="holds no pairs"):
    rdata.read_pairs_jsonl(_write(tmp_path, [""]))


class _Tok:
  """Characters as token ids (a test tokenizer: encode(text) -> ids)."""
  vocab_size = 256

  def encode(self, text):
    return [ord(ch) for ch in text]


def test_pairs_dataset_roundtrip_and_encoding(tmp_path):
  recs = [{"prompt": "ab", "chosen": "xyz", "rejected": "q"},
          {"prompt": "c", "chosen": "u", "rejected": "vw"}]
  path = _write(tmp_path, recs)
  assert rdata.load_pairs(path, str(tmp_path / "data")) == recs
  rows = rdata.encode_pairs(recs, _Tok())
  assert rows.tokens.shape == (4, 5)
  np.testing.assert_array_equal(rows.tokens[0], [ord(ch) for ch in "abxyz"])
  np.testing.assert_array_equal(rows.turn_index[0], [-1, -1, 0, 0, 0])
  np.testing.assert_array_equal(rows.turn_index[1], [-1, -1, 0, -1, -1])
  np.testing.assert_array_equal(rows.attention_mask[3], [1, 1, 1, 0, 0])
  cut = rdata.encode_pairs(recs, _Tok(), max_len=3)  # the prompt's left side gives way
  np.testing.assert_array_equal(cut.tokens[0], [ord(ch) for ch in "xyz"])
  np.testing.assert_array_equal(cut.tokens[1], [ord(ch) for ch in "abq"])


def _sig(x):
  return 1 / (1 + np.exp(-x))


def test_pairwise_metrics_against_loops():
  r = np.random.default_rng(1)
  c, rj = r.normal(1, 1, 50), r.normal(0, 1, 50)
  c[0] = rj[0]  # a tie counts half
  m = pairwise_metrics(c, rj, bins=5)
  acc = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(c, rj)) / 50
  assert m["accuracy"] == pytest.approx(acc)
  ps = [(_sig(a - b), 1) for a, b in zip(c, rj)] + [(_sig(b - a), 0) for a, b in zip(c, rj)]
  ece = 0.0
  for k in range(5):
    inb = [(p, y) for p, y in ps if min(int(p * 5), 4) == k]
    if inb:
      ece += len(inb) / len(ps) * abs(np.mean([y for _, y in inb]) - np.mean([p for p, _ in inb]))
  assert m["ece"] == pytest.approx(ece)
  assert m["brier"] == pytest.approx(np.mean([(p - y) ** 2 for p, y in ps]))
  # A perfectly calibrated predictor: ECE 0 in the limit; a constant 0.5 is calibrated too.
  assert expected_calibration_error(np.full(10, 0.5), np.r_[np.ones(5), np.zeros(5)]) == 0.0


def test_auc_and_step_metrics_against_pair_counting():
  r = np.random.default_rng(2)
  s, y = r.normal(0, 1, 40), r.random(40) < 0.4
  s[:3] = 0.25
  num = sum((a > b) + 0.5 * (a == b) for a in s[y] for b in s[~y])
  assert roc_auc(s, y) == pytest.approx(num / (y.sum() * (~y).sum()))
  assert np.isnan(roc_auc(s, np.zeros(40)))
  m = step_metrics(s.reshape(8, 5), y.reshape(8, 5), np.ones((8, 5)))
  assert m["accuracy"] == pytest.approx(np.mean((s > 0) == y))
  with pytest.raises(ValueError, match="no labelled"):
    step_metrics(s.reshape(8, 5), y.reshape(8, 5), np.zeros((8, 5)))
