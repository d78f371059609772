"""Multi-host start-up: `jax.distributed.initialize()` from the environment, and barriers.

JAX's multi-controller runtime runs the same program on every host; each process owns its
local devices and the global mesh spans all of them. We never start processes ourselves:
the launcher (launch/tpu_pod.sh, launch/slurm_gpu.sbatch, launch/local.sh) does, and this
module only decides, from the environment, whether and how to join:

  JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID   explicit (local.sh, any cluster)
  SLURM_JOB_ID with SLURM_NTASKS > 1                           SLURM (jax reads SLURM_*)
  TPU_WORKER_HOSTNAMES with more than one host, MEGASCALE_*    TPU pod on GKE / multi-slice
  AGENT_RL_MULTIHOST=1                                         any launcher (tpu_pod.sh sets it
                                                               on Cloud TPU VMs, whose workers
                                                               jax finds from the GCE metadata)

On CPU, cross-process collectives need an implementation (gloo); we select it so that the
multi-process tests run on a laptop exactly like a pod.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping, TypeVar

import jax

T = TypeVar("T")


def cluster_kind(environ: Mapping[str, str] = os.environ) -> str:
  """'explicit' | 'slurm' | 'tpu' | 'auto' | 'none': which launcher set up this process."""
  if environ.get("JAX_COORDINATOR_ADDRESS"):
    return "explicit"
  if environ.get("AGENT_RL_MULTIHOST") == "1":
    return "auto"
  if environ.get("SLURM_JOB_ID") and int(environ.get("SLURM_NTASKS", "1")) > 1:
    return "slurm"
  hosts = [h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
  if len(hosts) > 1 or environ.get("MEGASCALE_COORDINATOR_ADDRESS"):
    return "tpu"
  return "none"


def initialize_from_env(environ: Mapping[str, str] = os.environ) -> str:
  """Joins the multi-process job described by the environment (no-op for one process).

  Must run before anything touches a device. Returns the cluster kind. Raises ValueError
  naming the variable when the explicit variables are incomplete or malformed.
  """
  kind = cluster_kind(environ)
  if kind == "none":
    return kind
  if kind == "explicit":
    try:
      num = int(environ["JAX_NUM_PROCESSES"])
      pid = int(environ["JAX_PROCESS_ID"])
    except KeyError as e:
      raise ValueError(f"JAX_COORDINATOR_ADDRESS is set but {e.args[0]} is not") from None
    except ValueError as e:
      raise ValueError(f"JAX_NUM_PROCESSES / JAX_PROCESS_ID must be integers: {e}") from None
    if not 0 <= pid < num:
      raise ValueError(f"JAX_PROCESS_ID={pid} is not in [0, JAX_NUM_PROCESSES={num})")
    local = environ.get("JAX_LOCAL_DEVICE_IDS")
    ids = [int(i) for i in local.split(",")] if local else None
    if environ.get("JAX_PLATFORMS", "") == "cpu":
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(environ["JAX_COORDINATOR_ADDRESS"], num_processes=num,
                               process_id=pid, local_device_ids=ids)
  else:  # jax's own cluster detection reads the SLURM / TPU / GCE metadata
    jax.distributed.initialize()
  return kind


# Work behind a barrier (a tokenizer trained, a TFDS dataset written by process 0) can take
# minutes; a device collective would time out after 30 s (gloo on CPU), so the barrier is the
# coordination service's own, with this timeout.
BARRIER_TIMEOUT_S = 3600
_CALLS: dict = {}


def sync(name: str) -> None:
  """A barrier across processes (no-op with one process)."""
  if jax.process_count() > 1:
    from jax._src import distributed
    client = distributed.global_state.client
    if client is None:  # processes joined by other means than jax.distributed
      from jax.experimental import multihost_utils
      multihost_utils.sync_global_devices(name)
      return
    # Barrier ids are single-use: every process counts its calls of each name alike.
    _CALLS[name] = _CALLS.get(name, 0) + 1
    client.wait_at_barrier(f"agent_rl:{name}:{_CALLS[name]}",
                           timeout_in_ms=BARRIER_TIMEOUT_S * 1000)


def main_process_first(fn: Callable[[], T], name: str) -> T:
  """Runs `fn` on process 0, then on the others: for work that writes shared files once
  (a tokenizer trained into the workdir, a TFDS dataset) and is then read by everyone."""
  if jax.process_count() == 1:
    return fn()
  if jax.process_index() == 0:
    out = fn()
    sync(name)
    return out
  sync(name)
  return fn()
