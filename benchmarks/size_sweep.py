"""A size sweep against its 0 (the unchunked / dense baseline), shared by the memory
benchmarks (`prefill_chunks.py`, `attention_blocks.py`): random weights for the timed rows,
paired timings with each size's speedup over the baseline, and the command line (sizes, rounds,
output JSON with the machine's load)."""
from __future__ import annotations

import argparse
import os
from typing import Callable

import jax
from results_io import write_json
from timing import paired_medians


def random_like(tree):
  """Random normal values (scale 0.02) of a tree of arrays' or abstract arrays' shapes."""
  key = jax.random.key(0)
  leaves, struct = jax.tree.flatten(tree)
  return jax.tree.unflatten(struct, [0.02 * jax.random.normal(jax.random.fold_in(key, i), x.shape,
                                                              x.dtype)
                                     for i, x in enumerate(leaves)])


def time_against_baseline(out: dict, fns: dict, rounds: int, baseline: str, vs: str) -> None:
  """Times `fns` (name -> zero-argument fn) in paired rounds into `out[name]["seconds"]` and
  `["speedup"]` (baseline seconds / its own); every `out[name]` gets `vs` = its temp_gib over
  the baseline's."""
  if fns:
    times, _ = paired_medians(fns, rounds)
    for k, (wall, _cpu) in times.items():
      out[k]["seconds"] = wall
    for k in fns:
      out[k]["speedup"] = out[baseline]["seconds"] / out[k]["seconds"]
  for k in out:
    out[k][vs] = out[k]["temp_gib"] / out[baseline]["temp_gib"]


def main(rows: dict, bench_row: Callable, *, flag: str, default: str, out_name: str) -> None:
  """`bench_row(*row, sizes, rounds)` for each row; `--<flag>` lists the sizes, the first 0."""
  ap = argparse.ArgumentParser()
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument(f"--{flag}", default=default)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", out_name))
  a = ap.parse_args()
  sizes = [int(x) for x in getattr(a, flag).split(",")]
  assert sizes[0] == 0, f"the first of --{flag} is the baseline, 0"
  res = {"backend": jax.default_backend(), "cpus": os.cpu_count(),
         "load_average_at_start": os.getloadavg()[0], "rounds": a.rounds, "rows": {}}
  for name, row in rows.items():
    res["rows"][name] = bench_row(*row, sizes, a.rounds)
    print(name, res["rows"][name], flush=True)
  write_json(a.out, res)
