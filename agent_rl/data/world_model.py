"""World-model turn text for SPA-style SFT (Chen et al., 2025, "Internalizing World Models via
Self-Play Finetuning for Agentic RL", shiqichen17/SPA; shared/ALGORITHMS.md §4.11).

SPA fine-tunes the policy, before PPO, on turns that state the current state and predict the
next one before acting:

    <think><observation>s_t</observation><prediction>s_{t+1}</prediction></think><answer>a_t</answer>

s_t and s_{t+1} are the *true* states (SPA regex-replaces the model's guesses with the
environment's states) written in a compact structured form with coordinates, and the SFT
loss covers every assistant token (the full-target variant; masking the state tokens hurts,
per the paper). Here the demonstrations are solver plans, so s_0..s_T come from replaying
each plan through the env's own jitted `step` (vmapped over tasks, scanned over turns) with
the same reset keys the SFT replay uses: the states in the text are exactly the states the
episode visits, slippery FrozenLake included.

    texts = spa_plans("sokoban", env, tasks, plans, num_turns=5, key=jax.random.key(0))
    texts[i][t]  # '<think><observation>player (2,3) boxes (3,3) targets (4,3)</observation>...'

`STATE_TEXT` maps an env name to `fn(env, state) -> str` for one host-side (numpy) state.
Host text games (envs/host) have no such state: their SPA states are the observation texts
along the expert plan (`game_state_text`, data/host_demos.py).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.data.scripted import encode_plans
from agent_rl.envs.base import Text
from agent_rl.registry import Registry
from agent_rl.envs.tasks import plan_format
from agent_rl.rollout.compiled import episode_keys, reset_groups

STATE_TEXT = Registry("world-model state text (env name)")

SPA_FORMAT = ("<think><observation>{obs}</observation><prediction>{pred}</prediction></think>"
              "<answer>{action}</answer>")


def _cells(mask) -> str:
  """'(r,c) (r,c) ...' of the True cells of `mask [H, W]` in row-major order ('none' if empty)."""
  cells = np.argwhere(np.asarray(mask))
  return " ".join(f"({r},{c})" for r, c in cells) if len(cells) else "none"


@STATE_TEXT.register("sokoban")
def sokoban_state(env, state) -> str:
  """'player (r,c) boxes (r,c) ... targets (r,c) ...' (walls are static and in the grid)."""
  del env
  r, c = (int(x) for x in np.asarray(state.player))
  return f"player ({r},{c}) boxes {_cells(state.boxes)} targets {_cells(state.targets)}"


@STATE_TEXT.register("frozenlake")
def frozenlake_state(env, state) -> str:
  """'player (r,c) holes (r,c) ... goal (r,c)' (frozenlake desc codes: H=1, G=2)."""
  n = env.size
  pos = int(np.asarray(state.pos if hasattr(state, "pos") else state.start))
  desc = np.asarray(state.desc)
  return (f"player ({pos // n},{pos % n}) holes {_cells(desc == 1)} "
          f"goal {_cells(desc == 2)}")


def texthouse_state(env, state) -> str:
  """TextHouse / TextLab (ALFWorld-like): 'at fridge 1; holding apple 1; open fridge 1;
  apple 1 held cool; tomato 1 in countertop 2' -- where the agent stands, what it carries,
  the open receptacles, and the place and changed properties (hot, cool, clean, on) of every
  object whose kind a goal names (the lamp too for look_at goals). The other objects are
  distractors the goal never asks about; listing them would double the think block.
  Object and receptacle names are ALFWorld's (catalog.OBJ_NAMES / REC_NAMES)."""
  del env
  from agent_rl.envs.texthouse import catalog as C
  task = jax.tree.map(np.asarray, state.task)
  at, loc = int(np.asarray(state.at)), np.asarray(state.loc)
  fam, gobj = task.goal_family, task.goal_obj
  kinds = {int(k) for f, k in zip(fam, gobj) if f >= 0 and k >= 0}
  if any(f == C.FAMILIES.index("look_at_obj_in_light") for f in fam):
    kinds.add(C.LAMP)
  name = lambda i: C.OBJ_NAMES[int(task.obj_kind[i]) * C.MAX_INSTANCES + int(task.obj_num[i]) - 1]
  slots = [i for i in range(len(task.obj_kind)) if task.obj_kind[i] >= 0]
  held = [name(i) for i in slots if loc[i] < 0]
  opened = [C.REC_NAMES[r] for r in np.flatnonzero(np.asarray(state.opened))]
  props = (("hot", state.hot), ("cool", state.cold), ("clean", state.clean), ("on", state.on))
  items = []
  for i in slots:
    if int(task.obj_kind[i]) not in kinds:
      continue
    where = "held" if loc[i] < 0 else f"in {C.REC_NAMES[int(loc[i])]}"
    items.append(" ".join([name(i), where] + [w for w, v in props if bool(np.asarray(v)[i])]))
  return "; ".join([f"at {C.REC_NAMES[at] if at >= 0 else 'middle of room'}",
                    f"holding {', '.join(held) or 'nothing'}",
                    f"open {', '.join(opened) or 'none'}"] + items)


STATE_TEXT.register("texthouse", texthouse_state)
STATE_TEXT.register("textlab", texthouse_state)


def state_fn(env_name: str) -> Callable[[Any, Any], str]:
  """The registered state-text function of `env_name` (KeyError listing the known names)."""
  return STATE_TEXT.get(env_name)


@functools.lru_cache(maxsize=16)
def _replay(env):
  """jit: (start states [N], action tokens [T, N, A], lengths [T, N]) -> states [T, N]."""

  def run(state, tokens, lengths):
    def turn(s, x):
      s, *_ = jax.vmap(env.step)(s, Text(tokens=x[0], length=x[1]))
      return s, s
    return jax.lax.scan(turn, state, (tokens, lengths))[1]

  return jax.jit(run)


def state_trajectories(env_name: str, env, tasks, plans: Sequence[Sequence[str]], num_turns: int,
                       key: jax.Array | None = None) -> list[list[str]]:
  """State texts s_0..s_{T_i} of each task's episode under its plan, T_i = min(len(plan_i), num_turns).

  tasks: a batched task pytree with N = len(plans) leading rows (e.g. `demos.sample_tasks`).
  key: the rollout key of the replay these states must match (reset key of task i is
    `fold_in(split(key)[0], i)`, as in `rollout.compiled`); default `jax.random.key(0)`.
  Each turn steps the env with `<answer>{action}</answer>`, the text the env parser reads
  out of the full SPA turn.
  """
  fn = state_fn(env_name)
  n = len(plans)
  lead = {int(np.shape(x)[0]) for x in jax.tree.leaves(tasks)}
  if lead != {n}:
    raise ValueError(f"tasks have leading sizes {sorted(lead)}; expected len(plans) = {n}")
  turns = [min(len(p), num_turns) for p in plans]
  reset_keys, _, _ = episode_keys(jax.random.key(0) if key is None else key, n, 1)
  state0, _ = reset_groups(env, tasks, reset_keys, 1)
  host = lambda s, i: jax.tree.map(lambda x: np.asarray(x)[i], s)
  texts = [[fn(env, host(state0, i))] for i in range(n)]
  t_max = max(turns, default=0)
  if t_max == 0:
    return texts
  enc = [[env.tokenizer.encode(plan_format(env).format(p[t])) if t < turns[i] else []
          for i, p in enumerate(plans)] for t in range(t_max)]
  width = max(len(ids) for row in enc for ids in row)
  tokens = np.full((t_max, n, width), env.tokenizer.pad_id, np.int32)
  lengths = np.zeros((t_max, n), np.int32)
  for t, row in enumerate(enc):
    for i, ids in enumerate(row):
      tokens[t, i, :len(ids)], lengths[t, i] = ids, len(ids)
  states = jax.tree.map(np.asarray, _replay(env)(state0, jnp.asarray(tokens), jnp.asarray(lengths)))
  for i in range(n):
    texts[i] += [fn(env, host(jax.tree.map(lambda x: x[t], states), i)) for t in range(turns[i])]
  return texts


def spa_turn(obs: str, pred: str, action: str) -> str:
  """One SPA assistant turn: think block with the true s_t and s_{t+1}, then the answer."""
  return SPA_FORMAT.format(obs=obs, pred=pred, action=action)


def spa_texts(states: Sequence[Sequence[str]], plans: Sequence[Sequence[str]], num_turns: int
              ) -> list[list[str]]:
  """Per-turn SPA texts `[N][min(len(plan), num_turns)]` of plans and their state texts
  (states[i][t]: s_t before plans[i][t], at least min(len(plan), num_turns) + 1 of them)."""
  return [[spa_turn(s[t], s[t + 1], a) for t, a in enumerate(list(p)[:num_turns])]
          for s, p in zip(states, plans)]


def spa_plans(env_name: str, env, tasks, plans: Sequence[Sequence[str]], num_turns: int,
              key: jax.Array | None = None) -> list[list[str]]:
  """Per-turn full SPA texts `[N][min(len(plan), num_turns)]` (see `state_trajectories`)."""
  return spa_texts(state_trajectories(env_name, env, tasks, plans, num_turns, key), plans,
                   num_turns)


def encode_demo_turns(tokenizer, plans: Sequence[Sequence[str]], num_turns: int,
                      max_tokens: int, *, fmt: str, states=None) -> np.ndarray:
  """Forced tokens `[N, T, A]` of demo plans (data/scripted.encode_plans): answer-only turns
  `fmt.format(a_t)`, or with `states` ([N][>= T_i + 1] state texts) SPA turns (`spa_texts`)."""
  if states is None:
    return encode_plans(tokenizer, plans, num_turns, max_tokens, fmt=fmt)
  return encode_plans(tokenizer, spa_texts(states, plans, num_turns), num_turns, max_tokens,
                      fmt="{}")


def game_spa_turn(obs: str, next_obs: str, action: str) -> str:
  """The SPA turn of one host-game step: its observation texts before and after `action`."""
  return spa_turn(game_state_text(obs), game_state_text(next_obs), action)


def game_state_text(text: str) -> str:
  """A host text game's state for SPA turns: its observation text on one line (whitespace
  runs collapsed). A text game has no structured state to print; its observation is what
  the agent can know (the "next observation" target of implicit world modeling, Zhang et
  al. 2025, "Agent Learning via Early Experience", on ALFWorld and ScienceWorld)."""
  return " ".join(text.split())
