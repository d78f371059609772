"""Host envs in a run: `config.env.name = "host:<adapter>"` (an entry of game.ADAPTERS).

    --config.env.name=host:textworld --config.env.kwargs.games_dir=/data/tw
    --config.env.host.workers=2 --config.env.host.admissible=True

`config.env.kwargs` are the adapter's own keyword arguments (checked against its signature);
`config.env.host` configures the pool and the text interface (text_env.py, pool.py):
workers (0 = in-process, sequential), step_timeout_s, obs_tokens (the observation budget),
admissible (list the admissible commands in the prompt), action_format (answer | raw),
invalid_penalty, score_scale (reward = the score delta x it), max_answer_bytes, split /
eval_split (task panels of training / evaluation),
extras (comma list of GameStep.extras keys carried into the batch), overlap (two pipelined
half-batches, rollout/overlap.py), prefetch_resets (the next iteration's resets run in the
workers during the update, pool.py); several agents on a game without roles of its own: roles,
schedule, offset_by_task, role_scales (roles.py; a game with roles, e.g. host:toy_duo, brings
its own).

The adapter modules are imported here by name (each imports its package only when a game is
built, so an absent package costs nothing until it is asked for), then the registry decides.
"""
from __future__ import annotations

import functools
import importlib

from agent_rl.envs.host.game import ADAPTERS
from agent_rl.envs.host.roles import host_roles

PREFIX = "host:"
# Modules that register adapters in ADAPTERS (the toy first; the package adapters may be
# absent from a checkout that predates them).
ADAPTER_MODULES = ("toy", "textworld", "textworld_express", "scienceworld", "alfworld")
# Strategies that need what a host env cannot give: env-state cloning at every turn (TSR's
# search; by replay a reset plus t steps per candidate at turn t, quadratic in the turns) or
# task fields to inject text into (skill_pairs). `branch` clones once per group, by replay
# (text_env.clone_rows).
UNSUPPORTED_STRATEGIES = ("tsr", "skill_pairs")


@functools.lru_cache(maxsize=1)
def load_adapters() -> tuple[str, ...]:
  """Imports the adapter modules present; returns the registered adapter names."""
  for m in ADAPTER_MODULES:
    name = f"agent_rl.envs.host.{m}"
    try:
      importlib.import_module(name)
    except ModuleNotFoundError as e:
      if e.name != name:  # the module exists but a dependency of its own is missing
        raise
  return tuple(ADAPTERS.names())


def is_host(env_name: str) -> bool:
  return env_name.startswith(PREFIX)


def adapter_name(env_name: str) -> str:
  return env_name[len(PREFIX):]


def extras_of(h) -> tuple[str, ...]:
  return tuple(k.strip() for k in str(h.extras).split(",") if k.strip())


def validate(c, need) -> None:
  """Host-env fields, before anything is built (`need(cond, field, msg)` of config.validate)."""
  from agent_rl.envs.host.text_rules import ACTION_FORMATS
  known = load_adapters()
  name, h = adapter_name(c.env.name), c.env.host
  need(name in ADAPTERS, "env.name",
       f"unknown host adapter {name!r}; registered: {', '.join(f'{PREFIX}{k}' for k in known)}")
  ADAPTERS.check_kwargs(name, dict(c.env.kwargs), "config.env.kwargs")
  w = h.workers
  need(isinstance(w, int) and not isinstance(w, bool) and w >= 0, "env.host.workers",
       f"must be an int >= 0 (0 = in-process), got {w!r}")
  need(h.step_timeout_s > 0, "env.host.step_timeout_s", f"must be > 0, got {h.step_timeout_s}")
  need(h.score_scale > 0, "env.host.score_scale", f"must be > 0, got {h.score_scale}")
  need(h.obs_tokens >= 1, "env.host.obs_tokens", f"must be >= 1, got {h.obs_tokens}")
  need(h.max_answer_bytes >= 1, "env.host.max_answer_bytes",
       f"must be >= 1, got {h.max_answer_bytes}")
  need(h.action_format in ACTION_FORMATS, "env.host.action_format",
       f"unknown action format {h.action_format!r}; known: {', '.join(ACTION_FORMATS.names())}")
  need(bool(h.split), "env.host.split", "must name the training split")
  # The fields agree with each other here; with the game's own roles when the env is built.
  try:
    host_roles((), h.roles, h.schedule, h.offset_by_task, h.role_scales)
  except ValueError as e:
    raise ValueError(f"config.{e}") from None
  need(c.rollout.strategy not in UNSUPPORTED_STRATEGIES, "rollout.strategy",
       f"{c.rollout.strategy!r} needs env-state cloning or task fields; host envs support the "
       f"others ({', '.join(UNSUPPORTED_STRATEGIES)} are JAX-env only)")
  need(not c.sft.world_model or h.action_format == "answer", "sft.world_model",
       "world-model SFT turns carry the command in <answer>...</answer> after the think block: "
       f"needs env.host.action_format='answer', got {h.action_format!r}")
  need(h.privileged_tokens >= 1, "env.host.privileged_tokens",
       f"must be >= 1, got {h.privileged_tokens}")


def pool_games(c) -> int:
  """Games the pool holds: the largest rollout of the run (training or evaluation)."""
  return max(c.rollout.num_tasks * c.rollout.group_size,
             c.eval.num_tasks * max(int(c.eval.k), 1))


def make_env(c, tokenizer):
  """The run's TextHostEnv over a GamePool of `pool_games(c)` games of the adapter."""
  from agent_rl.envs.host.pool import GamePool
  from agent_rl.envs.host.text_env import TextHostEnv
  load_adapters()
  h = c.env.host
  factory = functools.partial(ADAPTERS.get(adapter_name(c.env.name)), **dict(c.env.kwargs))
  pool = GamePool(factory, pool_games(c), workers=int(h.workers),
                  step_timeout_s=float(h.step_timeout_s))
  try:
    return TextHostEnv(pool, tokenizer, split=h.split, eval_split=h.eval_split,
                       obs_len=int(h.obs_tokens), admissible=bool(h.admissible),
                       action_format=h.action_format, invalid_penalty=float(h.invalid_penalty),
                       max_answer_bytes=int(h.max_answer_bytes), extras=extras_of(h),
                       overlap=bool(h.overlap), roles=h.roles, schedule=h.schedule,
                       offset_by_task=bool(h.offset_by_task), role_scales=h.role_scales,
                       score_scale=float(h.score_scale))
  except BaseException:
    pool.close()
    raise


def corpus(c, num_tasks: int = 16, steps: int = 6) -> list[str]:
  """Tokenizer corpus of a host env (train/setup.py): its instruction, the observations of
  `num_tasks` games played in this process along their admissible commands (a fixed,
  deterministic walk), the answers, and the env's own messages; with `sft.world_model`, the
  walk's steps as SPA turns too (data/world_model.py)."""
  from agent_rl.data.world_model import game_spa_turn
  from agent_rl.envs.host.game import game_roles
  from agent_rl.envs.host.text_rules import FAILED_TEXT, INVALID_TEXT, present
  from agent_rl.envs.roles import role_line, roles_instruction
  from agent_rl.train.setup import SYSTEM_PROMPT
  load_adapters()
  h = c.env.host
  game = ADAPTERS.get(adapter_name(c.env.name))(**dict(c.env.kwargs))
  try:
    texts = [game.instruction(), "system\n" + SYSTEM_PROMPT, "user\n", "assistant\n"] * 32
    roles = host_roles(game_roles(game), h.roles, h.schedule, h.offset_by_task, h.role_scales)
    if roles.roles:
      texts += [roles_instruction(game.instruction(), roles.roles)] * 8
      texts += [role_line(r) for r in roles.roles] * 32
    texts += list(INVALID_TEXT.values()) + [FAILED_TEXT]
    for i, tid in enumerate(list(game.task_ids(h.split))[:num_tasks]):
      obs = game.reset(tid, i)
      texts.append(present(obs, bool(h.admissible)))
      for s in range(steps):
        if not obs.admissible:
          break
        cmd = obs.admissible[(i + s) % len(obs.admissible)]
        texts.append(f"<answer>{cmd}</answer>")
        st = game.step(cmd)
        if c.sft.world_model:  # off, the corpus (hence the tokenizer) is what it was
          texts.append(game_spa_turn(obs.text, st.obs.text, cmd))
        obs = st.obs
        texts.append(present(obs, bool(h.admissible)))
        if st.done:
          break
  finally:
    game.close()
  return texts
