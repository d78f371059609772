"""Orbax checkpoints: async, keep-N plus best-by-eval, restore onto another mesh, and a
fallback to the previous good step when the latest one is corrupt.

A checkpoint holds the whole train state pytree (params, optimizer state, step, RNG) and a
JSON record of the stream positions (iteration, tasks consumed), so a killed run restarts
and continues exactly as if it had not stopped (the RL loop derives every key from the
seed and the iteration number).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """Thin wrapper over `ocp.CheckpointManager` with items `state` (pytree) and `meta` (json)."""

  def __init__(self, directory: str, *, keep: int = 3, best_metric: Optional[str] = None,
               async_save: bool = True):
    directory = os.path.abspath(directory)
    self.directory = directory
    opts = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        best_fn=(lambda m: m.get(best_metric, float("-inf"))) if best_metric else None,
        best_mode="max",
        keep_checkpoints_without_metrics=True,
        enable_async_checkpointing=async_save,
        create=True)
    self._mngr = ocp.CheckpointManager(directory, options=opts, item_names=("state", "meta"))

  def all_steps(self) -> list[int]:
    return sorted(self._mngr.all_steps())

  def save(self, step: int, state: Any, meta: dict, metrics: Optional[dict] = None,
           force: bool = False) -> None:
    """Saves `step`; an existing `step` (left by a run that died after writing it and was
    resumed from an earlier step, e.g. the best-eval copy) is replaced: a resumed run
    recomputes it bit for bit."""
    if step in self._mngr.all_steps():
      self._mngr.wait_until_finished()
      self._mngr.delete(step)
    self._mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
        metrics=metrics, force=force)

  def wait(self) -> None:
    self._mngr.wait_until_finished()

  def restore_latest(self, abstract_state: Any) -> Optional[tuple[int, Any, dict]]:
    """Restores the newest readable step onto `abstract_state`'s shapes and shardings.

    `abstract_state` is a pytree of `jax.ShapeDtypeStruct` (with `.sharding`), e.g. from
    `jax.eval_shape`; restoring onto a different mesh only needs different shardings there.
    A step that fails to restore (truncated or corrupt files) is reported and skipped.
    Returns (step, state, meta) or None when there is no readable checkpoint.
    """
    for step in reversed(self.all_steps()):
      try:
        return (step, *self.restore(step, abstract_state))
      except Exception as e:  # noqa: BLE001 — any failure means this step is unusable
        logging.warning("checkpoint step %d in %s is unreadable (%s: %s); trying the previous one",
                        step, self.directory, type(e).__name__, e)
        aside = self._move_aside(step)
        print(f"WARNING: checkpoint step {step} in {self.directory} is corrupt or unreadable "
              f"({type(e).__name__}); moved to {aside}; falling back to the previous "
              "checkpoint.", flush=True)
    return None

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """(state, meta) of `step`, laid out as `abstract_state` says (shapes and shardings)."""
    restored = self._mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
    return restored["state"], dict(restored["meta"])

  def _move_aside(self, step: int) -> str:
    """Moves an unreadable step out of the way (kept for inspection, never deleted), so the
    resumed run can write that step again."""
    src = os.path.join(self.directory, str(step))
    dst_root = self.directory.rstrip("/") + "_corrupt"
    os.makedirs(dst_root, exist_ok=True)
    dst = os.path.join(dst_root, f"{step}")
    n = 0
    while os.path.exists(dst):
      n += 1
      dst = os.path.join(dst_root, f"{step}.{n}")
    if jax.process_index() == 0 and os.path.exists(src):
      os.rename(src, dst)
    self._mngr.reload()
    return dst

  def close(self) -> None:
    self._mngr.wait_until_finished()
    self._mngr.close()


def abstract_like(tree: Any) -> Any:
  """ShapeDtypeStructs (with shardings) of a concrete pytree, for restore targets."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)), tree)
