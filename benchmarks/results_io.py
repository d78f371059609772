"""The one way a benchmark writes its JSON result (benchmarks/results/<name>.json)."""
from __future__ import annotations

import json
import os


def write_json(path: str, result, *, echo=None, indent: int = 1) -> None:
  """Writes `result` to `path` (creating its folder) and prints `echo` (default: all of it)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(result, f, indent=indent)
  print(json.dumps(result if echo is None else echo, indent=indent))
