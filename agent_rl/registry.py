"""String registries for swappable parts: credit kernels, losses, envs, rollout strategies.

Configs name parts by string (`config.credit.name = "gigpo"`); a registry turns the string
into the function and fails loudly, listing what exists, when the name is unknown
(Tunix `function_registry`, big_vision `pp/registry`).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional


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

  def keyword_params(self, name: str, supplied: Iterable[str] = ()) -> Optional[list[str]]:
    """The keyword arguments a config may set for `name` (None: it takes any, `**kwargs`).

    `supplied` are the arguments the caller passes itself (a loss's `loss_agg_mode`, an env's
    `tokenizer`); they are not the config's to set.
    """
    names = keyword_params(self.get(name))
    return None if names is None else sorted(set(names) - set(supplied))

  def check_kwargs(self, name: str, kwargs: Mapping[str, Any], field: str,
                   supplied: Iterable[str] = ()) -> None:
    """Raises ValueError naming `field`, the function and what it takes if `kwargs` holds a
    keyword `name`'s function does not take (or one the caller supplies itself)."""
    supplied = set(supplied)
    taken = self.keyword_params(name, supplied)
    bad = sorted(k for k in kwargs if k in supplied or (taken is not None and k not in taken))
    if bad:
      owned = sorted(supplied & set(bad))
      note = f" ({', '.join(owned)}: set by the caller, not the config)" if owned else ""
      takes = "any other" if taken is None else ", ".join(taken) or "(none)"
      raise ValueError(f"{field}: {self.kind} {name!r} takes no keyword {', '.join(map(repr, bad))}"
                       f"{note}; it takes: {takes}")

  def __contains__(self, name: str) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())

  def __len__(self) -> int:
    return len(self._entries)


def keyword_params(fn: Any) -> Optional[list[str]]:
  """Names of the parameters of `fn` a caller may set by keyword: keyword-only ones and
  positional ones with a default (a positional parameter without one is the call's input:
  `batch`, `logprobs`). None if `fn` takes `**kwargs`. An object may define
  `keyword_params()` itself (a rollout strategy: the union of its two hooks')."""
  own = getattr(fn, "keyword_params", None)
  if callable(own):
    return own()
  out = []
  for p in inspect.signature(fn).parameters.values():
    if p.kind is p.VAR_KEYWORD:
      return None
    if p.kind is p.KEYWORD_ONLY or (
        p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty):
      out.append(p.name)
  return out
