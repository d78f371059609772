"""String registries for swappable parts: credit kernels, losses, envs, rollout strategies.

Configs name parts by string (`config.credit.name = "gigpo"`); a registry turns the string
into the function and fails loudly, listing what exists, when the name is unknown
(Tunix `function_registry`, big_vision `pp/registry`).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional


class Registry:
  """A name -> object table with a decorator for registration.

  >>> CREDIT = Registry("credit kernel")
  >>> @CREDIT.register("grpo")
  ... def grpo(...): ...
  >>> CREDIT.get("grpo")
  """

  def __init__(self, kind: str):
    self.kind = kind
    self._entries: Dict[str, Any] = {}

  def register(self, name: str, obj: Optional[Any] = None) -> Callable[[Any], Any] | Any:
    """Registers `obj` under `name`; usable as a decorator when `obj` is None."""

    def _add(o: Any) -> Any:
      if name in self._entries and self._entries[name] is not o:
        raise ValueError(f"{self.kind} {name!r} is already registered")
      self._entries[name] = o
      return o

    return _add if obj is None else _add(obj)

  def get(self, name: str) -> Any:
    try:
      return self._entries[name]
    except KeyError:
      known = ", ".join(sorted(self._entries)) or "(none)"
      raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

  def names(self) -> list[str]:
    return sorted(self._entries)

  def __contains__(self, name: str) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())

  def __len__(self) -> int:
    return len(self._entries)
