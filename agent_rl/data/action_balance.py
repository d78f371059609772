"""Action-balanced SFT weights (`sft.action_balance`): each demo turn's tokens weigh
n(kind)^-b in the SFT loss, n(kind) the number of demo turns whose action is of that kind.

Why: an expert's demos are dominated by routine turns. A searching TextHouse demo walks and
opens receptacles for most of its turns and takes its object in one of them, and the tiny
policies fitted on such demos learn the sweep and never the decision to take what matches the
goal (README "Not yet"). Re-weighting by class frequency is the standard remedy for a rare
class: b = 1 is inverse frequency (every kind carries the same total weight), b = 0 the plain
loss, and b in between interpolates as the class-balanced loss (Cui et al. 2019, CVPR) and the
temperature-scaled sampling of multilingual MT (Arivazhagan et al. 2019, p ~ n^(1/T)) do.

An action's kind is its first word, lower-cased (`go to cabinet 1` -> go, `take apple 1 from
fridge 1` -> take, `click[buy now]` -> click); an action without a letter is kind "". Weights
are normalized so the mean weight over the demo turns is 1, so the loss keeps its scale and
the SFT lr its meaning. Only the demo rows are weighted (not the IWM or copy rows); the
tokens get their turn's weight through `credit.base.turn_to_token`, as advantages do.
"""
from __future__ import annotations

import collections
import re
from typing import Sequence

import numpy as np

_WORD = re.compile(r"[A-Za-z]+")


def action_kind(action: str) -> str:
  """The kind of an action text: its first word, lower-cased ("" when it has none)."""
  m = _WORD.search(action)
  return m.group(0).lower() if m else ""


def turn_weights(plans: Sequence[Sequence[str]], max_turns: int, balance: float) -> np.ndarray:
  """`[N, max_turns]` float32: demo i's turn t weighs n(kind)^-balance / mean over demo turns
  (0 past the plan's end; a plan is cut to `max_turns`, as the demo rows are)."""
  kinds = [[action_kind(a) for a in p[:max_turns]] for p in plans]
  counts = collections.Counter(k for ks in kinds for k in ks)
  if not counts:
    raise ValueError("config.sft.action_balance: the demos have no turns to weigh")
  raw = {k: float(n) ** -float(balance) for k, n in counts.items()}
  mean = sum(counts[k] * raw[k] for k in counts) / sum(counts.values())
  w = np.zeros((len(plans), max_turns), np.float32)
  for i, ks in enumerate(kinds):
    w[i, :len(ks)] = [raw[k] / mean for k in ks]
  return w
