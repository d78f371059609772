"""Metric sinks: JSONL log (the source of truth, resume-safe), TensorBoard scalars, console.

Only process 0 writes. On resume the JSONL log is truncated to the restored step so the
file reads as one uninterrupted run.
"""
from __future__ import annotations

import json
import math
import os
from typing import Mapping, Optional

import jax
import numpy as np


class NonFiniteError(RuntimeError):
  """Raised when a loss or gradient metric is NaN/Inf; names the step and the metric."""


def to_host(metrics: Mapping) -> dict:
  """Device scalars -> Python floats (one transfer for the whole dict)."""
  host = jax.device_get(dict(metrics))
  return {k: float(np.asarray(v)) for k, v in host.items()}


def check_finite(step: int, metrics: Mapping[str, float], keys=None) -> None:
  for k, v in metrics.items():
    if (keys is None or k in keys) and not math.isfinite(v):
      raise NonFiniteError(f"non-finite metric {k!r} = {v} at step {step}; halting "
                           "(the last good checkpoint is kept)")


class MetricWriter:
  def __init__(self, workdir: str, *, tensorboard: bool = True):
    self.is_main = jax.process_index() == 0
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._tb = None
    if self.is_main and tensorboard:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, "tb"))

  def truncate_after(self, step: int) -> None:
    """Drops records with step > `step` (written after the checkpoint we resume from)."""
    if not self.is_main or not os.path.exists(self.path):
      return
    with open(self.path) as f:
      keep = [ln for ln in f if ln.strip() and json.loads(ln).get("step", 0) <= step]
    with open(self.path, "w") as f:
      f.writelines(keep)

  def write(self, step: int, metrics: Mapping[str, float], prefix: str = "") -> None:
    if not self.is_main:
      return
    rec = {"step": int(step), **{prefix + k: v for k, v in metrics.items()}}
    with open(self.path, "a") as f:
      f.write(json.dumps(rec, sort_keys=True) + "\n")
    if self._tb is not None:
      for k, v in metrics.items():
        self._tb.add_scalar(prefix + k, v, step)
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(ln) for ln in f if ln.strip()]


def progress(total: int, initial: int = 0, desc: str = "train") -> Optional[object]:
  """A tqdm bar on process 0 (None elsewhere)."""
  if jax.process_index() != 0:
    return None
  from tqdm import tqdm
  return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)
