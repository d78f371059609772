"""`RunCheckpoint`: the one owner of a run's on-disk layout (orbax).

    WORKDIR/checkpoints/<step>/
      params/      the ActorCritic params (policy LM under "lm", critic if any)
      optimizer/   {opt_state, step, rng} of the phase the run was in
      reference/   frozen KL-reference LM params (only when a KL term or KL-in-reward uses one)
      meta/        JSON: layout version, phase, sft_step, iteration, best_eval_success

`<step>` is the run's global step (SFT steps + RL iterations). Orbax does what it already
does: the save cadence (`SpecificStepsPolicy` over the run's known save steps, plus its
preemption policy), keep-N (`LatestN`) together with best-by-`eval/success` (`BestN` over the
metrics saved with each RL evaluation), async saves, and the multi-host preemption sync point
(every process agrees on the step at which it saves, as in MaxText). A single process has no
preemption service, so SIGTERM sets a flag checked at the next step boundary instead.

Restores: `restore_run` (the whole state, for resume; the optimizer target depends on the
phase, read from `meta` first), `restore_params` (params only, best or latest, onto any mesh:
evaluation, a distillation teacher, `model.init_from`). A step that fails to restore is moved
aside and the previous one used. Checkpoints written before this layout (one `state` item with
"rl"/"sft" train states) are refused with an error naming what was found: their RL state lacks
the reference params this layout keeps, so a resume could not continue exactly.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
from typing import Any, Callable, Optional, Sequence

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as ocm

LAYOUT = 2
ITEMS = ("params", "optimizer", "reference", "meta")
BEST_METRIC = "eval/success"


class CheckpointLayoutError(ValueError):
  """The checkpoint on disk is not in this version's layout."""


@dataclasses.dataclass
class Restored:
  step: int
  params: Any
  opt: Optional[dict]  # {"opt_state", "step", "rng"}, or None for a params-only restore
  reference: Optional[Any]
  meta: dict


class _SigtermFlag:
  """SIGTERM on a single process: checkpoint at the next step boundary, then exit. With
  several processes JAX's preemption service owns SIGTERM (it must see the signal to agree on
  a sync step across hosts), so no Python handler is installed there."""

  def __init__(self):
    self.hit = False
    if jax.process_count() > 1:
      return
    try:
      signal.signal(signal.SIGTERM, self._on)
    except ValueError:  # not the main thread (some test runners)
      pass

  def _on(self, *_):
    self.hit = True


class RunCheckpoint:
  """Saves and restores a run under `directory` (= WORKDIR/checkpoints)."""

  def __init__(self, directory: str, *, keep: int = 3, save_steps: Sequence[int] = (),
               async_save: bool = True, read_only: bool = False):
    self.directory = os.path.abspath(directory) if "://" not in directory else directory
    best_fn = lambda m: m.get(BEST_METRIC, float("-inf"))
    policy = ocm.AnyPreservationPolicy([
        ocm.LatestN(n=keep),
        ocm.BestN(get_metric_fn=best_fn, n=1, keep_checkpoints_without_metrics=False)])
    saves = ocm.AnySavePolicy([ocm.SpecificStepsPolicy(tuple(save_steps)),
                               ocm.PreemptionCheckpointingPolicy()])
    if not read_only:
      self._quarantine_unreadable(self.directory)
    # best_fn also makes orbax write each step's metrics, so the best survives a restart.
    opts = ocp.CheckpointManagerOptions(preservation_policy=policy, save_decision_policy=saves,
                                        best_fn=None if read_only else best_fn, best_mode="max",
                                        enable_async_checkpointing=async_save, create=not read_only,
                                        read_only=read_only)
    self._mngr = ocp.CheckpointManager(self.directory, options=opts, item_names=ITEMS)
    self._sigterm = _SigtermFlag() if not read_only else None

  # -- saving -----------------------------------------------------------------------------

  def preempted(self, step: int) -> bool:
    """True once a preemption reached `step` (all processes agree on the step). Every
    process must call this at every step boundary."""
    return bool(self._sigterm and self._sigterm.hit) or self._mngr.reached_preemption(step)

  def save(self, step: int, params: Any, opt: dict, meta: dict, *, reference: Any = None,
           metrics: Optional[dict] = None, force: bool = False) -> bool:
    """Saves `step` if orbax's policies say so (cadence, preemption) or `force`. `metrics`
    with `eval/success` make the step a best-by-eval candidate. Returns whether it saved."""
    if step in self._mngr.all_steps():  # left by a run that died after writing it
      self._mngr.wait_until_finished()
      self._mngr.delete(step)
    items = dict(params=ocp.args.StandardSave(params), optimizer=ocp.args.StandardSave(opt),
                 meta=ocp.args.JsonSave(dict(meta, layout=LAYOUT)))
    if reference is not None:
      items["reference"] = ocp.args.StandardSave(reference)
    # {} rather than None: a step without an evaluation ranks -inf for BestN (kept only by
    # LatestN) and orbax does not warn about a missing tracked metric.
    return bool(self._mngr.save(step, args=ocp.args.Composite(**items), metrics=metrics or {},
                                force=force))

  def wait(self) -> None:
    """Blocks until async saves finish (a jitted step donates the buffers they read)."""
    self._mngr.wait_until_finished()

  def close(self) -> None:
    self._mngr.wait_until_finished()
    self._mngr.close()

  # -- restoring --------------------------------------------------------------------------

  def all_steps(self) -> list[int]:
    return sorted(self._mngr.all_steps())

  def best_step(self) -> Optional[int]:
    """The step with the highest saved `eval/success` (the newest on ties), or None when no
    evaluation was saved."""
    scored = []
    for step in self.all_steps():
      try:
        m = self._mngr.metrics(step) or {}
      except Exception:  # noqa: BLE001 — an unreadable metrics file just isn't a candidate
        continue
      if BEST_METRIC in m:
        scored.append((float(m[BEST_METRIC]), step))
    return max(scored)[1] if scored else None

  def _quarantine_unreadable(self, directory: str) -> None:
    """Moves aside steps whose JSON metadata orbax would choke on when it lists the steps."""
    if "://" in directory or not os.path.isdir(directory):
      return
    for name in sorted(os.listdir(directory)):
      step_dir = os.path.join(directory, name)
      if not name.isdigit() or not os.path.isdir(step_dir):
        continue
      for f in ("_CHECKPOINT_METADATA", os.path.join("metrics", "metrics")):
        path = os.path.join(step_dir, f)
        if not os.path.exists(path):
          continue
        try:
          with open(path) as fh:
            json.load(fh)
        except (ValueError, UnicodeDecodeError) as e:
          aside = self._move_aside(int(name), reload=False)
          print(f"WARNING: checkpoint step {name} in {directory} is corrupt or unreadable "
                f"({f}: {type(e).__name__}); moved to {aside}; falling back to the previous "
                "checkpoint.", flush=True)
          break

  def restore_run(self, targets: Callable[[dict], tuple[Any, dict, Any]]) -> Optional[Restored]:
    """The newest readable step, whole. `targets(meta) -> (params, opt, reference or None)`
    gives abstract restore targets (ShapeDtypeStructs with shardings) for that step's phase."""
    return self._newest(lambda step: self._restore(step, targets))

  def restore_params(self, target: Any, *, which: str = "best", lm_only: bool = False,
                     step: Optional[int] = None) -> Restored:
    """Params of the best-by-eval step (`which="best"`, falling back to the newest when no
    evaluation was saved) or the newest (`"latest"`), onto `target`'s shardings. With
    `lm_only`, `target` is the policy LM's params alone (other subtrees are not read)."""
    if which not in ("best", "latest"):
      raise ValueError(f"checkpoint: which must be best|latest, got {which!r}")
    best = self.best_step() if which == "best" else None
    if step is not None:  # exactly this step
      return one_step(self, step, target, lm_only)

    one = lambda st: one_step(self, st, target, lm_only)

    steps = ([best] if best is not None else []) + [s for s in reversed(self.all_steps())
                                                    if s != best]
    for step in steps:  # another run's directory: unreadable steps are skipped, never moved
      try:
        return one(step)
      except CheckpointLayoutError:
        raise
      except Exception as e:  # noqa: BLE001 — try the next step
        logging.warning("checkpoint step %d in %s unreadable (%s: %s); trying the next one",
                        step, self.directory, type(e).__name__, e)
    raise FileNotFoundError(f"{self.directory}: no readable checkpoint")

  def meta(self, step: Optional[int] = None) -> dict:
    """The meta dict (phase, iteration, ...) of `step` (default: the newest step); {} when
    the directory holds no step."""
    steps = self.all_steps()
    if step is None and not steps:
      return {}
    return self._meta(steps[-1] if step is None else step)

  def _meta(self, step: int) -> dict:
    path = os.path.join(self.directory, str(step))
    if os.path.isdir(os.path.join(path, "state")) and not os.path.isdir(os.path.join(path, "params")):
      raise CheckpointLayoutError(
          f"{path}: checkpoint in the previous layout (one 'state' item holding 'rl' and 'sft' "
          f"train states); this version reads items {', '.join(ITEMS)} (layout {LAYOUT}). "
          "Start a new workdir, or restore it with the agent_rl version that wrote it.")
    meta = dict(self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"])
    if meta.get("layout") != LAYOUT:
      raise CheckpointLayoutError(f"{path}: meta says layout {meta.get('layout')!r}, this "
                                  f"version reads layout {LAYOUT}")
    return meta

  def _restore(self, step: int, targets) -> Restored:
    meta = self._meta(step)
    params_t, opt_t, ref_t = targets(meta)
    items = dict(params=ocp.args.StandardRestore(params_t),
                 optimizer=ocp.args.StandardRestore(opt_t))
    if ref_t is not None:
      items["reference"] = ocp.args.StandardRestore(ref_t)
    out = self._mngr.restore(step, args=ocp.args.Composite(**items))
    return Restored(step=step, params=out["params"], opt=dict(out["optimizer"]),
                    reference=out["reference"] if ref_t is not None else None, meta=meta)

  def _newest(self, fn: Callable[[int], Restored]) -> Optional[Restored]:
    """fn(step) on the newest step that restores; unreadable steps are moved aside."""
    for step in reversed(self.all_steps()):
      try:
        return fn(step)
      except CheckpointLayoutError:
        raise
      except Exception as e:  # noqa: BLE001 — any other failure means this step is unusable
        aside = self._move_aside(step)
        print(f"WARNING: checkpoint step {step} in {self.directory} is corrupt or unreadable "
              f"({type(e).__name__}: {str(e)[:200]}); moved to {aside}; falling back to the "
              "previous checkpoint.", flush=True)
    return None

  def _move_aside(self, step: int, reload: bool = True) -> str:
    """Moves an unreadable step out of the way (kept for inspection, never deleted), so the
    resumed run can write that step again."""
    src = os.path.join(self.directory, str(step))
    dst_root = self.directory.rstrip("/") + "_corrupt"
    dst = os.path.join(dst_root, f"{step}")
    n = 0
    while os.path.exists(dst):
      n += 1
      dst = os.path.join(dst_root, f"{step}.{n}")
    if jax.process_index() == 0 and os.path.exists(src):
      os.makedirs(dst_root, exist_ok=True)
      os.rename(src, dst)
    from agent_rl.parallel.distributed import sync
    sync(f"checkpoint_move_aside_{step}")
    if reload:
      self._mngr.reload()
    return dst


def one_step(ck: RunCheckpoint, step: int, target: Any, lm_only: bool) -> Restored:
  """The params item of `step` alone, read straight from its directory (with `lm_only`
  only the policy LM subtree is read, `partial_restore`): no optimizer state is touched."""
  meta = ck._meta(step)
  tgt = {"lm": target} if lm_only else target
  path = os.path.join(ck.directory, str(step), "params")
  with ocp.PyTreeCheckpointer() as reader:
    out = reader.restore(path, args=ocp.args.PyTreeRestore(
        item=tgt, restore_args=_restore_args(tgt), partial_restore=lm_only))
  return Restored(step=step, params=out["lm"] if lm_only else out, opt=None, reference=None,
                  meta=meta)


def _restore_args(target: Any) -> Any:
  return jax.tree.map(lambda x: ocp.ArrayRestoreArgs(sharding=x.sharding, global_shape=x.shape,
                                                     dtype=x.dtype), target)


def abstract_like(tree: Any) -> Any:
  """ShapeDtypeStructs (with shardings) of a concrete pytree, for restore targets."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)), tree)
