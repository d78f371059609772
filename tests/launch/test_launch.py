"""launch/local.sh and launch/slurm_gpu.sbatch exercised up to the hardware, plus syntax checks.

Each script runs under bash in a subprocess: in dry-run mode its printed commands are parsed
(process count, environment, the train command); in run mode, fakes first on PATH stand in for
`python` (records argv and environment) and `srun` (runs the task once per rank, as SLURM would),
so what each trainer process would actually receive is checked.
"""
import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

_spec = importlib.util.spec_from_file_location("launch_fakes_launch", pathlib.Path(__file__).with_name("fakes.py"))
fk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fk)
LAUNCH, REPO, CONFIG, TRAIN = fk.LAUNCH, fk.REPO, fk.CONFIG, fk.TRAIN


# ---------------------------------------------------------------------------------------------
# Syntax


@pytest.mark.parametrize("script", fk.SCRIPTS)
def test_bash_syntax(script):
  result = subprocess.run(["bash", "-n", str(LAUNCH / script)], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("script", fk.SCRIPTS)
def test_shellcheck(script):
  result = subprocess.run(["shellcheck", "-s", "bash", str(LAUNCH / script)],
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("script", ["local.sh", "tpu_pod.sh"])
def test_help(script):
  result = fk.bash([LAUNCH / script, "--help"])
  assert result.returncode == 0 and "--config" in result.stdout and "--dry-run" in result.stdout


# ---------------------------------------------------------------------------------------------
# local.sh

def test_local_dry_run_one_process():
  result = fk.bash([LAUNCH / "local.sh", "--dry-run", f"--config={CONFIG}", "--workdir", "/tmp/w x",
                  "--config.rl.iterations=3", "--", "--config.name=it's"],
                 env={"PYTHON": "python"})
  assert result.returncode == 0, result.stderr
  (tokens,) = fk.cmd_lines(result.stdout)
  env, cmd = fk.split_env(tokens)
  assert cmd == ["python", *TRAIN, "--workdir=/tmp/w x", "--config.rl.iterations=3",
                 "--config.name=it's"]
  assert not any(k.startswith("JAX_COORDINATOR") or k == "JAX_PROCESS_ID" for k in env)


def test_local_dry_run_processes_and_fake_devices():
  result = fk.bash([LAUNCH / "local.sh", "--dry-run", "--processes=3", "--fake-devices", "4",
                  "--port=23456", f"--config={CONFIG}", "--workdir=/tmp/w", "--config.mesh.fsdp=4"],
                 env={"XLA_FLAGS": "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8",
                      "PYTHON": "python"})
  assert result.returncode == 0, result.stderr
  lines = fk.cmd_lines(result.stdout)
  assert len(lines) == 3
  for i, tokens in enumerate(lines):
    env, cmd = fk.split_env(tokens)
    assert env["JAX_COORDINATOR_ADDRESS"] == "localhost:23456"
    assert env["JAX_NUM_PROCESSES"] == "3" and env["JAX_PROCESS_ID"] == str(i)
    assert env["JAX_PLATFORMS"] == "cpu"
    # The user's other XLA flags survive; the device count is replaced, not duplicated.
    assert env["XLA_FLAGS"].split() == ["--xla_cpu_foo=1", "--xla_force_host_platform_device_count=4"]
    assert cmd == ["python", *TRAIN, "--workdir=/tmp/w", "--config.mesh.fsdp=4"]
    assert f"/tmp/w/logs/process_{i}.log" in tokens and tokens[-1] == "&"


@pytest.mark.parametrize("args, user, expect", [
    (["--platform=cpu"], None, "arena_max=1"),       # CPU: the heap-keeping malloc tunables
    (["--fake-devices=2"], None, "arena_max=1"),
    (["--platform=cpu"], "glibc.malloc.hugetlb=0", None),   # the user's own: left alone
    (["--platform=gpu"], None, None),
    ([], None, None),
])
def test_local_dry_run_sets_malloc_tunables_for_cpu_runs(args, user, expect):
  env = {"PYTHON": "python"} | ({"GLIBC_TUNABLES": user} if user else {})
  result = fk.bash([LAUNCH / "local.sh", "--dry-run", *args, f"--config={CONFIG}", "--workdir=/tmp/w"],
                   env=env)
  assert result.returncode == 0, result.stderr
  printed, _ = fk.split_env(fk.cmd_lines(result.stdout)[0])
  if expect:
    assert expect in printed["GLIBC_TUNABLES"] and "mmap_max=0" in printed["GLIBC_TUNABLES"]
  else:
    assert "GLIBC_TUNABLES" not in printed


def test_local_dry_run_gpu_processes_get_one_device_each():
  result = fk.bash([LAUNCH / "local.sh", "--dry-run", "--platform=gpu", "--processes=2",
                  f"--config={CONFIG}", "--workdir=gs://bucket/run"])
  assert result.returncode == 0, result.stderr
  envs = [fk.split_env(t)[0] for t in fk.cmd_lines(result.stdout)]
  assert [e["JAX_LOCAL_DEVICE_IDS"] for e in envs] == ["0", "1"]
  assert all(e["JAX_PLATFORMS"] == "cuda" for e in envs)
  assert "logs/process_1.log" in result.stdout and "gs://bucket/run/logs" not in result.stdout


@pytest.mark.parametrize("args, field", [
    (["--workdir=/tmp/w"], "--config"),
    ([f"--config={CONFIG}"], "--workdir"),
    ([f"--config={CONFIG}", "--workdir=/tmp/w", "--processes=0"], "--processes"),
    ([f"--config={CONFIG}", "--workdir=/tmp/w", "--fake-devices=two"], "--fake-devices"),
    ([f"--config={CONFIG}", "--workdir=/tmp/w", "--platform=tpu"], "--platform"),
    ([f"--config={CONFIG}", "--workdir=/tmp/w", "--platform=gpu", "--fake-devices=2"], "--fake-devices"),
    ([f"--config={CONFIG}", "--workdir"], "--workdir"),
])
def test_local_bad_input_names_the_option(args, field):
  result = fk.bash([LAUNCH / "local.sh", "--dry-run", *args])
  assert result.returncode == 2 and field in result.stderr, result.stderr


@pytest.fixture
def fake_python(tmp_path):
  records = tmp_path / "records"
  records.mkdir()
  return fk.write_exe(tmp_path / "python", fk.FAKE_PYTHON), records


def test_local_runs_all_processes(tmp_path, fake_python):
  exe, records = fake_python
  result = fk.bash([LAUNCH / "local.sh", f"--python={exe}", "--processes=3", "--fake-devices=2",
                  f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", "--config.seed=1"],
                 env={"RECORD_DIR": str(records)})
  assert result.returncode == 0, result.stderr
  seen = {json.loads(p.read_text())["env"]["JAX_PROCESS_ID"]: json.loads(p.read_text())
          for p in records.glob("*.json")}
  assert sorted(seen) == ["0", "1", "2"]
  ports = {r["env"]["JAX_COORDINATOR_ADDRESS"] for r in seen.values()}
  assert len(ports) == 1 and re.fullmatch(r"localhost:\d+", ports.pop())
  for rec in seen.values():
    assert rec["argv"] == [*TRAIN, f"--workdir={tmp_path / 'w'}", "--config.seed=1"]
    assert rec["env"]["JAX_NUM_PROCESSES"] == "3"
    assert rec["env"]["XLA_FLAGS"].endswith("--xla_force_host_platform_device_count=2")
  assert "fake trainer 0" in result.stdout  # process 0 is echoed to the terminal
  assert (tmp_path / "w/logs/process_2.log").read_text().strip() == "fake trainer 2"


def test_local_fails_when_one_process_fails_and_stops_the_rest(tmp_path, fake_python):
  exe, records = fake_python
  # Without the stop, processes 0 and 2 would sleep past the subprocess timeout.
  result = fk.bash([LAUNCH / "local.sh", f"--python={exe}", "--processes=3", f"--config={CONFIG}",
                  f"--workdir={tmp_path / 'w'}"],
                 env={"RECORD_DIR": str(records), "FAIL_ID": "1", "SLEEP": "60"}, timeout=20)
  assert result.returncode == 7
  assert "process 1 exited with status 7" in result.stderr


def test_local_single_process_passes_exit_status(tmp_path, fake_python):
  exe, records = fake_python
  result = fk.bash([LAUNCH / "local.sh", f"--python={exe}", "--platform=cpu", f"--config={CONFIG}",
                  f"--workdir={tmp_path}"], env={"RECORD_DIR": str(records), "FAIL_ID": "0"})
  assert result.returncode == 7
  rec = json.loads((records / "0.json").read_text())
  assert rec["env"]["JAX_PLATFORMS"] == "cpu" and "JAX_NUM_PROCESSES" not in rec["env"]


# ---------------------------------------------------------------------------------------------
# slurm_gpu.sbatch

def _slurm(env, *args, bin_dir=None):
  extra = {"PATH": f"{bin_dir}:{os.environ['PATH']}"} if bin_dir else {}
  return fk.bash([LAUNCH / "slurm_gpu.sbatch", *args], env={**env, **extra})


def _slurm_dry(stdout):
  exports = dict(shlex.split(line)[1].split("=", 1) for line in stdout.splitlines()
                 if line.startswith("export "))
  (srun,) = fk.cmd_lines(stdout)
  return exports, srun


def _opts(srun):
  return dict(a[2:].split("=", 1) for a in srun[:srun.index("bash")] if "=" in a)


def test_slurm_dry_run_one_process_per_gpu():
  result = _slurm({"DRY_RUN": "1"}, f"--config={CONFIG}", "--workdir=/shared/w", "--config.x=a b")
  assert result.returncode == 0, result.stderr
  exports, srun = _slurm_dry(result.stdout)
  opts = _opts(srun)
  assert (opts["nodes"], opts["ntasks"], opts["ntasks-per-node"]) == ("2", "16", "8")
  assert opts["kill-on-bad-exit"] == "1"
  assert exports["JAX_COORDINATOR_ADDRESS"] == "node001:10000"  # first of node[001-002], job 0
  assert exports["JAX_NUM_PROCESSES"] == "16" and "JAX_LOCAL_DEVICE_IDS" not in exports
  task = srun[srun.index("bash") + 2]
  assert "JAX_PROCESS_ID=$SLURM_PROCID" in task and "JAX_LOCAL_DEVICE_IDS=$SLURM_LOCALID" in task
  assert shlex.split(task.split("exec ", 1)[1]) == ["python", *TRAIN, "--workdir=/shared/w",
                                                    "--config.x=a b"]


def test_slurm_dry_run_one_process_per_node_names_all_gpus():
  env = {"DRY_RUN": "1", "PROCS": "per-node", "SLURM_JOB_ID": "1234", "SLURM_NNODES": "5",
         "SLURM_JOB_NODELIST": "gpu-a[07,09-12],b3", "SLURM_GPUS_PER_NODE": "h100:4",
         "CONFIG": CONFIG, "WORKDIR": "/w"}
  if shutil.which("scontrol"):
    pytest.skip("a real scontrol is on PATH; the fallback parser is not used")
  result = _slurm(env)
  assert result.returncode == 0, result.stderr
  exports, srun = _slurm_dry(result.stdout)
  assert (_opts(srun)["ntasks"], _opts(srun)["ntasks-per-node"]) == ("5", "1")
  assert exports["JAX_COORDINATOR_ADDRESS"] == "gpu-a07:11234"  # 10000 + job id
  assert exports["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3"
  assert "JAX_LOCAL_DEVICE_IDS=$SLURM_LOCALID" not in srun[-1]
  assert f"--config={CONFIG} --workdir=/w" in srun[-1]


def test_slurm_first_host_comes_from_scontrol(tmp_path):
  fk.write_exe(tmp_path / "scontrol", fk.FAKE_SCONTROL)
  env = {"DRY_RUN": "1", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu-x[7-8]", "SLURM_NNODES": "2",
         "SLURM_GPUS_ON_NODE": "4", "EXPECT_NODELIST": "gpu-x[7-8]", "JAX_COORDINATOR_PORT": "4444"}
  result = _slurm(env, f"--config={CONFIG}", "--workdir=/w", bin_dir=tmp_path)
  assert result.returncode == 0, result.stderr
  exports, srun = _slurm_dry(result.stdout)
  assert exports["JAX_COORDINATOR_ADDRESS"] == "gpu-x7:4444" and exports["JAX_NUM_PROCESSES"] == "8"


def test_slurm_job_runs_every_task_with_its_rank(tmp_path):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  fk.write_exe(bin_dir / "srun", fk.FAKE_SRUN)
  fk.write_exe(bin_dir / "scontrol", fk.FAKE_SCONTROL)
  venv_bin = tmp_path / "venv/bin"
  venv_bin.mkdir(parents=True)
  fk.write_exe(venv_bin / "python", fk.FAKE_PYTHON)
  (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
  records = tmp_path / "records"
  records.mkdir()
  env = {"SLURM_JOB_ID": "99", "SLURM_JOB_NODELIST": "gpu-x[7-8]", "SLURM_NNODES": "2",
         "SLURM_GPUS_ON_NODE": "2", "SLURM_SUBMIT_DIR": str(tmp_path), "EXPECT_NODELIST": "gpu-x[7-8]",
         "VENV": str(tmp_path / "venv"), "RECORD_DIR": str(records),
         "FAKE_SRUN_LOG": str(tmp_path / "srun.json"), "XLA_FLAGS": "--xla_dump_to=/tmp/d"}
  result = _slurm(env, f"--config={CONFIG}", "--workdir=/shared/w", "--config.note=it's", bin_dir=bin_dir)
  assert result.returncode == 0, result.stderr
  recs = {p.stem: json.loads(p.read_text()) for p in records.glob("*.json")}
  assert sorted(recs) == ["0", "1", "2", "3"]
  for rank, rec in recs.items():
    assert rec["argv"] == [*TRAIN, "--workdir=/shared/w", "--config.note=it's"]
    env = rec["env"]
    assert env["JAX_COORDINATOR_ADDRESS"] == "gpu-x7:10099" and env["JAX_NUM_PROCESSES"] == "4"
    assert env["JAX_LOCAL_DEVICE_IDS"] == str(int(rank) % 2) and env["JAX_PLATFORMS"] == "cuda"
    # The user's XLA flags come last, so they win over the defaults.
    assert env["XLA_FLAGS"].split()[-1] == "--xla_dump_to=/tmp/d"
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in env["XLA_FLAGS"].split()


def test_slurm_default_xla_flags_are_known_to_the_installed_xla():
  """XLA aborts on an unknown flag; this catches defaults that a jax upgrade removed."""
  result = _slurm({"DRY_RUN": "1"}, f"--config={CONFIG}", "--workdir=/w")
  flags = _slurm_dry(result.stdout)[0]["XLA_FLAGS"]
  assert len(flags.split()) == 10
  env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
  # Both at once: each is a cold `import jax`.
  probe, bogus = [subprocess.Popen([sys.executable, "-c", "import jax; jax.devices()"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env={**env, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f})
                  for f in (flags, "--xla_gpu_no_such_flag=1")]
  _, err = probe.communicate(timeout=60)
  bogus.communicate(timeout=60)
  assert probe.returncode == 0, err[-2000:]
  assert bogus.returncode != 0  # the probe can fail


@pytest.mark.parametrize("env, args, needle", [
    ({}, [f"--config={CONFIG}", "--workdir=/w"], "DRY_RUN=1"),
    ({"DRY_RUN": "1"}, ["--workdir=/w"], "CONFIG"),
    ({"DRY_RUN": "1"}, [f"--config={CONFIG}"], "WORKDIR"),
    ({"DRY_RUN": "1", "PROCS": "per-core"}, [f"--config={CONFIG}", "--workdir=/w"], "PROCS"),
    ({"DRY_RUN": "1", "GPUS_PER_NODE": "zero"}, [f"--config={CONFIG}", "--workdir=/w"], "GPUS_PER_NODE"),
])
def test_slurm_bad_input_names_the_setting(env, args, needle):
  result = _slurm(env, *args)
  assert result.returncode == 2 and needle in result.stderr, result.stderr
