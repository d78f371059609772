"""The `:arg` of `--config=configs/x.py:arg`: comma-separated variants a config declares.

big_vision's `parse_arg` idea: each config names its variants and their defaults; the string
is parsed against them, and an unknown variant is an error that lists the known ones, so
`:tiny,ppp` fails instead of silently running `tiny`.

    VARIANTS = dict(ppo=False, ratio=0.25)       # a switch; a typed value
    v = parse_variants("tiny,ppo,ratio=0.5", VARIANTS, scales=("tiny", "full"))
    v.scale, "ppo" in v, v["ratio"]             # ("tiny", True, 0.5)

A bool default declares a switch (`ppo` or `ppo=false`); any other default declares a typed
`name=value` (int, float or str, parsed as the default's type).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclasses.dataclass(frozen=True)
class Variants:
  """The parsed variants: `scale`, and every declared variant's value (`values`)."""
  scale: str
  values: Mapping[str, Any]

  def __contains__(self, name: str) -> bool:
    """Whether switch `name` is on. An undeclared name raises: a typo in a config file
    (`"ppoo" in args`) must not read as "off"."""
    return bool(self[name])

  def __getitem__(self, name: str) -> Any:
    if name not in self.values:
      raise KeyError(f"variant {name!r} is not declared; declared: {_listing(self.values)}")
    return self.values[name]


def _listing(known: Mapping[str, Any], scales: Sequence[str] = ()) -> str:
  words = list(scales) + [k if isinstance(v, bool) else f"{k}=<{type(v).__name__}>"
                          for k, v in sorted(known.items())]
  return ", ".join(words) or "(none)"


def _parse_value(name: str, text: str, default: Any, where: str) -> Any:
  if isinstance(default, bool):
    if text.lower() not in _BOOLS:
      raise ValueError(f"{where}: switch {name!r} takes true|false, got {text!r}")
    return _BOOLS[text.lower()]
  try:
    return type(default)(text)
  except ValueError:
    raise ValueError(f"{where}: variant {name!r} takes a {type(default).__name__}, "
                     f"got {text!r}") from None


def parse_variants(arg: str | None, known: Mapping[str, Any], *,
                   scales: Sequence[str] = ("tiny", "full"), where: str = "config") -> Variants:
  """Parses `arg` ("tiny,ppo,ratio=0.5"; None or "" = the first scale, no variants).

  Args:
    arg: the string after `:` in `--config=file.py:arg`.
    known: variant name -> default (bool: a switch; int/float/str: a typed `name=value`).
    scales: mutually exclusive scale words; the first is the default.
    where: names the config in error messages.
  Raises:
    ValueError naming the offending word and listing the known variants.
  """
  clash = sorted(set(scales) & set(known))
  if clash:
    raise ValueError(f"{where}: variants {clash} shadow the scales {list(scales)}")
  values = dict(known)
  chosen: list[str] = []
  for word in (w.strip() for w in (arg or "").split(",")):
    if not word:
      continue
    name, eq, text = word.partition("=")
    name = name.strip()
    if name in scales and not eq:
      chosen.append(name)
    elif name not in known:
      raise ValueError(f"{where}: unknown variant {name!r} in {arg!r}; known: "
                       f"{_listing(known, scales)}")
    elif eq:
      values[name] = _parse_value(name, text.strip(), known[name], where)
    elif isinstance(known[name], bool):
      values[name] = True
    else:
      raise ValueError(f"{where}: variant {name!r} needs a value ({name}=<"
                       f"{type(known[name]).__name__}>)")
  if len(set(chosen)) > 1:
    raise ValueError(f"{where}: {arg!r} names several scales {sorted(set(chosen))}; pick one")
  return Variants(scale=chosen[0] if chosen else scales[0], values=values)
