"""SIGTERM (TPU preemption) saves a checkpoint at the next step boundary, then exits."""
import json
import os
import signal
import subprocess
import sys
import time

from tests.train.tiny import ROOT, child_env


def test_sigterm_checkpoints_then_exits(tmp_path):
  cfg = tmp_path / "cfg.py"
  cfg.write_text("from tests.train.tiny import tiny_config\n"
                 "def get_config(arg=None):\n"
                 "  return tiny_config(iterations=1000, ckpt_every=1000, sft_steps=0)\n")
  wd = tmp_path / "w"
  env = child_env()
  proc = subprocess.Popen([sys.executable, "-m", "agent_rl.train", f"--config={cfg}",
                           f"--workdir={wd}"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  log = wd / "metrics.jsonl"
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    if log.exists() and any("rollout/success" in ln for ln in log.read_text().splitlines()):
      break
    time.sleep(0.5)
  assert proc.poll() is None, proc.communicate()[0][-3000:]
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=240)
  assert proc.returncode != 0 and "SIGTERM: checkpoint saved" in out, out[-3000:]
  steps = [int(d) for d in os.listdir(wd / "checkpoints") if d.isdigit()]
  done = [json.loads(ln)["step"] for ln in log.read_text().splitlines() if "rollout/success" in ln]
  assert steps and max(steps) == max(done) < 1000  # saved exactly where it stopped
