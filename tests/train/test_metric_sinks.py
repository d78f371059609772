"""Metric sinks: JSONL / TensorBoard / wandb behind one writer, exact-resume semantics, gs://.

TensorBoard files are read back with a minimal TFRecord reader and tensorboardX's event
protos (the `tensorboard` package is not installed), and TensorBoard's purge rule (a
SessionLog.START at step S hides earlier files' events at steps >= S) is applied by hand.
wandb runs for real in offline mode (no network), and through a fake module for the calls.
"""
import contextlib
import json
import os
import struct
import sys
import types

import pytest
from etils import epath
from etils.epath import testing as epath_testing

from agent_rl.metrics import MetricWriter, check_log_config, parse_sinks, read_jsonl
from agent_rl.train.config import base_config


def read_events(path):
  """Event protos of one tfevents file (TFRecord: u64 length, u32 crc, data, u32 crc)."""
  from tensorboardX.proto import event_pb2
  data, out, i = epath.Path(path).read_bytes(), [], 0
  while i < len(data):
    (n,) = struct.unpack("<Q", data[i:i + 8])
    ev = event_pb2.Event()
    ev.ParseFromString(data[i + 12:i + 12 + n])
    out.append(ev)
    i += 12 + n + 4
  return out


def tb_view(logdir):
  """{(tag, step): value or text} as TensorBoard shows it (files in name order, purges)."""
  from tensorboardX.proto import event_pb2
  view = {}
  for f in sorted(epath.Path(logdir).glob("events.out.tfevents.*")):
    for ev in read_events(f):
      if ev.HasField("session_log") and ev.session_log.status == event_pb2.SessionLog.START:
        view = {k: v for k, v in view.items() if k[1] < ev.step}
      for v in ev.summary.value:
        val = v.simple_value if v.HasField("simple_value") else v.tensor.string_val[0].decode()
        view[(v.tag, ev.step)] = val
  return view


def run_segment(workdir, sinks, steps, resume_from=None, scale=1.0, options=None):
  w = MetricWriter(workdir, sinks, options=options)
  w.truncate_after(0 if resume_from is None else resume_from)
  for s in steps:
    w.write(s, {"a": s * scale, "b": -s})
    if s % 2 == 0:
      w.write_episodes(s, "sampled", [f"ep{s}-0", f"ep{s}-1"])
  w.close()


def expected_jsonl(kept_first, second, scale):
  return ([{"step": s, "a": float(s), "b": float(-s)} for s in kept_first]
          + [{"step": s, "a": s * scale, "b": float(-s)} for s in second])


def test_jsonl_resume_truncates_both_files(tmp_path):
  run_segment(tmp_path, "jsonl", range(1, 6))
  run_segment(tmp_path, "jsonl", range(4, 8), resume_from=3, scale=10.0)  # killed after 5
  assert read_jsonl(tmp_path / "metrics.jsonl") == expected_jsonl([1, 2, 3], range(4, 8), 10.0)
  eps = read_jsonl(tmp_path / "episodes.jsonl")
  assert [(r["step"], r["index"], r["text"]) for r in eps] == [
      (s, i, f"ep{s}-{i}") for s in (2, 4, 6) for i in (0, 1)]
  assert {r["tag"] for r in eps} == {"sampled"}


def test_tensorboard_scalars_texts_and_purge_on_resume(tmp_path):
  run_segment(tmp_path, "jsonl,tensorboard", range(1, 6))
  view = tb_view(tmp_path / "tb")
  assert {k: v for k, v in view.items() if k[0] == "a"} == {("a", s): float(s) for s in range(1, 6)}
  assert "ep4-1" in view[("episodes/sampled/text_summary", 4)] and "**episode 1**" in view[("episodes/sampled/text_summary", 4)]
  run_segment(tmp_path, "jsonl,tensorboard", range(4, 8), resume_from=3, scale=10.0)
  view = tb_view(tmp_path / "tb")
  # steps 4, 5 of the killed segment are hidden; the rerun's values show instead.
  assert {k: v for k, v in view.items() if k[0] == "a"} == {
      ("a", s): float(s) if s <= 3 else 10.0 * s for s in range(1, 8)}
  files = sorted((tmp_path / "tb").glob("events.out.tfevents.*"))
  assert len(files) == 2
  first = read_events(files[0])
  assert not any(e.HasField("session_log") for e in first)  # a fresh run purges nothing


@contextlib.contextmanager
def fake_gcs(root):
  """gs://bucket/... served from `root` through epath's mock backend; plain `open` or
  `os.makedirs` on a gs:// string would fail (no such local directory)."""
  def local(p):
    p = os.fspath(p)
    return p.replace("gs://bucket", os.fspath(root)) if p.startswith("gs://") else p

  def one(fn, path, *a, **k):
    return fn(local(path), *a, **k)

  def two(fn, path, dst, *a, **k):
    return fn(local(path), local(dst), *a, **k)

  def glob(fn, pattern):
    return [p.replace(os.fspath(root), "gs://bucket") for p in fn(local(pattern))]

  fns = dict(open=one, exists=one, isdir=one, listdir=one, makedirs=one, mkdir=one,
             remove=one, rmtree=one, stat=one, rename=two, replace=two, glob=glob)
  with epath_testing.mock_epath(**fns):
    yield


def test_gs_workdir_through_epath(tmp_path):
  (tmp_path / "run").mkdir()
  with fake_gcs(tmp_path):
    run_segment("gs://bucket/run", "jsonl,tensorboard", range(1, 6))
    run_segment("gs://bucket/run", "jsonl,tensorboard", range(4, 8), resume_from=3, scale=10.0)
  assert not os.path.exists("gs:")
  assert read_jsonl(tmp_path / "run" / "metrics.jsonl") == expected_jsonl([1, 2, 3], range(4, 8), 10.0)
  view = tb_view(tmp_path / "run" / "tb")
  assert view[("a", 5)] == 50.0 and view[("a", 2)] == 2.0
  assert "ep6-0" in view[("episodes/sampled/text_summary", 6)]


class FakeWandb(types.ModuleType):
  """Records what the sink calls (init kwargs, log(data, step), finish)."""

  def __init__(self, resumed_step=0):
    super().__init__("wandb")
    self.calls, self.resumed_step = [], resumed_step
    fake = self

    class Table:
      def __init__(self, columns, data):
        self.columns, self.data = columns, data

    class Run:
      step = resumed_step

      def log(self, data, step):
        fake.calls.append(("log", step, data))

      def finish(self):
        fake.calls.append(("finish",))

    self.Table, self._run = Table, Run

  def init(self, **kw):
    self.calls.append(("init", kw))
    return self._run()


def test_wandb_sink_calls_with_a_fake_module(tmp_path, monkeypatch):
  fake = FakeWandb()
  monkeypatch.setitem(sys.modules, "wandb", fake)
  run_segment(tmp_path, "jsonl,wandb", [1, 2], options=dict(wandb_project="p", wandb_mode="offline",
                                                            run_config={"seed": 3}))
  init = fake.calls[0][1]
  run_id = (tmp_path / "wandb_run_id").read_text()
  assert len(run_id) == 8
  assert (init["project"], init["mode"], init["id"], init["resume"]) == ("p", "offline", run_id, "allow")
  assert init["config"] == {"seed": 3} and init["dir"] == os.fspath(tmp_path)
  assert fake.calls[1] == ("log", 1, {"a": 1.0, "b": -1.0})
  assert fake.calls[3][:2] == ("log", 2) and fake.calls[3][2]["episodes/sampled"].data == [
      [0, "ep2-0"], [1, "ep2-1"]]
  assert fake.calls[-1] == ("finish",)
  # Resume: the same run id; steps the server already has (< run.step = 3) are not resent.
  fake2 = FakeWandb(resumed_step=3)
  monkeypatch.setitem(sys.modules, "wandb", fake2)
  run_segment(tmp_path, "jsonl,wandb", [2, 3], resume_from=1)
  assert fake2.calls[0][1]["id"] == run_id
  assert [c[1] for c in fake2.calls if c[0] == "log"] == [3]


def test_wandb_offline_for_real(tmp_path, monkeypatch):
  pytest.importorskip("wandb")
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  run_segment(tmp_path, "jsonl,wandb", [1, 2, 3], options=dict(wandb_project="agent_rl_test"))
  run_id = (tmp_path / "wandb_run_id").read_text()
  runs = list((tmp_path / "wandb").glob("offline-run-*"))
  assert len(runs) == 1 and runs[0].name.endswith(run_id)
  assert (runs[0] / f"run-{run_id}.wandb").stat().st_size > 0


def test_sink_config_errors():
  assert parse_sinks(" jsonl , tensorboard") == ("jsonl", "tensorboard")
  with pytest.raises(ValueError, match=r"config.log.sinks: unknown sink 'tb'; known: jsonl, tensorboard, wandb"):
    parse_sinks("jsonl,tb")
  with pytest.raises(ValueError, match="must include 'jsonl'"):
    parse_sinks("tensorboard")
  c = base_config()
  check_log_config(c.log)
  c.log.wandb_mode = "cloud"
  with pytest.raises(ValueError, match="config.log.wandb_mode"):
    check_log_config(c.log)


def test_writer_from_config_default_is_jsonl_and_tensorboard(tmp_path):
  c = base_config()
  w = MetricWriter.from_config(c, tmp_path)
  assert w.names == ("jsonl", "tensorboard")
  w.write(1, {"x": 0.5})
  w.close()
  assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 1, "x": 0.5}
  assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_validate_checks_the_log_block(monkeypatch):
  from agent_rl.train.config import validate
  from tests.train.tiny import tiny_config
  c = tiny_config()
  c.log.sinks = "jsonl,tensorbord"
  with pytest.raises(ValueError, match=r"config.log.sinks: unknown sink 'tensorbord'"):
    validate(c)
  c.log.sinks, c.log.episodes = "jsonl", -1
  with pytest.raises(ValueError, match="config.log.episodes"):
    validate(c)
  c.log.sinks, c.log.episodes = "jsonl,wandb", 3
  import importlib.util
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a))
  with pytest.raises(ValueError, match="'wandb' is configured but the wandb package is not installed"):
    validate(c)
