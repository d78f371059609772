"""Held-out metrics of reward models (host NumPy; the inputs are small score vectors).

Outcome RM, on pairs with scores (r_c, r_r): pairwise accuracy P(r_c > r_r) (ties count
half), and calibration of the Bradley-Terry probability p = sigmoid(r_c - r_r) that the chosen
one wins: each pair is scored in both orders (p with label 1, 1 - p with label 0, so a
constant model is not rewarded for always saying "first"), then expected calibration error
over `bins` equal-width bins (Guo et al. 2017, arXiv:1706.04599) and the Brier score.
Process RM, on labelled turns: per-step accuracy (score > 0 <=> label) and ROC AUC (the
Mann-Whitney statistic, ties counted half).
"""
from __future__ import annotations

import numpy as np


def _sigmoid(x):
  return 0.5 * (1.0 + np.tanh(0.5 * x))


def pairwise_metrics(chosen: np.ndarray, rejected: np.ndarray, bins: int = 10) -> dict:
  """chosen, rejected: [P] scores -> {accuracy, ece, brier, margin}."""
  c, r = np.asarray(chosen, np.float64), np.asarray(rejected, np.float64)
  if c.size == 0:
    raise ValueError("pairwise_metrics: no held-out pairs")
  d = c - r
  acc = float(np.mean((d > 0) + 0.5 * (d == 0)))
  p = np.concatenate([_sigmoid(d), _sigmoid(-d)])
  y = np.concatenate([np.ones_like(d), np.zeros_like(d)])
  return {"accuracy": acc, "ece": expected_calibration_error(p, y, bins),
          "brier": float(np.mean((p - y) ** 2)), "margin": float(np.mean(d))}


def expected_calibration_error(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
  """sum_b |B_b|/n |mean(y in b) - mean(p in b)| over equal-width bins of p in [0, 1]."""
  p, y = np.asarray(p, np.float64), np.asarray(y, np.float64)
  b = np.minimum((p * bins).astype(np.int64), bins - 1)
  err = 0.0
  for k in range(bins):
    sel = b == k
    if sel.any():
      err += sel.mean() * abs(y[sel].mean() - p[sel].mean())
  return float(err)


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
  """P(score of a random positive > a random negative), ties half; NaN without both classes."""
  s, y = np.asarray(scores, np.float64), np.asarray(labels) > 0.5
  pos, neg = s[y], s[~y]
  if pos.size == 0 or neg.size == 0:
    return float("nan")
  gt = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
  return float(gt / (pos.size * neg.size))


def step_metrics(scores: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> dict:
  """scores, labels, mask: [N, T] -> {accuracy, auc, positive_rate} over the masked turns."""
  m = np.asarray(mask) > 0
  s, y = np.asarray(scores)[m], np.asarray(labels)[m] > 0.5
  if s.size == 0:
    raise ValueError("step_metrics: no labelled held-out turns")
  return {"accuracy": float(np.mean((s > 0) == y)), "auc": roc_auc(s, y),
          "positive_rate": float(np.mean(y))}
