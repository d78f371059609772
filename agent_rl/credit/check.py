"""Start-up check that the env and config provide what a credit kernel declares it needs.

Issue 16 §3: a kernel fed an all-zero `agent_id`/`fatal`/`milestone` silently reduces to
GRPO, and one missing an extra (`question_index`, `prm_score`, ...) fails deep inside a jitted
step. `check_inputs` runs before anything compiles (only `jax.eval_shape` traces) and raises
a ValueError naming the kernel, the missing input and the env:

    credit.check_inputs(c.credit.name, dict(c.credit.kwargs), env=setup.env,
                        env_name=c.env.name, critic=c.model.critic != "none",
                        strategy=c.rollout.strategy)
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.credit.base import get, names, needs_of
from agent_rl.credit.needs import BASELINE_RETURN, ENV_FIELDS, Needs, env_info_spec
from agent_rl.rollout.batch import from_turns
from agent_rl.rollout.carry import extra_columns

# Strategies whose batch rows are the rollout of `tasks` in order (group_id = task index), so
# a greedy baseline of task g belongs to the episodes of group g. starpo_s and dapo select and
# renumber groups (dapo across several rollouts), which would pair episodes with other tasks.
BASELINE_STRATEGIES = ("plain", "selective_gate", "tsr")

# The probe batch: N episodes in groups of 2, T turns of K tokens (T != L, so the level of a
# kernel's output is read off its shape).
_N, _T, _K = 4, 3, 2


def available_inputs(env: Any, task: Any = None) -> dict[str, Any]:
  """`{name: dtype}` of what an env provides to credit kernels: the ENV_FIELDS it emits in
  `info`, and every extra the rollout makes of its info (other keys, `reward_terms/<name>`)."""
  spec = env_info_spec(env, task)
  batched = {k: jax.ShapeDtypeStruct((_N, *v.shape), v.dtype) for k, v in spec.items()}
  cols = extra_columns(batched, _N, getattr(env, "reward_names", None))
  out = {k: spec[k].dtype for k in ENV_FIELDS if k in spec}
  out.update({k: d for k, (_, _, d) in cols.items()})
  return out


def _emitters(field: str, env_factory: Optional[Callable[[str], Any]]) -> str:
  """Registered envs that provide `field`, for the error message (built with their defaults)."""
  if env_factory is None:
    return "unknown (no env_factory to build the others)"
  from agent_rl import envs
  found = []
  for name in envs.ENVS.names():
    try:
      have = available_inputs(env_factory(name))
    except Exception:  # an env that cannot be built with defaults is skipped, not fatal here
      continue
    if field in have:
      found.append(name)
  return ", ".join(found) or "none"


def _probe_batch(needs: Needs, have: Mapping[str, Any], critic: bool):
  """A zero batch with the extras the kernel reads that the env provides, and values when
  there is a critic; plus a baseline return when the kernel declares the rollout."""
  rng = np.random.default_rng(0)
  valid = np.ones((_N, _T), bool)
  extras = {k: jnp.zeros((_N, _T), have[k]) for k in (*needs.extras, *needs.optional_extras)
            if k in have}
  if needs.baseline_rollout:
    extras[BASELINE_RETURN] = jnp.zeros((_N, _T), jnp.float32)
  b = from_turns(rng.normal(size=(_N, _T)).astype(np.float32), valid,
                 np.arange(_N, dtype=np.int32) // 2, tokens_per_turn=_K, extras=extras)
  if critic:
    b = b.replace(values=jnp.zeros(b.tokens.shape, jnp.float32))
  return b


def _kernels_with_token_returns(have: Mapping[str, Any]) -> list[str]:
  """Kernels whose inputs `have` covers and that return token-level returns `[N, L]`."""
  out = []
  for name in names():
    nd = needs_of(name)
    if not nd.baseline_rollout and all(k in have for k in (*nd.env_fields, *nd.extras)):
      cr = jax.eval_shape(get(name), _probe_batch(nd, have, True))
      if cr.returns is not None and cr.returns.shape == (_N, _T * _K):
        out.append(name)
  return out


def check_inputs(name: str, kwargs: Optional[Mapping[str, Any]] = None, *, env: Any, env_name: str,
                 critic: bool, strategy: str = "plain", info_keys: Optional[Collection[str]] = None,
                 task: Any = None, env_factory: Optional[Callable[[str], Any]] = None) -> Needs:
  """Raises ValueError unless `env`/config provide every input kernel `name` declares.

  name, kwargs: `config.credit.name` / `.kwargs` (kwargs bound as the run binds them).
  env, env_name: the run's env and `config.env.name`; info_keys: its `info` keys (default:
    found by `available_inputs`, i.e. eval_shape of env.reset/step on `task`).
  critic: `config.model.critic != 'none'`. strategy: `config.rollout.strategy`.
  env_factory: `name -> env`, used only in error messages to list the envs that do emit a
    missing input (default: `envs.make(name, tokenizer=env.tokenizer)` when env has one).
  Checks: env-emitted fields and extras (env), a critic for kernels reading `batch.values`,
  a task-ordered strategy for a baseline rollout; then traces the kernel once on a probe
  batch (eval_shape) and, with a critic, requires token-level returns `[N, L]` (the
  learner trains the critic only on those). Returns the kernel's `Needs` (the run calls
  `credit.baseline.attach_baseline_return` when `needs.baseline_rollout`).
  """
  needs = needs_of(name)
  who = f"config.credit.name={name!r}"
  if env_factory is None and getattr(env, "tokenizer", None) is not None:
    from agent_rl import envs
    env_factory = lambda n: envs.make(n, tokenizer=env.tokenizer)  # noqa: E731
  # Caller-supplied keys (a host env that cannot be traced): dtypes unknown, probe with f32.
  have = (available_inputs(env, task) if info_keys is None else
          {k: jnp.float32 for k in info_keys if k != "reward_terms"})
  for field in needs.env_fields:
    if field not in have:
      raise ValueError(
          f"{who} needs batch.{field}, which env {env_name!r} does not emit in info (the batch "
          f"would hold zeros and the kernel silently reduce to a simpler method); envs that "
          f"emit it: {_emitters(field, env_factory)}")
  for key in needs.extras:
    if key not in have:
      raise ValueError(
          f"{who} needs extra {key!r}, which env {env_name!r} does not emit in info; envs that "
          f"emit it: {_emitters(key, env_factory)}")
  if needs.critic and not critic:
    raise ValueError(f"{who} needs a critic (batch.values [N, L]); set config.model.critic != 'none' "
                     "(shared|separate)")
  if needs.baseline_rollout and strategy not in BASELINE_STRATEGIES:
    raise ValueError(
        f"{who} needs a greedy baseline rollout of each episode's task, which needs batch rows "
        f"in task order; config.rollout.strategy={strategy!r} reorders groups (use one of "
        f"{', '.join(BASELINE_STRATEGIES)})")
  try:
    cr = jax.eval_shape(lambda b: get(name)(b, **dict(kwargs or {})), _probe_batch(needs, have, critic))
  except (TypeError, ValueError) as e:
    raise ValueError(f"{who} with config.credit.kwargs={dict(kwargs or {})} fails on env "
                     f"{env_name!r}'s inputs: {e}") from e
  if critic and (cr.returns is None or cr.returns.shape != (_N, _T * _K)):
    level = "no returns" if cr.returns is None else (
        "turn-level returns [N, T]" if cr.returns.shape == (_N, _T) else
        f"returns of shape {cr.returns.shape}")
    raise ValueError(
        f"{who} gives {level}, but the critic (config.model.critic) trains only on "
        f"token-level returns [N, L] (train/learner.prepare drops the rest), so it would get "
        f"no value targets; set config.model.critic='none' or use a kernel with token-level "
        f"returns: {', '.join(_kernels_with_token_returns(have))}")
  return needs
