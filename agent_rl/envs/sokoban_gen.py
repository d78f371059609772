"""Procedural Sokoban levels in JAX by reverse play (gym-sokoban's generator, vmappable).

gym-sokoban (Schrader, 2018, https://github.com/mpSchrader/gym-sokoban; after Weber et al.,
2017, "Imagination-Augmented Agents", arXiv:1707.06203) builds a room in three stages:
  1. topology: a random walk of `num_steps` steps (direction changes with p=0.35) stamping
     one of five 3x3 floor masks at each position; the border is wall;
  2. placement: the player and `num_boxes` targets on distinct random floor cells, boxes
     starting on their targets (the solved state);
  3. reverse play: moves and *pulls* from the solved state, keeping the visited state with
     the best score = pulls * sum of box-target Manhattan distances, where states with a
     box or the player on a target score 0; best score 0 -> retry.
Every pull is the inverse of a push, so the result is solvable by construction.
gym-sokoban searches stage 3 depth-first on the host; here it is `walks` parallel uniform
random reverse walks of `walk_len` steps (fixed shapes), and the retry is a `while_loop`,
so the whole generator jits and vmaps. Grid convention: `[H, W]`, position = (row, col).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

# up, down, left, right as (drow, dcol); RAGEN/gym-sokoban action order.
DIRS = jnp.array([[-1, 0], [1, 0], [0, -1], [0, 1]], jnp.int32)
_MASKS = jnp.array([
    [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
    [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
    [[0, 0, 0], [0, 1, 1], [0, 1, 0]]], jnp.int32)
_WALK_DIRS = jnp.array([[1, 0], [0, 1], [-1, 0], [0, -1]], jnp.int32)


def topology(key: jax.Array, h: int, w: int, num_steps: int, p_change: float = 0.35) -> jax.Array:
  """`floor [h, w] bool` carved by gym-sokoban's random walk (room_topology_generation)."""
  k_dir, k_pos, k_walk = jax.random.split(key, 3)
  rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
  pos0 = jnp.stack([jax.random.randint(k_pos, (), 1, h), jax.random.randint(jax.random.fold_in(k_pos, 1), (), 1, w)])
  d0 = _WALK_DIRS[jax.random.randint(k_dir, (), 0, 4)]

  def body(carry, k):
    pos, d, level = carry
    k1, k2, k3 = jax.random.split(k, 3)
    d = jnp.where(jax.random.uniform(k1) < p_change, _WALK_DIRS[jax.random.randint(k2, (), 0, 4)], d)
    pos = pos + d
    pos = jnp.stack([jnp.clip(pos[0], 1, h - 2), jnp.clip(pos[1], 1, w - 2)])
    mask = _MASKS[jax.random.randint(k3, (), 0, 5)]
    dr, dc = rows - pos[0] + 1, cols - pos[1] + 1
    inside = (dr >= 0) & (dr < 3) & (dc >= 0) & (dc < 3)
    level = level + jnp.where(inside, mask[jnp.clip(dr, 0, 2), jnp.clip(dc, 0, 2)], 0)
    return (pos, d, level), None

  (_, _, level), _ = jax.lax.scan(body, (pos0, d0, jnp.zeros((h, w), jnp.int32)),
                                  jax.random.split(k_walk, num_steps))
  border = (rows == 0) | (rows == h - 1) | (cols == 0) | (cols == w - 1)
  return (level > 0) & ~border


def _place(key, floor, num_boxes):
  """Distinct random floor cells: player `[2]` and targets `[num_boxes, 2]`; ok if enough floor."""
  h, w = floor.shape
  score = jnp.where(floor.ravel(), jax.random.uniform(key, (h * w,)), -1.0)
  _, idx = jax.lax.top_k(score, num_boxes + 1)
  cells = jnp.stack([idx // w, idx % w], axis=-1).astype(jnp.int32)
  ok = jnp.sum(floor) > num_boxes + 1   # gym-sokoban needs strictly more free cells
  return cells[0], cells[1:], ok


def _reverse_play(key, walls, player, targets, walk_len):
  """One random reverse walk; returns the best-scoring `(score, player, boxes [nb, 2])`."""
  h, w = walls.shape
  nb = targets.shape[0]

  def occupied(boxes, p):
    return jnp.any(jnp.all(boxes == p[None, :], axis=-1))

  def blocked(boxes, p):
    inside = (p[0] >= 0) & (p[0] < h) & (p[1] >= 0) & (p[1] < w)
    return ~inside | walls[jnp.clip(p[0], 0, h - 1), jnp.clip(p[1], 0, w - 1)] | occupied(boxes, p)

  def body(carry, k):
    player, boxes, swaps, best = carry
    a = jax.random.randint(k, (), 0, 8)
    d = DIRS[a % 4]
    nxt = player + d
    move = ~blocked(boxes, nxt)
    behind = player - d
    hit = jnp.all(boxes == behind[None, :], axis=-1)                   # [nb]
    pull = move & (a < 4) & jnp.any(hit)
    boxes = jnp.where((pull & hit)[:, None], player[None, :], boxes)
    # gym-sokoban's DFS passes the parent's `last_pull` down unchanged, so in effect every
    # pull counts as a swap; we keep that, as it is what shapes its levels (longer pulls).
    swaps = swaps + pull.astype(jnp.int32)
    player = jnp.where(move, nxt, player)
    # gym-sokoban scores 0 unless every target is uncovered (no box, no player on it).
    covered = jnp.any(jnp.all(boxes[:, None, :] == targets[None, :, :], axis=-1)) | \
        jnp.any(jnp.all(player[None, :] == targets, axis=-1))
    score = jnp.where(covered, 0, swaps * jnp.sum(jnp.abs(boxes - targets)))
    better = score > best[0]
    best = jax.tree.map(lambda n, o: jnp.where(better, n, o), (score, player, boxes), best)
    return (player, boxes, swaps, best), None

  init_best = (jnp.int32(0), player, targets)
  carry = (player, targets, jnp.int32(0), init_best)
  (_, _, _, best), _ = jax.lax.scan(body, carry, jax.random.split(key, walk_len))
  return best


def generate(key: jax.Array, h: int, w: int, num_boxes: int, *, num_steps: int | None = None,
             walks: int = 4, walk_len: int = 300, p_change: float = 0.35, max_tries: int = 64):
  """A solvable level: `(walls [h,w] bool, targets [h,w] bool, boxes [h,w] bool, player [2] int32)`.

  num_steps: topology walk length; gym-sokoban's SokobanEnv uses int(1.7 * (h + w)).
  Retries (new topology) until reverse play moved a box; after `max_tries` the last attempt
  is returned (its boxes may still sit on their targets: an already-solved level).
  """
  num_steps = int(1.7 * (h + w)) if num_steps is None else num_steps
  rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]

  def attempt(k):
    k_top, k_place, k_play = jax.random.split(k, 3)
    floor = topology(k_top, h, w, num_steps, p_change)
    player, targets, ok = _place(k_place, floor, num_boxes)
    scores, players, boxes = jax.vmap(lambda kk: _reverse_play(kk, ~floor, player, targets, walk_len))(
        jax.random.split(k_play, walks))
    i = jnp.argmax(scores)
    return floor, targets, boxes[i], players[i], ok & (scores[i] > 0)

  def cond(c):
    return ~c[0] & (c[1] < max_tries)

  def body(c):
    _, t, k, _ = c
    k, sub = jax.random.split(k)
    floor, targets, boxes, player, ok = attempt(sub)
    return ok, t + 1, k, (floor, targets, boxes, player)

  shapes = (jnp.zeros((h, w), bool), jnp.zeros((num_boxes, 2), jnp.int32),
            jnp.zeros((num_boxes, 2), jnp.int32), jnp.zeros((2,), jnp.int32))
  _, _, _, (floor, targets, boxes, player) = jax.lax.while_loop(
      cond, body, (jnp.bool_(False), jnp.int32(0), key, shapes))

  def to_grid(cells):
    return jnp.any((rows[None] == cells[:, 0, None, None]) & (cols[None] == cells[:, 1, None, None]), axis=0)

  return ~floor, to_grid(targets), to_grid(boxes), player
