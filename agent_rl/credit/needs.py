"""What a credit kernel needs beyond the always-informative batch fields, and how it reads it.

A kernel declares its inputs when it registers (issue 16 §3):

    @register("uma", needs=Needs(extras=("question_index",)))
    def uma(batch, *, norm_by_std=True): q = extra(batch, "question_index", "uma")

Kinds of input (`Needs` fields):
- env_fields: EpisodeBatch fields that are always present but all-zero unless the env emits
  the same-named key in `info` (`ENV_FIELDS`: agent_id, fatal, milestone). A kernel fed the
  zeros silently reduces to a simpler method (drmas -> GRPO), so the run refuses it.
- extras: keys of `batch.extras` (turn-level `[N, T]` arrays, one per env `info` key beyond
  the fixed ones) the kernel cannot run without; optional_extras: keys it reads when present.
- critic: the kernel reads `batch.values` (`config.model.critic != 'none'`).
- baseline_rollout: the run must attach a baseline rollout's return as
  `extras["baseline_return"]` (ReMax; `credit.baseline.attach_baseline_return`).

Episode-level inputs (one value per episode, e.g. `skill_injected [N]`) ride as turn-level
extras too (the env emits the same value on every turn); `episode_extra` reads them.
`env_info_keys` finds the `info` keys of an env from `jax.eval_shape` of reset/step, so the
check runs before anything compiles (credit/check.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

# Batch fields that default to zeros when the env does not emit them (rollout/episode.py).
ENV_FIELDS = ("agent_id", "fatal", "milestone")
# The extra the baseline rollout provides (not an env info key).
BASELINE_RETURN = "baseline_return"


@dataclasses.dataclass(frozen=True)
class Needs:
  """A kernel's inputs beyond reward/valid/done/success/valid_action/state_hash/next_hash,
  the token fields and group_id (every env provides those).

  env_fields: names in ENV_FIELDS the kernel's result depends on.
  extras: required `batch.extras` keys; optional_extras: keys read when present.
  critic: needs `batch.values` `[N, L]`. baseline_rollout: needs `extras["baseline_return"]`.
  """
  env_fields: tuple[str, ...] = ()
  extras: tuple[str, ...] = ()
  optional_extras: tuple[str, ...] = ()
  critic: bool = False
  baseline_rollout: bool = False

  def __post_init__(self):
    for f in ("env_fields", "extras", "optional_extras"):
      v = getattr(self, f)
      if isinstance(v, str) or not all(isinstance(x, str) for x in v):
        raise TypeError(f"Needs.{f} must be a tuple of str, got {v!r}")
      object.__setattr__(self, f, tuple(v))
    bad = [f for f in self.env_fields if f not in ENV_FIELDS]
    if bad:
      raise ValueError(f"Needs.env_fields: {bad} are not env-emitted batch fields; known: {ENV_FIELDS} "
                       "(put other env info keys in extras)")


# name -> Needs, filled by credit.base.register (kept here so declarations have one home).
NEEDS: dict[str, Needs] = {}


def extras_of(batch: Any) -> dict:
  """`batch.extras` as a dict ({} when the batch has none)."""
  return dict(getattr(batch, "extras", None) or {})


def extra(batch: Any, name: str, kernel: str) -> jax.Array:
  """The turn-level extra `batch.extras[name]` `[N, T]`; a missing one is a ValueError naming
  the kernel and the extras the batch does have."""
  ex = extras_of(batch)
  if name not in ex:
    have = ", ".join(sorted(ex)) or "none"
    raise ValueError(f"credit kernel {kernel!r} needs batch.extras[{name!r}] ([N, T], from env info "
                     f"key {name!r}); the batch has extras: {have}")
  x = jnp.asarray(ex[name])
  want = tuple(batch.valid.shape)
  if x.shape != want:
    raise ValueError(f"credit kernel {kernel!r}: batch.extras[{name!r}] must have shape [N, T]={want}, "
                     f"got {x.shape}")
  return x


def optional_extra(batch: Any, name: str, kernel: str) -> Optional[jax.Array]:
  """`extra(...)` when the batch has it, else None."""
  return extra(batch, name, kernel) if name in extras_of(batch) else None


def episode_extra(batch: Any, name: str, kernel: str, *, reduce: str = "first",
                  optional: bool = False) -> Optional[jax.Array]:
  """An episode-level input `[N]` carried as a turn-level extra `[N, T]`.

  reduce="first": the value on turn 0 (an attribute the env emits on every turn: skill
  stream, generation, baseline return; turn 0 exists in every non-padding episode).
  reduce="any": any valid turn is True (a flag the env raises when it happens, e.g. at the
  end). optional=True returns None when the extra is absent.
  """
  if optional and name not in extras_of(batch):
    return None
  x = extra(batch, name, kernel)
  if reduce == "first":
    return x[:, 0]
  if reduce == "any":
    return jnp.any(x.astype(bool) & batch.valid, axis=1)
  raise ValueError(f"episode_extra reduce must be 'first' or 'any', got {reduce!r}")


def env_info_spec(env: Any, task: Any = None, *, action_len: Optional[int] = None) -> dict:
  """`{key: ShapeDtypeStruct}` of the `info` that `env.step` returns for one episode, found by
  `jax.eval_shape` of reset then step (nothing runs or compiles).

  env: a pure-JAX env (reset(key, task), step(state, action), sample_task(key)).
  task: one task pytree (or its ShapeDtypeStructs); default `eval_shape(env.sample_task)`.
  action_len: tokens of the probe action when the env has no `action_len` (default 1; an
  env's info keys do not depend on the action length).
  """
  from agent_rl.envs.base import Text  # envs import nothing from credit; keep the edge lazy

  key = jax.random.key(0)
  if task is None:
    task = jax.eval_shape(env.sample_task, key)
  a = int(getattr(env, "action_len", None) or action_len or 1)
  action = Text(jax.ShapeDtypeStruct((a,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))

  def probe(k, tk, act):
    state, _ = env.reset(k, tk)
    return env.step(state, act)[4]

  info = jax.eval_shape(probe, key, task, action)
  if not isinstance(info, dict):
    raise TypeError(f"{type(env).__name__}.step must return info as a dict, got {type(info).__name__}")
  return dict(info)


def env_info_keys(env: Any, task: Any = None, *, action_len: Optional[int] = None) -> frozenset[str]:
  """The keys of the env's `info` (see `env_info_spec`)."""
  return frozenset(env_info_spec(env, task, action_len=action_len))
