"""Multi-host on one machine: 2 processes x 4 fake CPU devices joined by
`jax.distributed.initialize` (launch/local.sh, gloo CPU collectives) train the same config as
one process with 8 devices, with the same metrics; the mesh puts `data` across the two
processes (DCN) and `fsdp` inside each (ICI), as on a two-slice pod. The learner's rows are
cut to length buckets (`train.length_bucket`), whose length both processes must agree on.
"""
import subprocess

from agent_rl.train.run import run
from tests.train.test_sharded import assert_close, records, sharded_config
from tests.train.tiny import ROOT, child_env



def config(num_devices):
  """num_devices=0: the two-process run, `data` = 2 slices (processes) over DCN;
  num_devices=8: one process, the same (data=2, fsdp=4) mesh on its own devices."""
  multi = num_devices == 0
  c = sharded_config(iterations=2, ckpt_every=1, sft_steps=2, num_devices=num_devices,
                     data=1 if multi else 2, fsdp=4, tensor=1)
  c.mesh.dcn.data = 2 if multi else 1
  # Rows cut after the longest filled row (train/buckets.py): every process must cut at the
  # same length, a max over the global rows that both read.
  c.train.length_bucket = 8
  return c


def test_two_processes_match_one_process(tmp_path):
  cfg = tmp_path / "cfg.py"
  cfg.write_text("from tests.train.test_multiprocess import config\n"
                 "def get_config(arg=None):\n"
                 "  return config(num_devices=0)\n")
  multi = tmp_path / "multi"
  # No persistent compilation cache (tests/conftest.py) in the two processes: they compile
  # the same programs at the same time, so it saves nothing here, and only process 0
  # would write entries that process 1 then loads mid-run.
  env = child_env(LOCAL_KILL_AFTER="10", JAX_ENABLE_COMPILATION_CACHE="false")
  proc = subprocess.run(["bash", "launch/local.sh", "--processes=2", "--fake-devices=4",
                         f"--config={cfg}", f"--workdir={multi}"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=900)
  logs = "".join(p.read_text()[-2000:] for p in sorted((multi / "logs").glob("*.log"))
                 ) if (multi / "logs").exists() else ""
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + logs
  assert "mesh: data=2 x fsdp=4 x tensor=1 (8 devices)" in proc.stdout

  single = str(tmp_path / "single")
  run(config(num_devices=8), single)  # 8 devices, one process, the same (2, 4, 1) mesh
  assert_close(records(str(multi)), records(single))
