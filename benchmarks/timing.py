"""The one best-of-N timer of the benchmarks (robust to other load on a shared box)."""
from __future__ import annotations

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
