"""Preemption on several hosts: SIGTERM to ONE of two processes (as a TPU maintenance event
reaches one worker) makes BOTH save a checkpoint at the same step through JAX's preemption
sync point (orbax `reached_preemption`, as MaxText does) and exit; a restart resumes from it.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.train.tiny import ROOT, child_env


def _port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_sigterm_to_one_process_saves_on_both(tmp_path):
  cfg = tmp_path / "cfg.py"
  cfg.write_text("from tests.train.tiny import tiny_config\n"
                 "def get_config(arg=None):\n"
                 "  c = tiny_config(iterations=1000, ckpt_every=1000, sft_steps=0)\n"
                 "  c.mesh.num_devices = 0\n"
                 "  c.train.eval_every = 1000\n"
                 "  return c\n")
  wd = tmp_path / "w"
  port = _port()
  procs, logs = [], []
  for i in range(2):
    env = child_env(devices=1, JAX_COORDINATOR_ADDRESS=f"localhost:{port}",
                    JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i))
    log = open(tmp_path / f"p{i}.log", "w")
    logs.append(log)
    procs.append(subprocess.Popen([sys.executable, "-m", "agent_rl.train", f"--config={cfg}",
                                   f"--workdir={wd}"], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT))
  metrics = wd / "metrics.jsonl"
  deadline = time.time() + 600
  while time.time() < deadline and all(p.poll() is None for p in procs):
    if metrics.exists() and sum("rollout/success" in ln for ln in metrics.read_text().splitlines()) >= 2:
      break
    time.sleep(0.5)
  text = lambda i: (tmp_path / f"p{i}.log").read_text()
  assert all(p.poll() is None for p in procs), text(0)[-3000:] + text(1)[-3000:]
  procs[1].send_signal(signal.SIGTERM)  # only the second worker is told
  rcs = [p.wait(timeout=300) for p in procs]
  for log in logs:
    log.close()
  for i in range(2):
    assert rcs[i] != 0 and "SIGTERM: checkpoint saved" in text(i), (i, text(i)[-3000:])
  steps = sorted(int(d) for d in os.listdir(wd / "checkpoints") if d.isdigit())
  done = [ln for ln in metrics.read_text().splitlines() if "rollout/success" in ln]
  assert len(steps) == 1 and steps[0] == len(done) < 1000, (steps, len(done))
