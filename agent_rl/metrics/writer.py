"""One metric-writer interface over the configured sinks (`config.log`), plus the run's
host-side metric helpers (device -> host, NaN halting, the progress bar).

Only process 0 writes; other processes hold a writer with no sinks. On resume,
`truncate_after(restored_step)` makes each sink read as one uninterrupted run (sinks.py).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import jax
import numpy as np
from etils import epath

from agent_rl.metrics.sinks import SINKS, Sink

DEFAULT_SINKS = ("jsonl", "tensorboard")
WANDB_MODES = ("", "online", "offline", "disabled")


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


def parse_sinks(spec: str | Sequence[str]) -> tuple[str, ...]:
  """`"jsonl,tensorboard"` -> ("jsonl", "tensorboard"); ValueError names config.log.sinks."""
  names = tuple(s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)
                if s.strip())
  bad = [s for s in names if s not in SINKS]
  if bad:
    raise ValueError(f"config.log.sinks: unknown sink {', '.join(map(repr, bad))}; known: "
                     f"{', '.join(SINKS.names())}")
  if "jsonl" not in names:  # the report and exact-resume checks read metrics.jsonl
    raise ValueError(f"config.log.sinks: must include 'jsonl' (the run's source of truth), "
                     f"got {spec!r}")
  if len(set(names)) != len(names):
    raise ValueError(f"config.log.sinks: a sink is named twice in {spec!r}")
  return names


def check_log_config(log: Any) -> None:
  """Start-up checks of `config.log` (before anything compiles); ValueError names the field."""
  names = parse_sinks(log.sinks)
  if log.wandb_mode not in WANDB_MODES:
    raise ValueError(f"config.log.wandb_mode: must be one of {'|'.join(WANDB_MODES[1:])} or '' "
                     f"(wandb's default / WANDB_MODE), got {log.wandb_mode!r}")
  if log.episodes < 0:
    raise ValueError(f"config.log.episodes: must be >= 0, got {log.episodes}")
  if "wandb" in names:
    import importlib.util
    if importlib.util.find_spec("wandb") is None:
      raise ValueError("config.log.sinks: 'wandb' is configured but the wandb package is not "
                       "installed (pip install wandb)")


class MetricWriter:
  """`write(step, metrics)` and `write_episodes(step, tag, texts)` fan out to every sink.

  workdir: local path or `gs://...`. sinks: names from `SINKS` (see `parse_sinks`).
  options: per-sink settings (the `config.log` fields; `run_config` for wandb).
  """

  def __init__(self, workdir, sinks: str | Sequence[str] = DEFAULT_SINKS, *,
               options: Optional[Mapping[str, Any]] = None):
    self.is_main = jax.process_index() == 0
    self.workdir = epath.Path(workdir)
    self.names = parse_sinks(sinks)
    self.sinks: list[Sink] = []
    if self.is_main:
      self.workdir.mkdir(parents=True, exist_ok=True)
      self.sinks = [SINKS.get(n)(self.workdir, dict(options or {})) for n in self.names]

  @classmethod
  def from_config(cls, c, workdir) -> "MetricWriter":
    """The writer `config.log` describes; wandb gets the whole run config."""
    log = c.log
    opts = dict(wandb_project=log.wandb_project, wandb_entity=log.wandb_entity,
                wandb_mode=log.wandb_mode, run_name=epath.Path(workdir).name,
                run_config=c.to_dict())
    return cls(workdir, log.sinks, options=opts)

  @property
  def path(self) -> epath.Path:
    """metrics.jsonl (kept for callers of the single-sink writer)."""
    return self.workdir / "metrics.jsonl"

  def truncate_after(self, step: int) -> None:
    """Drops records with step > `step` (written after the checkpoint we resume from)."""
    for s in self.sinks:
      s.truncate_after(int(step))

  def write(self, step: int, metrics: Mapping[str, float], prefix: str = "") -> None:
    scalars = {prefix + k: float(v) for k, v in metrics.items()}
    for s in self.sinks:
      s.write_scalars(int(step), scalars)

  def write_episodes(self, step: int, tag: str, texts: Sequence[str]) -> None:
    """Rendered episodes (`agent_rl.eval.episodes.render_episodes`) as text summaries."""
    if not isinstance(tag, str) or not tag:
      raise ValueError(f"write_episodes: tag must be a non-empty string, got {tag!r}")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
      raise TypeError("write_episodes: texts must be strings")
    for s in self.sinks:
      s.write_texts(int(step), tag, texts)

  def close(self) -> None:
    for s in self.sinks:
      s.close()
    self.sinks = []


def progress(total: int, initial: int = 0, desc: str = "train") -> Optional[object]:
  """A tqdm bar on process 0 (None elsewhere)."""
  if jax.process_index() != 0:
    return None
  from tqdm import tqdm
  return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)
