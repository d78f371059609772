"""Is a run dir the run this config would train? Its saved config.json against the built
config, field by field (`runs.status` refuses a workdir of another config, `runs.twin` links
only an identical one, `record.lookup` accepts only a recorded run of the same config).
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

from etils import epath

from agent_rl.eval.reproduce.paths import provided_by
from agent_rl.train.config import is_free_dict


class StaleRunError(ValueError):
  """A workdir holds a run of another config than the one requested."""


def _flat(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _in_free_dict(key: str) -> bool:
  """A flat key inside a kwargs block (env.kwargs.x, credit.kwargs.y, ...)."""
  return any(is_free_dict(part) for part in key.split(".")[:-1])


def config_differences(saved: dict, want: dict) -> list[str]:
  """Flat keys where a saved run's config differs from `want`. A typed field the saved run
  lacks is a default added to base_config since, not compared; a kwargs entry that only one
  side sets is a difference (the other ran the function's own default: an env kwarg set by
  one config and not the other is another experiment, not a new default)."""
  bad = [k for k in want if k in saved and saved[k] != want[k]]
  bad += [k for k in set(want) ^ set(saved) if _in_free_dict(k)]
  return sorted(set(bad))


def differences(c, saved: dict) -> list[str]:
  """config_differences between a saved run's config (nested, as config.json, or flat) and
  the built config `c`."""
  want, saved = _flat(json.loads(c.to_json_best_effort())), _flat(saved)
  got = saved.get("tokenizer.path")
  sources = [want[k] for k in ("distill.teacher", "rm.policy_run", "model.init_from")
             if want.get(k)]
  if "tokenizer.path" in want and not want["tokenizer.path"] and got and _resolved(got, sources):
    # An empty path is resolved at start-up and saved resolved: a distilling run takes its
    # teacher's tokenizer (train/run.py), a reward-model run its policy run's
    # (reward/train.py _resolve_tokenizer). Another path is another run.
    want.pop("tokenizer.path")
  return config_differences(saved, want)


def _resolved(path: str, sources: Sequence[str]) -> bool:
  """`path` is the tokenizer of one of the `sources` run dirs (pretrained.run_tokenizer_path:
  a file in it, or the one its config.json names)."""
  for src in sources:
    if provided_by(path, [src]):
      return True
    saved = _saved_config(src) if os.path.isdir(src) else None
    if saved and saved.get("tokenizer.path") and (
        os.path.normpath(saved["tokenizer.path"]) == os.path.normpath(path)):
      return True
  return False


def check_same_config(c, workdir: str) -> None:
  """Raises StaleRunError naming the fields where workdir/config.json differs from `c`
  (config_differences)."""
  saved = _saved_config(workdir)
  if saved is None:
    return
  bad = differences(c, saved)
  if bad:
    want = _flat(json.loads(c.to_json_best_effort()))
    shown = ", ".join(f"{k}: {saved.get(k, '(unset)')!r} there, {want.get(k, '(unset)')!r} here"
                      for k in bad[:6])
    raise StaleRunError(f"{workdir}: holds a run of another config ({shown}); delete it or "
                        "use another --results_dir")


def _saved_config(workdir) -> Optional[dict]:
  path = epath.Path(workdir) / "config.json"
  return _flat(json.loads(path.read_text())) if path.exists() else None
