"""One JVM per process for TextWorld-Express games.

TextWorld-Express starts a JVM (a py4j gateway) per env object, and its Scala `PythonInterface`
holds one game. A pool of 64 games would be 64 JVMs: ~75 MB each at start and more once
their JITs warm up, each warming up alone (a cold JVM steps several times slower), on a host
with far fewer cores. But TWX's `PythonInterface` keeps its game in its own fields, so several
of them live side by side in one JVM and play exactly as one JVM per game (checked,
interleaved, in tests/envs/host/test_adapters.py). The adapter therefore shares one gateway
per (process, jar): each game makes its own `PythonInterface` on it; the JVM is shut down when
the last game of the process that uses it closes.

ScienceWorld does not share: two of its `PythonInterface`s in one JVM list a room's objects in
another order than a JVM of their own does ("boil" variation 0: the art studio's three wood
cups), so its games would depend on their neighbours. It keeps one JVM per game
(scienceworld.py), started with `DETERMINISTIC_HASH` (below): its order also moved from one
JVM start to the next. With the flag, games stepped interleaved on one JVM read a JVM each's
observation text, but not its admissible lists: ambiguous objects get other referent names
("focus on paint in cup" vs "... on cup containing blue paint"; 2026-12-05), so sharing stays
off.

    gw = acquire(JAR_PATH, cwd=BASEPATH)           # launches the JVM the first time
    server = gw.jvm.textworldexpress.runtime.PythonInterface()
    ...
    release(JAR_PATH, server)                      # the last release shuts the JVM down

A pool worker is its own process (spawned), so each worker has its own JVM, and a worker that
dies takes only its JVM with it. Calls are synchronous: one process steps its games one after
another, as it would with one JVM per game.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import threading

_LOCK = threading.Lock()

# HotSpot's default identity hash is a per-thread random stream, each seeded from a global
# generator as the thread starts; the JIT starts and stops compiler threads with the load, so
# a hash set of objects keyed by identity (ScienceWorld's rooms) iterates in another order
# from one JVM start to the next. Mode 2 makes every identity hash 1: such sets iterate in
# insertion order, whatever threads ran (measured in scienceworld.py).
DETERMINISTIC_HASH = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"


@contextlib.contextmanager
def java_options(options: str):
  """JVMs launched inside the block start with `options` too (appended to the user's own
  JAVA_TOOL_OPTIONS, which the JVM reads; the packages launch theirs without a way to pass
  any, and py4j sends the JVM's "Picked up" notice to /dev/null)."""
  before = os.environ.get("JAVA_TOOL_OPTIONS")
  os.environ["JAVA_TOOL_OPTIONS"] = f"{before} {options}" if before else options
  try:
    yield
  finally:
    if before is None:
      del os.environ["JAVA_TOOL_OPTIONS"]
    else:
      os.environ["JAVA_TOOL_OPTIONS"] = before


@dataclasses.dataclass
class _Shared:
  gateway: object
  users: int
  pid: int


_SHARED: dict[str, _Shared] = {}


def acquire(jar: str, *, cwd: str | None = None):
  """The py4j `JavaGateway` of this process's JVM running `jar` (started on first use)."""
  from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
  with _LOCK:
    shared = _SHARED.get(jar)
    if shared is not None and shared.pid != os.getpid():  # inherited through a fork: not ours
      shared = None
    if shared is None:
      # As the packages launch theirs (die_on_exit: the JVM exits with this process), without
      # their callback server: nothing calls back into Python.
      port, proc = launch_gateway(classpath=jar, die_on_exit=True, cwd=cwd, return_proc=True)
      gateway = JavaGateway(gateway_parameters=GatewayParameters(auto_field=True, port=port),
                            java_process=proc)
      shared = _SHARED[jar] = _Shared(gateway, 0, os.getpid())
    shared.users += 1
    return shared.gateway


def release(jar: str, obj=None) -> None:
  """Drops one user of `jar`'s JVM (and its Java object `obj`); the last one shuts it down."""
  with _LOCK:
    shared = _SHARED.get(jar)
    if shared is None or shared.pid != os.getpid():
      return
    if obj is not None:
      try:
        shared.gateway.detach(obj)
      except Exception:  # noqa: BLE001 — a JVM that already died has nothing to detach
        pass
    shared.users -= 1
    if shared.users > 0:
      return
    del _SHARED[jar]
  shutdown(shared.gateway)


def shutdown(gateway) -> None:
  """Closes a gateway and its JVM (py4j's die_on_exit JVM exits on a line on its stdin)."""
  try:
    gateway.shutdown()
  except Exception:  # noqa: BLE001 — best effort: the JVM may be gone already
    pass
  proc = getattr(gateway, "java_process", None)
  if proc is not None and proc.poll() is None:
    try:
      proc.stdin.write(b"\n")
      proc.stdin.flush()
    except (OSError, ValueError):
      pass
    try:
      proc.wait(timeout=10)
    except Exception:  # noqa: BLE001
      proc.kill()


def live_jvms() -> int:
  """How many shared JVMs this process holds (for tests)."""
  return sum(1 for s in _SHARED.values() if s.pid == os.getpid())
