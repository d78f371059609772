"""The committed record of a row's finished runs: RESULTS_DIR/<paper>.json.

Run workdirs (checkpoints, metrics.jsonl) are git-ignored; what a results dir commits is the
row's JSON, which holds every finished run's final values, curves, wall time and config. A
fresh clone therefore has the record and not the workdirs. Without this module, adding one arm
to a row in a fresh clone (`--arms=RLOO,PPO`) would either retrain the arms already measured
or write a row without them. So a run whose workdir holds nothing (status "new") and which the
record lists as finished (same arm and seed) is a recorded run: `runs.execute` does not train
it again and `results.collect` reads its values from the record.

A recorded run must be the run this command would train: its saved config is compared like a
stale workdir's (`runs.differences`), and a difference is refused, naming the fields. Records
written before the config was kept in them (2026-12-05) carry none; they are accepted when the
row's scale and overrides match and flagged in the row's markdown ("recorded, config not
kept"), since the per-field check cannot be made.
"""
from __future__ import annotations

import json
from typing import Optional, Sequence

from etils import epath

from agent_rl.eval.reproduce.runs import RunSpec
from agent_rl.eval.reproduce.same_config import StaleRunError, differences

Record = dict  # (arm, seed) -> the run's dict in <paper>.json, plus "_row": its scale, overrides


def read(results_dir: str, paper: str) -> Record:
  """The finished runs of results_dir/<paper>.json by (arm, seed) ({} without the file). Not by
  workdir: the same results dir may be named another way (absolute, a trailing slash)."""
  path = epath.Path(results_dir) / f"{paper}.json"
  if not path.exists():
    return {}
  try:
    row = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e}); restore it (git checkout) or delete it")
  meta = row_meta(row.get("scale"), row.get("overrides", ()))
  return {(a["arm"], r["seed"]): {**r, "_row": meta} for a in row.get("arms", ())
          for r in a.get("runs", ()) if r.get("finished")}


def read_priors(results_dir: str, paper: str) -> list[dict]:
  """The prior runs' entries of results_dir/<paper>.json (results.RowResult.priors; [] without
  the file or in a row written before they were kept)."""
  path = epath.Path(results_dir) / f"{paper}.json"
  return json.loads(path.read_text()).get("priors", []) if path.exists() else []


def row_meta(scale: Optional[str], overrides: Sequence[Sequence[str]]) -> dict:
  """What a record keeps of the command that wrote its row: scale and --set overrides."""
  return {"scale": scale, "overrides": [list(o) for o in overrides]}


def recorded_seeds(record: Record, arm: str, scale: str,
                   overrides: Sequence[tuple[str, str]]) -> list[int]:
  """The seeds of `arm` the record holds from a row written at `scale` with `overrides`."""
  want = row_meta(scale, overrides)
  return sorted(seed for (a, seed), r in record.items() if a == arm and r["_row"] == want)


def seeds(record: Record) -> int:
  """How many seeds the record holds (1 + its largest seed; 0 when empty)."""
  return 1 + max((seed for _, seed in record), default=-1)


# What to do when the row's record holds a run of other settings (both StaleRunErrors below).
REMEDY = ("remove the row's .json (git rm) to train it again, or use another --results_dir "
          "(a smoke run: a scratch one)")


def lookup(record: Record, c, spec: RunSpec, scale: str,
           overrides: Sequence[tuple[str, str]]) -> Optional[dict]:
  """The recorded run of `spec` (its arm and seed) if the record has one (None otherwise), with
  `spec`'s workdir (the record's may be named another way). Raises
  StaleRunError when it is a run of another config than `c` (or, for a record without its
  config, of another scale or --set overrides)."""
  rec = record.get((spec.arm, spec.seed))
  if rec is None:
    return None
  where = f"{spec.workdir} (recorded in the row's .json; its workdir is not here)"
  if rec.get("config") is not None:
    bad = differences(c, rec["config"])
    if bad:
      raise StaleRunError(f"{where}: a run of another config ({', '.join(bad[:6])}); "
                          + REMEDY)
  elif rec["_row"] != row_meta(scale, overrides):
    raise StaleRunError(f"{where}: recorded at {rec['_row']}, requested scale={scale!r} "
                        f"overrides={row_meta(scale, overrides)['overrides']}; " + REMEDY)
  return {**rec, "workdir": spec.workdir}
