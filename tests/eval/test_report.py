"""report.md: learning summary plus the sampled episodes before and after training; gs://."""
from agent_rl.eval.report import write_report
from agent_rl.metrics import MetricWriter
from tests.train.test_metric_sinks import fake_gcs


def fill(workdir):
  w = MetricWriter(workdir, "jsonl")
  w.truncate_after(0)
  for step, succ in ((0, 0.0), (5, 0.25), (10, 0.5)):
    w.write(step, {"eval/success": succ})
    w.write_episodes(step, "before" if step == 0 else "sampled",
                     [f"episode {i} at step {step}\n[prompt]\n#_P#" for i in range(2)])
  w.close()


def check(md: str):
  assert "- held-out success: 0.000 at step 0 -> 0.500 at step 10 (best 0.500)" in md
  before = md.index("### before training (step 0, before)")
  after = md.index("### after training (step 10, sampled)")
  assert before < md.index("episode 1 at step 0") < after < md.index("episode 0 at step 10")
  assert "at step 5" not in md  # only the first and the last episodes are shown
  assert "```text\nepisode 0 at step 0\n[prompt]\n#_P#\n```" in md


def test_report_shows_episodes_before_and_after(tmp_path):
  fill(tmp_path)
  png, md = write_report(tmp_path)
  check(open(md).read())
  assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_report_without_episodes_has_no_section(tmp_path):
  w = MetricWriter(tmp_path, "jsonl")
  w.write(1, {"eval/success": 0.5})
  w.close()
  _, md = write_report(tmp_path)
  assert "Sampled episodes" not in open(md).read()


def test_report_on_gs_workdir(tmp_path):
  (tmp_path / "run").mkdir()
  with fake_gcs(tmp_path):
    fill("gs://bucket/run")
    png, md = write_report("gs://bucket/run")
  assert (png, md) == ("gs://bucket/run/report.png", "gs://bucket/run/report.md")
  check((tmp_path / "run" / "report.md").read_text())
  assert (tmp_path / "run" / "report.png").read_bytes()[:4] == b"\x89PNG"


def test_report_cli_prints_the_markdown(tmp_path, capsys):
  import pytest
  from agent_rl.train.report import main
  fill(tmp_path)
  main(["agent_rl.train.report", str(tmp_path)])
  out = capsys.readouterr().out
  assert "## Sampled episodes" in out and f"wrote {tmp_path}/report.png" in out
  with pytest.raises(SystemExit, match="usage"):
    main(["agent_rl.train.report"])


def test_report_names_the_code_that_trained_the_run(tmp_path):
  import json
  fill(tmp_path)
  _, md = write_report(tmp_path)
  assert "- code:" not in open(md).read()  # a run from before code.jsonl: no line
  versions = {"python": "3.11.9", "jax": "0.10.2", "flax": "0.12.0", "numpy": None}
  starts = [{"commit": "a" * 40, "dirty": False, "versions": {**versions, "jax": "0.10.1"}},
            {"commit": "b" * 40, "dirty": True, "versions": versions}]
  (tmp_path / "code.jsonl").write_text("".join(json.dumps(s) + "\n" for s in starts))
  _, md = write_report(tmp_path)
  assert ("- code: aaaaaaaaaa, bbbbbbbbbb+dirty (2 start-ups; last with python 3.11.9, "
          "jax 0.10.2, flax 0.12.0)\n") in open(md).read()
