"""Shared by the launch-script tests: fake executables put first on PATH, and helpers that run a
script under bash and parse the commands it prints (one shell-quoted line per command, '+ ...').

The fakes record what they were given (a `python` its argv and JAX/XLA environment, a `gcloud`
its arguments) or replay it the way the real tool would (`srun` runs the task once per rank).
"""
import os
import pathlib
import re
import shlex
import stat
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
LAUNCH = REPO / "launch"
SCRIPTS = ["local.sh", "tpu_pod.sh", "slurm_gpu.sbatch", "quote.sh"]
ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

CONFIG = "configs/ragen_sokoban.py:tiny,ppo"
TRAIN = ["-m", "agent_rl.train", f"--config={CONFIG}"]

# A `python` that writes its arguments and the JAX / XLA environment to $RECORD_DIR/<n>.json.
FAKE_PYTHON = f"""#!{sys.executable} -S
import json, os, sys, time
keep = {{k: v for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_", "NCCL_", "MY_"))}}
name = os.environ.get("JAX_PROCESS_ID", "0")
with open(os.path.join(os.environ["RECORD_DIR"], name + ".json"), "w") as f:
  json.dump({{"argv": sys.argv[1:], "env": keep}}, f)
print("fake trainer", name, flush=True)
if name == os.environ.get("FAIL_ID"):
  sys.exit(7)
time.sleep(float(os.environ.get("SLEEP", "0")))
"""

# A `gcloud` that appends its arguments as one JSON line, answers `describe` from FAKE_TPU_*,
# and for `scp` copies the local file into $FAKE_HOME (one worker's home) under the target name.
FAKE_GCLOUD = f"""#!{sys.executable} -S
import json, os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_GCLOUD_LOG"], "a") as f:
  f.write(json.dumps(args) + "\\n")
verb = args[3] if len(args) > 3 else ""
if verb == "describe":
  if os.environ.get("FAKE_DESCRIBE_ERROR"):
    sys.exit(print(os.environ["FAKE_DESCRIBE_ERROR"], file=sys.stderr) or 1)
  state = os.environ.get("FAKE_TPU_STATE")
  if not state:
    sys.exit(print("ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: Resource "
                   "'projects/p/locations/z/nodes/x' was not found", file=sys.stderr) or 1)
  print("WARNING: a line gcloud sometimes prints first", file=sys.stderr)
  print(state + "\\t" + os.environ.get("FAKE_TPU_TYPE", "v5litepod-16"))
elif verb == "scp":
  src, dst = args[4], args[5]
  shutil.copy(src, os.path.join(os.environ["FAKE_HOME"], dst.split(":", 1)[1]))
"""


# An `srun` that runs the task command once per rank, as SLURM would across nodes, with the
# per-task variables SLURM sets (ranks fill node 0 first).
FAKE_SRUN = f"""#!{sys.executable} -S
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_SRUN_LOG"], "w") as f:
  json.dump(args, f)
opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
cmd = args[args.index("bash"):]
ntasks, per_node = int(opts["ntasks"]), int(opts["ntasks-per-node"])
codes = [subprocess.call(cmd, env={{**os.environ, "SLURM_PROCID": str(r),
                                    "SLURM_LOCALID": str(r % per_node),
                                    "SLURM_NODEID": str(r // per_node)}}) for r in range(ntasks)]
sys.exit(max(codes))
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
[ "$1 $2" = "show hostnames" ] || exit 1
[ "$3" = "$EXPECT_NODELIST" ] || exit 1
printf 'gpu-x7\\ngpu-x8\\n'
"""


def write_exe(path, text):
  path.write_text(text)
  path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
  return path


def bash(args, env=None, cwd=None, timeout=30):
  # Hermetic: none of the JAX / XLA / SLURM settings of the test process (conftest sets some).
  full = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "SLURM_", "TPU_", "GLIBC_"))}
  full.update(env or {})
  return subprocess.run(["bash", *map(str, args)], capture_output=True, text=True, env=full,
                        cwd=cwd, timeout=timeout)


def cmd_lines(stdout):
  """The printed commands ('+ ...'), each split as the shell would."""
  return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ ")]


def split_env(tokens):
  """'env K=V ... prog args [redirects] &' -> ({K: V}, [prog, args...])."""
  assert tokens[0] == "env", tokens
  env, i = {}, 1
  while ENV_WORD.match(tokens[i]):
    key, value = tokens[i].split("=", 1)
    env[key] = value
    i += 1
  cmd = tokens[i:]
  for stop in ("2>&1", ">", "|", "&"):
    if stop in cmd:
      cmd = cmd[:cmd.index(stop)]
  return env, cmd
