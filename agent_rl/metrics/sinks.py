"""Metric sinks behind `MetricWriter`: JSONL (the source of truth), TensorBoard, Weights & Biases.

A sink takes scalars `{name: float}` at a step and text summaries (rendered episodes) under a
tag. Paths go through `etils.epath`, so `gs://` (and `s3://`) workdirs work like local ones.

Resume (`truncate_after(step)`, called once before the first write with the restored step):
  jsonl        records with step > `step` are deleted from metrics.jsonl / episodes.jsonl,
               so the files read as one uninterrupted run.
  tensorboard  event files are append-only; the next event file starts with TensorBoard's
               purge marker (`purge_step = step + 1`, a SessionLog.START), so TensorBoard
               hides the old file's events from that step on and shows the rerun's.
  wandb        history is append-only too; the run id is kept in the workdir and the resumed
               process re-attaches to the same run (`resume="allow"`). Steps the server has
               already seen are not sent again: exact resume makes them bit-identical anyway.
               Offline mode (`WANDB_MODE=offline`) writes one offline run directory per
               process start under the same id; `wandb sync` uploads them to that run.
"""
from __future__ import annotations

import abc

import importlib
import io
import json
import os
import tempfile
import time
import uuid
from typing import Any, Mapping, Sequence

from etils import epath

from agent_rl.registry import Registry

SINKS = Registry("metric sink")
METRICS_FILE, EPISODES_FILE = "metrics.jsonl", "episodes.jsonl"
_REMOTE = ("gs://", "s3://", "az://")


def is_remote(path) -> bool:
  return os.fspath(path).startswith(_REMOTE)


class Sink(abc.ABC):
  """The interface every sink implements (all methods run on process 0 only)."""

  @abc.abstractmethod
  def truncate_after(self, step: int) -> None:
    """Drops what was written after `step` (exact resume), as far as the backend can."""

  @abc.abstractmethod
  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    """Writes one step's scalar metrics."""

  @abc.abstractmethod
  def write_texts(self, step: int, tag: str, texts: Sequence[str]) -> None:
    """Writes text summaries (sampled episodes) under `tag`."""

  def close(self) -> None:
    pass


def read_jsonl(path) -> list[dict]:
  """Records of a JSONL file (local or `gs://`); ValueError names the file and line."""
  p = epath.Path(path)
  out = []
  for n, ln in enumerate(p.read_text().splitlines(), 1):
    if ln.strip():
      try:
        out.append(json.loads(ln))
      except json.JSONDecodeError as e:
        raise ValueError(f"{p}:{n}: not a JSON record ({e})") from None
  return out


class _JsonlFile:
  """One append-only JSONL file. Object stores have no append, so remote files are rewritten
  whole on each write (metric logs are small); local files are appended to."""

  def __init__(self, path: epath.Path):
    self.path = path
    self._lines: list[str] | None = None  # the remote file's content, loaded once

  def truncate_after(self, step: int) -> None:
    if not self.path.exists():
      self._lines = []
      return
    keep = [json.dumps(r, sort_keys=True) + "\n" for r in read_jsonl(self.path)
            if r.get("step", 0) <= step]
    self.path.write_text("".join(keep))
    self._lines = keep

  def append(self, records: Sequence[dict]) -> None:
    lines = [json.dumps(r, sort_keys=True) + "\n" for r in records]
    if not is_remote(self.path):
      with self.path.open("a") as f:
        f.writelines(lines)
      return
    if self._lines is None:
      self._lines = self.path.read_text().splitlines(True) if self.path.exists() else []
    self._lines += lines
    self.path.write_text("".join(self._lines))


@SINKS.register("jsonl")
class JsonlSink(Sink):
  """`metrics.jsonl`: one `{"step": s, name: value, ...}` line per write (what the report,
  the resume tests and `read_jsonl` read); `episodes.jsonl`: one `{"step", "tag", "index",
  "text"}` line per rendered episode."""

  def __init__(self, workdir: epath.Path, options: Mapping[str, Any]):
    del options
    self.metrics = _JsonlFile(workdir / METRICS_FILE)
    self.episodes = _JsonlFile(workdir / EPISODES_FILE)

  def truncate_after(self, step: int) -> None:
    self.metrics.truncate_after(step)
    self.episodes.truncate_after(step)

  def write_scalars(self, step, scalars):
    self.metrics.append([{"step": int(step), **scalars}])

  def write_texts(self, step, tag, texts):
    self.episodes.append([{"step": int(step), "tag": tag, "index": i, "text": t}
                          for i, t in enumerate(texts)])


class _EpathRecordWriter:
  """tensorboardX record writer for object stores through epath (no boto / google-cloud
  client): the event file is buffered and re-uploaded whole on flush, as tensorboardX's own
  S3 writer does."""

  def __init__(self, path: str):
    self.path, self.buffer = epath.Path(path), io.BytesIO()

  def write(self, data: bytes) -> None:
    self.buffer.write(data)

  def flush(self) -> None:
    self.path.write_bytes(self.buffer.getvalue())

  def close(self) -> None:
    self.flush()


class _EpathWriterFactory:
  def open(self, path: str) -> _EpathRecordWriter:
    return _EpathRecordWriter(path)

  def directory_check(self, path: str) -> None:
    epath.Path(path).mkdir(parents=True, exist_ok=True)


@SINKS.register("tensorboard")
class TensorBoardSink(Sink):
  """tensorboardX scalars under `workdir/tb`, episodes as text summaries `episodes/<tag>`."""

  def __init__(self, workdir: epath.Path, options: Mapping[str, Any]):
    del options
    self.logdir = workdir / "tb"
    if is_remote(self.logdir):
      from tensorboardX import record_writer
      for scheme in _REMOTE:
        record_writer.register_writer_factory(scheme[:-3], _EpathWriterFactory())
    self._tb = None
    self._purge_step: int | None = None

  def truncate_after(self, step: int) -> None:
    # Only a resumed run has older event files whose later steps must be hidden.
    if self.logdir.exists() and any(self.logdir.glob("events.out.tfevents.*")):
      self._purge_step = int(step) + 1

  def _writer(self):
    if self._tb is None:  # opened lazily so truncate_after can set the purge step first
      from tensorboardX import SummaryWriter
      # Event files are named by the second they open in; the ns suffix keeps a quick
      # restart from overwriting the previous file and sorts it after (TensorBoard reads
      # files in name order).
      self._tb = SummaryWriter(os.fspath(self.logdir), purge_step=self._purge_step,
                               filename_suffix=f".{time.time_ns()}")
    return self._tb

  def write_scalars(self, step, scalars):
    tb = self._writer()
    for k, v in scalars.items():
      tb.add_scalar(k, v, step)
    tb.flush()

  def write_texts(self, step, tag, texts):
    # The text plugin renders markdown: indent by 4 so boards and line breaks survive.
    body = "\n\n".join(f"**episode {i}**\n\n" + "\n".join("    " + ln for ln in t.splitlines())
                       for i, t in enumerate(texts))
    tb = self._writer()
    tb.add_text(f"episodes/{tag}", body, step)
    tb.flush()

  def close(self):
    if self._tb is not None:
      self._tb.close()


@SINKS.register("wandb")
class WandbSink(Sink):
  """Weights & Biases; `wandb` is imported only when this sink is configured.

  options: wandb_project, wandb_entity ("" = wandb's default), wandb_mode ("" = wandb's own
  default / `WANDB_MODE`; online | offline | disabled), run_config (logged as the run config),
  run_name. The run id lives in `workdir/wandb_run_id` so a resumed run continues it.
  """

  def __init__(self, workdir: epath.Path, options: Mapping[str, Any]):
    try:
      self._wandb = importlib.import_module("wandb")
    except ImportError as e:
      raise ImportError("config.log.sinks names 'wandb' but the wandb package is not "
                        "installed (pip install wandb)") from e
    self.workdir = workdir
    id_file = workdir / "wandb_run_id"
    resumed = id_file.exists()
    run_id = id_file.read_text().strip() if resumed else uuid.uuid4().hex[:8]
    if not resumed:
      id_file.write_text(run_id)
    # wandb stages files in a local directory; a gs:// workdir gets a local temp one.
    if is_remote(workdir):
      local = os.environ.get("WANDB_DIR") or tempfile.mkdtemp(prefix="wandb_")
    else:
      local = os.fspath(workdir)
    self.run = self._wandb.init(
        project=options.get("wandb_project") or None, entity=options.get("wandb_entity") or None,
        mode=options.get("wandb_mode") or None, id=run_id, resume="allow", dir=local,
        name=options.get("run_name") or None, config=dict(options.get("run_config") or {}))
    # Online, a resumed run knows the next step it expects; earlier ones are already there.
    self._first_new_step = int(getattr(self.run, "step", 0) or 0) if resumed else 0

  def truncate_after(self, step: int) -> None:
    del step  # see the module docstring: wandb history is append-only

  def write_scalars(self, step, scalars):
    if step >= self._first_new_step:
      self.run.log(dict(scalars), step=int(step))

  def write_texts(self, step, tag, texts):
    if step >= self._first_new_step:
      table = self._wandb.Table(columns=["episode", "text"],
                                data=[[i, t] for i, t in enumerate(texts)])
      self.run.log({f"episodes/{tag}": table}, step=int(step))

  def close(self):
    self.run.finish()
