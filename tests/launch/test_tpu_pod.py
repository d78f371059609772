"""launch/tpu_pod.sh exercised up to the hardware.

A fake `gcloud` first on PATH records every call and answers `describe` with a chosen state, so
the create / reuse / start / recreate logic runs for real; the commands the script sends to the
workers are then replayed here with bash in a sandbox home (this machine standing in for a
worker), checking the code that arrives and the exact arguments the trainer gets.
"""
import importlib.util
import json
import os
import pathlib
import re
import shutil

import pytest

_spec = importlib.util.spec_from_file_location("launch_fakes_tpu", pathlib.Path(__file__).with_name("fakes.py"))
fk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fk)
LAUNCH, REPO, CONFIG, TRAIN = fk.LAUNCH, fk.REPO, fk.CONFIG, fk.TRAIN


@pytest.fixture
def pod(tmp_path):
  """A small checkout holding the script, a fake gcloud first on PATH and one worker's home."""
  repo = tmp_path / "repo"
  (repo / "launch").mkdir(parents=True)
  shutil.copy(LAUNCH / "tpu_pod.sh", repo / "launch")
  shutil.copy(LAUNCH / "quote.sh", repo / "launch")
  shutil.copy(LAUNCH / "install.sh", repo / "launch")
  shutil.copy(REPO / "requirements.txt", repo)
  for rel in ["agent_rl/__init__.py", "configs/exp.py", ".git/HEAD", ".venv/bin/python",
              "runs/old/ckpt", "agent_rl/__pycache__/m.cpython-311.pyc"]:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text("x")
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  fk.write_exe(bin_dir / "gcloud", fk.FAKE_GCLOUD)
  home = tmp_path / "home"
  home.mkdir()
  env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_GCLOUD_LOG": str(tmp_path / "gcloud.log"),
         "FAKE_HOME": str(home), "TMPDIR": str(tmp_path)}

  def run(*args, **extra_env):
    result = fk.bash([repo / "launch/tpu_pod.sh", *args], env={**env, **extra_env}, cwd=tmp_path)
    log = tmp_path / "gcloud.log"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return result, calls

  return run, repo, home, tmp_path


POD_ARGS = ["--name=pod1", "--zone=us-west4-a", "--project=proj", f"--config={CONFIG}",
            "--workdir=gs://bucket/run"]


def _verb(call):
  return call[3]


def _ssh_commands(calls):
  return [next(a.split("=", 1)[1] for a in c if a.startswith("--command=")) for c in calls
          if _verb(c) == "ssh"]


def test_tpu_dry_run_creates_an_absent_slice_and_runs_nothing(pod):
  run, _, _, tmp = pod
  result, calls = run(*POD_ARGS, "--dry-run", "--spot", "--config.rl.iterations=3")
  assert result.returncode == 0, result.stderr
  assert [_verb(c) for c in calls] == ["describe"]  # the only command a dry run executes
  lines = fk.cmd_lines(result.stdout)
  gcloud = [t[4:] for t in lines if t[:4] == ["gcloud", "compute", "tpus", "tpu-vm"]]
  assert [t[0] for t in gcloud] == ["describe", "create", "scp", "ssh", "ssh", "ssh"]
  create = gcloud[1]
  assert create[1] == "pod1" and set(create[2:]) == {
      "--zone=us-west4-a", "--project=proj", "--accelerator-type=v5litepod-16",
      "--version=v2-alpha-tpuv5-lite", "--spot"}
  for t in gcloud[2:]:
    assert "--worker=all" in t and "--zone=us-west4-a" in t and "--project=proj" in t
  train = gcloud[-1]
  assert "--output-directory=logs/tpu/pod1" in train
  command = next(a for a in train if a.startswith("--command="))
  assert f"python -m agent_rl.train --config={CONFIG} --workdir=gs://bucket/run --config.rl.iterations=3" \
      in command
  assert not list(tmp.glob("*.tgz")) and not (tmp / "logs").exists()


def test_tpu_dry_run_reuses_a_ready_slice(pod):
  run, *_ = pod
  result, calls = run(*POD_ARGS, "--dry-run", "--skip-sync", "--skip-install", FAKE_TPU_STATE="READY")
  assert result.returncode == 0, result.stderr
  verbs = [t[4] for t in fk.cmd_lines(result.stdout) if t[0] == "gcloud"]
  assert verbs == ["describe", "ssh"] and "reusing READY TPU 'pod1'" in result.stdout


def test_tpu_dry_run_without_gcloud_shows_the_create(pod):
  run, *_ = pod
  result, calls = run(*POD_ARGS, "--dry-run", GCLOUD="/nonexistent/gcloud")
  assert result.returncode == 0, result.stderr
  assert calls == [] and "not found" in result.stderr
  assert any(t[4:5] == ["create"] for t in fk.cmd_lines(result.stdout))


@pytest.mark.parametrize("accel, version", [("v6e-8", "v2-alpha-tpuv6e"), ("v5p-16", "v2-alpha-tpuv5"),
                                            ("v5litepod-64", "v2-alpha-tpuv5-lite"),
                                            ("v4-32", "tpu-ubuntu2204-base")])
def test_tpu_default_software_version(pod, accel, version):
  run, *_ = pod
  result, _ = run(*POD_ARGS, "--dry-run", f"--accelerator-type={accel}")
  create = next(t for t in fk.cmd_lines(result.stdout) if t[4:5] == ["create"])
  assert f"--version={version}" in create and f"--accelerator-type={accel}" in create


@pytest.mark.parametrize("args, field", [
    (["--accelerator-type=x9-8"], "--accelerator-type"),
    (["--name=Bad_Name"], "--name"),
    (["--env=no-equals"], "--env"),
    (["--detach", "--delete-after"], "--delete-after"),
])
def test_tpu_bad_input_names_the_option(pod, args, field):
  run, *_ = pod
  result, calls = run(*POD_ARGS, "--dry-run", *args)
  assert result.returncode == 2 and field in result.stderr and calls == []


@pytest.mark.parametrize("state, extra, env, verbs, rc", [
    ("", [], {}, ["describe", "create", "scp", "ssh", "ssh", "ssh"], 0),
    ("READY", [], {}, ["describe", "scp", "ssh", "ssh", "ssh"], 0),
    ("STOPPED", [], {}, ["describe", "start", "scp", "ssh", "ssh", "ssh"], 0),
    ("PREEMPTED", [], {}, ["describe"], 2),
    ("PREEMPTED", ["--recreate"], {}, ["describe", "delete", "create", "scp", "ssh", "ssh", "ssh"], 0),
    ("READY", [], {"FAKE_TPU_TYPE": "v4-8"}, ["describe"], 2),
    ("READY", ["--delete-after"], {}, ["describe", "scp", "ssh", "ssh", "ssh", "delete"], 0),
    ("", [], {"FAKE_DESCRIBE_ERROR": "ERROR: PERMISSION_DENIED: no"}, ["describe"], 2),
])
def test_tpu_create_or_reuse(pod, state, extra, env, verbs, rc):
  run, *_ = pod
  result, calls = run(*POD_ARGS, *extra, FAKE_TPU_STATE=state, **env)
  assert result.returncode == rc, result.stderr
  assert [_verb(c) for c in calls] == verbs
  if "FAKE_DESCRIBE_ERROR" in env:
    assert "PERMISSION_DENIED" in result.stderr
  if rc == 2 and state == "PREEMPTED":
    assert "--recreate" in result.stderr


def test_tpu_worker_commands_deliver_code_and_exact_arguments(pod, tmp_path):
  """Replays what every worker would run, with this machine as the worker."""
  run, repo, home, tmp = pod
  awkward = "--config.note=it's \"quoted\" $HOME"
  result, calls = run(*POD_ARGS, "--env=MY_FLAG=a b", awkward, "--remote-dir=code")
  assert result.returncode == 0, result.stderr
  unpack, install, train = _ssh_commands(calls)
  assert "bash launch/install.sh" in install
  pin = re.search(r"^jax==(\S+)", (REPO / "requirements.txt").read_text(), re.M).group(1)
  assert f"jax[tpu]=={pin}" in install
  assert (tmp / "logs/tpu/pod1").is_dir()  # gcloud's --output-directory must exist

  # Code: a stale module disappears, a relative workdir next to the code stays.
  (home / "code/agent_rl").mkdir(parents=True)
  (home / "code/agent_rl/stale.py").write_text("x")
  (home / "code/runs").mkdir()
  worker_env = {"HOME": str(home)}
  r = fk.bash(["-c", unpack], env=worker_env, cwd=home)
  assert r.returncode == 0, r.stderr
  names = {p.relative_to(home / "code").as_posix() for p in (home / "code").rglob("*") if p.is_file()}
  assert {"agent_rl/__init__.py", "configs/exp.py", "launch/install.sh", "launch/tpu_pod.sh"} <= names
  assert not any(n.startswith((".git", ".venv", "runs/")) or "__pycache__" in n for n in names)
  assert (home / "code/runs").is_dir() and not (home / "agent_rl_code.tgz").exists()

  # Train: the venv's python gets exactly our arguments and environment.
  venv_bin = home / "agent_rl_venv/bin"
  venv_bin.mkdir(parents=True)
  fk.write_exe(venv_bin / "python", fk.FAKE_PYTHON)
  (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
  records = tmp_path / "records"
  records.mkdir()
  r = fk.bash(["-c", train], env={**worker_env, "RECORD_DIR": str(records)}, cwd=home)
  assert r.returncode == 0, r.stderr
  rec = json.loads((records / "0.json").read_text())
  assert rec["argv"] == [*TRAIN, "--workdir=gs://bucket/run", awkward]
  assert rec["env"]["MY_FLAG"] == "a b"


def test_tpu_detach_starts_in_background_with_a_log(pod, tmp_path):
  run, repo, home, tmp = pod
  result, calls = run(*POD_ARGS, "--detach", "--skip-sync", "--skip-install", FAKE_TPU_STATE="READY")
  assert result.returncode == 0, result.stderr
  (command,) = _ssh_commands(calls)
  venv_bin = home / "agent_rl_venv/bin"
  venv_bin.mkdir(parents=True)
  fk.write_exe(venv_bin / "python", fk.FAKE_PYTHON)
  (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
  (home / "agent_rl").mkdir()
  records = tmp_path / "records"
  records.mkdir()
  r = fk.bash(["-c", command + " wait"], env={"HOME": str(home), "RECORD_DIR": str(records)}, cwd=home)
  assert r.returncode == 0, r.stderr
  assert (home / "agent_rl_logs/pod1.log").read_text().strip() == "fake trainer 0"
  assert json.loads((records / "0.json").read_text())["argv"] == [*TRAIN, "--workdir=gs://bucket/run"]
