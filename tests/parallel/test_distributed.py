"""Which launcher started us, and clear errors for half-set multi-process variables."""
import pytest

from agent_rl.parallel.distributed import cluster_kind, initialize_from_env, main_process_first


@pytest.mark.parametrize("env,kind", [
    ({}, "none"),
    ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "explicit"),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}, "none"),  # one task: nothing to join
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"}, "slurm"),
    ({"TPU_WORKER_HOSTNAMES": "w0"}, "none"),
    ({"TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3"}, "tpu"),
    ({"AGENT_RL_MULTIHOST": "1"}, "auto"),
])
def test_cluster_kind(env, kind):
  assert cluster_kind(env) == kind


@pytest.mark.parametrize("env,match", [
    ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_PROCESS_ID": "0"}, "JAX_NUM_PROCESSES is not"),
    ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"},
     "must be integers"),
    ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"},
     r"JAX_PROCESS_ID=2 is not in \[0, JAX_NUM_PROCESSES=2\)"),
])
def test_bad_explicit_environment(env, match):
  with pytest.raises(ValueError, match=match):
    initialize_from_env(env)


def test_single_process_is_a_noop():
  assert initialize_from_env({}) == "none"
  assert main_process_first(lambda: 42, "x") == 42
