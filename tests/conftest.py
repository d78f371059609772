"""Test set-up: CPU only, 8 fake devices for sharded paths, float32 matmuls exact enough for parity,
and a persistent XLA compilation cache per test process."""
import atexit
import gc
import os
import shutil
import tempfile

# Must be set before jax is imported anywhere. Tests that need one device use jax.devices()[:1].
os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
# LLVM at -O0 for the programs tests compile: an end-to-end test's time is mostly XLA:CPU
# compiling its programs, and the backend's optimization passes are most of that. The HLO
# passes (fusion, layout, sharding) are unchanged, so results agree with the default to the
# tests' tolerances and every bit-exact comparison compiles both sides alike. Measured on the
# 2-core box, default / -O0 alternated (A B B A) over 23 compile-heavy tests with `-n 2`
# (buckets, critic warm-up, multi-LoRA, branch, bridge): 187, 170 s / 141, 135 s, -23%; a
# compute-bound run (the slow main-job test) is ~10% slower (222 s -> 246 s). The full suite
# passes at -O0. Set a level in XLA_FLAGS to override.
if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=0"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


def _process_compilation_cache():
  """One persistent XLA compilation cache per test process, fresh each session, for programs
  that took >= 0.5 s to compile. An end-to-end test's time is mostly XLA compiling the tiny
  run's programs (a 2-iteration run: 35 s of 56 s), and many tests build the same tiny
  config; `jit` caches by function identity and every run makes new closures (and the module
  fixture below clears JAX's caches), so without this each test compiles them again. The
  suite, `-n 2`, one 2-core box, same session (2026-12-08): 2,702 s with, 3,047 s without.
  - Per process, never shared: with jax 0.10.2 on XLA:CPU two xdist workers on one
    directory crashed with a segmentation fault inside jax's cache read / write (tests in
    test_pretrained_e2e.py and test_resume.py, 2026-12-03); `LRUCache.put` writes the file in
    place, so one process can read another's half-written entry. Set with `jax.config`, not
    the environment, so the subprocesses tests start (launchers, multi-host) do not inherit it.
  - xdist sets PYTEST_XDIST_WORKER in the worker before it imports this file; the controller
    never compiles. The directory is removed when the process exits.
  - Only programs >= 0.5 s: caching every program (a file, a hash and a write for each of
    a run's ~80 small eager ops) made the whole suite slower (2026-12-07).
  AGENT_RL_TEST_COMPILATION_CACHE=0 turns it off."""
  if os.environ.get("AGENT_RL_TEST_COMPILATION_CACHE", "1") == "0":
    return
  worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
  path = tempfile.mkdtemp(prefix=f"agent_rl_jax_cache_{worker}_")
  atexit.register(shutil.rmtree, path, ignore_errors=True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


_process_compilation_cache()


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Drops JAX's compiled programs and traces after each test module. XLA:CPU maps ~3 memory
  regions per compiled program and JAX keeps every program a module-level `jit` compiled for
  the life of the process: with `-n 2` a worker reached 57,908 mappings (Linux's default
  vm.max_map_count is 65,530) and 7 GiB RSS by ~95% of the suite and aborted inside
  `backend_compile_and_load` ("Fatal Python error: Aborted"; CI of 2026-12-03 lost both
  workers the same way). `jax.clear_caches()` unmaps them (300 programs: 1,402 -> 508 maps).
  A module rarely reuses another module's programs, so little is recompiled."""
  yield
  jax.clear_caches()
  gc.collect()


# The end-to-end directories first, the rest in collection order (a stable sort, so each
# module's tests stay together and share their module fixtures). xdist's `load` scheduler hands
# tests out from the front of the queue; in collection order tests/train (the multi-process run,
# 148 s; exact resume, 81 s; ...) came last, and the suite's last ~6 minutes were one worker
# finishing long runs while the other had nothing left (2026-12-06: 98% at 25.5 min, done at
# 30.1 min). Long tests first leave short ones to even out the end.
_RUN_FIRST = ("tests/train/", "tests/agents/", "tests/data/")


def pytest_collection_modifyitems(config, items):
  def rank(item):
    return next((i for i, d in enumerate(_RUN_FIRST) if item.nodeid.startswith(d)),
                len(_RUN_FIRST))
  items.sort(key=rank)
