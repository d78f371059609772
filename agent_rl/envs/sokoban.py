"""Sokoban as a pure-JAX text environment (RAGEN's Sokoban: gym-sokoban rules, text grid).

Rules (gym-sokoban, Schrader 2018; used by RAGEN, Wang et al. 2025, arXiv:2504.20073): the
player moves Up/Down/Left/Right; walking into a box pushes it if the cell behind it is free
(no pulls, one box at a time); the level is solved when no target lacks a box. gym-sokoban's
rewards are the reward terms here, weighted by `reward_weights`:
    success  1 on the move that solves the level        (weight 10, gym's reward_finished)
    boxes    change in boxes on targets this turn       (weight 1,  +1 on / -1 off target)
    step     number of moves executed this turn          (weight -0.1, penalty_for_step)
    format   1 if the turn's text was not a valid action (weight -0.1, RAGEN's format penalty)
A turn is `<answer>Up || Left</answer>` with up to `max_actions` moves (actions.ActionParser);
execution stops once solved. An invalid turn moves nothing and counts as one step. Done when
solved or after `max_steps` steps (base.step_limit; `info["truncated"]`); stepping a done
state changes nothing (reward 0).

Observation: RAGEN's glyph grid, one line per row: # wall, _ floor, O target, X box,
√ box on target, P player, S player on target. Rows are rendered from pieces of `chunk`
cells (all glyph tuples, the row's last piece carrying "\\n"), so a tokenizer trained on
env text (which learns "#__", "_#\\n", ...) renders a 6x6 room in about a dozen tokens.
Tasks: `sample_task(key)` (reverse-play generator, sokoban_gen.py) or `task_from_text(level)`
with gym-sokoban/XSB glyphs (# wall, space/_ floor, . target, $ box, @ player, * box on
target, + player on target). `solve(task)` is a host BFS giving an optimal move sequence.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs import sokoban_gen
from agent_rl.envs.base import ENVS, Text, fingerprint, step_limit, validate_fields
from agent_rl.envs.actions import ActionParser
from agent_rl.envs.render import GridRenderer

GLYPHS = ("#", "_", "O", "√", "X", "P", "S")   # codes 0..6, RAGEN's GRID_LOOKUP
ACTIONS = ("Up", "Down", "Left", "Right")       # ids 0..3 = sokoban_gen.DIRS rows
REWARD_NAMES = ("success", "boxes", "step", "format")
_LEVEL_GLYPHS = {"#": (1, 0, 0, 0), " ": (0, 0, 0, 0), "_": (0, 0, 0, 0), ".": (0, 1, 0, 0),
                 "$": (0, 0, 1, 0), "@": (0, 0, 0, 1), "*": (0, 1, 1, 0), "+": (0, 1, 0, 1)}


@struct.dataclass
class SokobanTask:
  """A level: `walls, targets, boxes [H, W] bool`, `player [2] int32` (row, col)."""
  walls: jax.Array
  targets: jax.Array
  boxes: jax.Array
  player: jax.Array


@struct.dataclass
class SokobanState:
  walls: jax.Array
  targets: jax.Array
  boxes: jax.Array
  player: jax.Array
  steps: jax.Array   # int32: moves (and invalid turns) so far
  done: jax.Array    # bool


def cell_codes(walls, targets, boxes, player) -> jax.Array:
  """`[H, W] int32` RAGEN glyph codes (index into GLYPHS)."""
  h, w = walls.shape
  at_player = (jnp.arange(h)[:, None] == player[0]) & (jnp.arange(w)[None, :] == player[1])
  code = jnp.where(targets, 2, 1)
  code = jnp.where(boxes, jnp.where(targets, 3, 4), code)
  code = jnp.where(at_player, jnp.where(targets, 6, 5), code)
  return jnp.where(walls, 0, code)


def move(walls, boxes, player, action):
  """One push-only move: `(boxes, player, moved)`; off-grid counts as wall."""
  h, w = walls.shape
  d = sokoban_gen.DIRS[action]
  p1, p2 = player + d, player + 2 * d

  def at(p, grid):
    inside = (p[0] >= 0) & (p[0] < h) & (p[1] >= 0) & (p[1] < w)
    return inside & grid[jnp.clip(p[0], 0, h - 1), jnp.clip(p[1], 0, w - 1)]

  def free(p):
    inside = (p[0] >= 0) & (p[0] < h) & (p[1] >= 0) & (p[1] < w)
    return inside & ~at(p, walls) & ~at(p, boxes)

  box1 = at(p1, boxes)
  can = (free(p1) & ~box1) | (box1 & free(p2))
  rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
  at1 = (rows == p1[0]) & (cols == p1[1])
  at2 = (rows == p2[0]) & (cols == p2[1])
  push = can & box1
  boxes = (boxes & ~(push & at1)) | (push & at2)
  return boxes, jnp.where(can, p1, player), can


@ENVS.register("sokoban")
@dataclasses.dataclass(frozen=True)
class Sokoban:
  """Sokoban text env. `make("sokoban", tokenizer=tok, dim_room=(6, 6), num_boxes=1)`."""
  tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)
  dim_room: tuple = (6, 6)
  num_boxes: int = 1
  max_steps: int = 100
  max_actions: int = 1
  reward_weights: tuple = (10.0, 1.0, -0.1, -0.1)
  chunk: int = 3
  num_gen_steps: int | None = None     # topology walk; None -> gym's int(1.7 * (H + W))
  gen_walks: int = 4
  gen_walk_len: int = 300
  max_answer_bytes: int = 96
  grid: GridRenderer = dataclasses.field(init=False, repr=False)
  parser: ActionParser = dataclasses.field(init=False, repr=False)

  reward_names = REWARD_NAMES

  def __post_init__(self):
    validate_fields(self, REWARD_NAMES, ("num_boxes", "max_steps", "max_actions", "chunk",
                                         "gen_walks", "gen_walk_len"))
    dim = (self.dim_room,) * 2 if isinstance(self.dim_room, int) else tuple(self.dim_room)
    if len(dim) != 2 or min(dim) < 3:
      raise ValueError(f"dim_room must be (H, W) with both >= 3, got {self.dim_room!r}")
    object.__setattr__(self, "dim_room", dim)
    if (dim[0] - 2) * (dim[1] - 2) <= self.num_boxes + 1:
      raise ValueError(f"dim_room={dim} has no room for num_boxes={self.num_boxes} and a player")
    object.__setattr__(self, "grid", GridRenderer(self.tokenizer, GLYPHS, dim, self.chunk))
    words = {a.lower(): i for i, a in enumerate(ACTIONS)}
    object.__setattr__(self, "parser", ActionParser(
        self.tokenizer, words, max_actions=self.max_actions, max_answer_bytes=self.max_answer_bytes))

  @property
  def obs_len(self) -> int:
    return self.grid.obs_len

  def render(self, state) -> Text:
    """Observation tokens `[obs_len]` of a state (or task)."""
    return self.grid.render(cell_codes(state.walls, state.targets, state.boxes, state.player))

  def render_text(self, state) -> str:
    """Host-side text of a state/task (the string the tokens of `render` decode to)."""
    return self.grid.text(cell_codes(state.walls, state.targets, state.boxes, state.player))

  @property
  def instruction(self) -> str:
    return ("You are solving Sokoban. Push every box (X) onto a target (O); boxes can be pushed, "
            "not pulled. Symbols: # wall, _ floor, O target, X box, √ box on target, P you, "
            "S you on target. Actions: Up, Down, Left, Right. Answer with up to "
            f"{self.max_actions} action(s) separated by ||, e.g. <answer>Up || Left</answer>.")

  # -- tasks ----------------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> SokobanTask:
    h, w = self.dim_room
    walls, targets, boxes, player = sokoban_gen.generate(
        key, h, w, self.num_boxes, num_steps=self.num_gen_steps, walks=self.gen_walks,
        walk_len=self.gen_walk_len)
    return SokobanTask(walls=walls, targets=targets, boxes=boxes, player=player)

  def task_from_text(self, level: str) -> SokobanTask:
    """A task from gym-sokoban glyph lines; smaller levels are padded with walls to dim_room."""
    lines = [ln for ln in level.split("\n") if ln.strip()]
    h, w = self.dim_room
    if len(lines) > h or max(len(ln) for ln in lines) > w:
      raise ValueError(f"level is {len(lines)}x{max(len(ln) for ln in lines)}, larger than dim_room={self.dim_room}")
    grid = np.zeros((4, h, w), bool)
    grid[0] = True
    for r, ln in enumerate(lines):
      for c, ch in enumerate(ln):
        if ch not in _LEVEL_GLYPHS:
          raise ValueError(f"level has unknown glyph {ch!r} at row {r}, col {c}; known: #, space, _, ., $, @, *, +")
        grid[:, r, c] = _LEVEL_GLYPHS[ch]
    players = np.argwhere(grid[3])
    if len(players) != 1:
      raise ValueError(f"level needs exactly one player (@ or +), found {len(players)}")
    if grid[2].sum() != grid[1].sum() or grid[2].sum() == 0:
      raise ValueError(f"level needs as many boxes as targets (> 0): {grid[2].sum()} boxes, {grid[1].sum()} targets")
    return SokobanTask(walls=jnp.asarray(grid[0]), targets=jnp.asarray(grid[1]),
                       boxes=jnp.asarray(grid[2]), player=jnp.asarray(players[0], jnp.int32))

  # -- dynamics -------------------------------------------------------------------------------
  def reset(self, key: jax.Array, task: SokobanTask):
    del key  # deterministic dynamics; the task fixes the start state
    state = SokobanState(walls=task.walls, targets=task.targets, boxes=task.boxes,
                         player=task.player, steps=jnp.int32(0), done=jnp.bool_(False))
    return state, self.render(state)

  def step(self, state: SokobanState, action: Text):
    acts = self.parser(action)
    active = ~state.done
    on_before = jnp.sum(state.boxes & state.targets, dtype=jnp.int32)

    def one(carry, k):
      boxes, player, solved, moves = carry
      live = active & (k < acts.count) & ~solved
      nb, np_, _ = move(state.walls, boxes, player, jnp.maximum(acts.ids[k], 0))
      boxes = jnp.where(live, nb, boxes)
      player = jnp.where(live, np_, player)
      solved = solved | (live & ~jnp.any(state.targets & ~boxes))
      return (boxes, player, solved, moves + live.astype(jnp.int32)), None

    (boxes, player, solved, moves), _ = jax.lax.scan(   # unrolled: fuses with parse/render
        one, (state.boxes, state.player, jnp.bool_(False), jnp.int32(0)),
        jnp.arange(self.max_actions), unroll=True)
    invalid = active & ~acts.valid
    steps, done, truncated = step_limit(state.steps, moves + invalid.astype(jnp.int32), active,
                                        solved, state.done, self.max_steps)
    new = state.replace(boxes=boxes, player=player, steps=steps, done=done)
    on_after = jnp.sum(boxes & state.targets, dtype=jnp.int32)
    terms = jnp.stack([solved, on_after - on_before, moves, invalid]).astype(jnp.float32)
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    codes = cell_codes(new.walls, new.targets, new.boxes, new.player)   # shared by obs and hash
    info = {
        "success": ~jnp.any(state.targets & ~boxes),
        "valid_action": acts.valid,
        "state_hash": fingerprint(codes),
        "reward_terms": terms,
        "milestone": on_after > on_before,
        "truncated": truncated,
    }
    return new, self.grid.render(codes), reward, done, info

  def state_hash(self, state: SokobanState) -> jax.Array:
    """uint32 fingerprint of the board (walls, targets, boxes, player): the anchor state of
    GiGPO-style credit; the episode loop also hashes initial states with it."""
    return fingerprint(cell_codes(state.walls, state.targets, state.boxes, state.player))

  # -- expert ---------------------------------------------------------------------------------
  def solve(self, task: SokobanTask, max_nodes: int = 2_000_000) -> list[str]:
    """Optimal (fewest moves) action words by BFS over (player, boxes); RuntimeError if unsolvable."""
    return solve_bfs(np.asarray(task.walls), np.asarray(task.targets), np.asarray(task.boxes),
                     tuple(int(x) for x in np.asarray(task.player)), max_nodes)


def solve_bfs(walls, targets, boxes, player, max_nodes=2_000_000) -> list[str]:
  """Host BFS over states (player, frozenset(boxes)); push-only moves in ACTIONS order."""
  h, w = walls.shape
  goal = frozenset(map(tuple, np.argwhere(targets)))
  start = (tuple(player), frozenset(map(tuple, np.argwhere(boxes))))
  if start[1] >= goal:
    return []
  parent = {start: None}
  queue = collections.deque([start])
  dirs = [(-1, 0), (1, 0), (0, -1), (0, 1)]

  def wall(r, c):
    return not (0 <= r < h and 0 <= c < w) or walls[r, c]

  while queue:
    s = queue.popleft()
    (pr, pc), bx = s
    for a, (dr, dc) in enumerate(dirs):
      r1, c1 = pr + dr, pc + dc
      if wall(r1, c1):
        continue
      nb = bx
      if (r1, c1) in bx:
        r2, c2 = r1 + dr, c1 + dc
        if wall(r2, c2) or (r2, c2) in bx:
          continue
        nb = (bx - {(r1, c1)}) | {(r2, c2)}
      t = ((r1, c1), nb)
      if t in parent:
        continue
      parent[t] = (s, a)
      if nb >= goal:
        plan = []
        while parent[t] is not None:
          t, a = parent[t]
          plan.append(ACTIONS[a])
        return plan[::-1]
      if len(parent) > max_nodes:
        raise RuntimeError(f"Sokoban BFS gave up after {max_nodes} states")
      queue.append(t)
  raise RuntimeError("Sokoban level is unsolvable")
