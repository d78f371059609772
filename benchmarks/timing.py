"""The benchmarks' timers: best-of-N wall seconds (robust to other load on a shared box) and a
process tree's CPU seconds."""
from __future__ import annotations

import os
import statistics
import time

import jax


def best_seconds(fn, *args, repeats: int) -> float:
  """Seconds per call of `fn(*args)`: the fastest of `repeats` calls after one compile/warm-up."""
  jax.block_until_ready(fn(*args))  # compile + warm up
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t)
  return best


def paired_medians(paths: dict, rounds: int) -> tuple[dict, dict]:
  """`paths`: name -> zero-argument fn. Calls them in turn (a, b, a, b, ...) for `rounds` + 1
  rounds, drops the first (compiles), and returns ({name: (median wall s, median CPU s of this
  process)}, {name: its last output}): paired rounds see the same load."""
  times = {k: [] for k in paths}
  outs = {}
  for i in range(rounds + 1):
    for name, fn in paths.items():
      t, cpu = time.perf_counter(), time.process_time()
      outs[name] = jax.block_until_ready(fn())
      if i:
        times[name].append((time.perf_counter() - t, time.process_time() - cpu))
  med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
         for k, v in times.items()}
  return med, outs


def tree_cpu_seconds(pid: int | None = None) -> float:
  """User + system CPU seconds of process `pid` (default: this one), all its threads and all
  its live descendants (pool workers, their JVMs), plus the children they reaped, from
  /proc (Linux). A delta over a wall interval, divided by it, is how many cores the step kept
  busy (XLA's threads spin-wait, so occupancy rather than work)."""
  root = os.getpid() if pid is None else pid
  parent, ticks = {}, {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # exited while listed
      continue
    parent[int(entry)] = int(fields[1])
    ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
  total = 0
  for p in ticks:
    q = p
    while q not in (root, 0, 1) and q in parent:
      q = parent[q]
    if q == root:
      total += ticks[p]
  return total / os.sysconf("SC_CLK_TCK")
