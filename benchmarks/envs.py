"""Env throughput: our jitted+vmapped text envs vs RAGEN's Python loop, jumanji and gymnasium.

Side by side in one run, written to benchmarks/results/envs.json:
  sokoban_step   Sokoban 6x6 / 1 box, random actions, auto-reset to the level's start, text
                 observation rendered and folded into a checksum (so XLA cannot drop it):
                 ours at batch 1, 64, 1024 vs (a) RAGEN's way: gym-sokoban's SokobanEnv stepped
                 in a Python loop + RAGEN's text render, and (b) jumanji's JAX Sokoban (grid obs),
                 reset like ours and, for reference, through its own auto-reset wrapper and
                 stepped from a Python loop (how the issue's ~1.17 M figure was measured).
  sokoban_gen    new levels per second: ours (vmapped reverse-play generator) vs gym-sokoban's
                 generate_room (host DFS), both at RAGEN's 6x6, 1 box, num_steps=int(1.7*12).
  frozenlake     4x4 and 8x8 slippery, random actions, auto-reset, text obs: ours vs
                 gymnasium FrozenLake-v1 (single env, gym.make wrappers).
Run: `python benchmarks/envs.py [--quick]`. CPU numbers on a shared 2-core box are far below
accelerator numbers; the JSON records the backend.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time
import types

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_seconds  # noqa: E402
import jax.numpy as jnp
import numpy as np

from agent_rl import envs
from agent_rl.envs.base import Text

RESULTS = os.path.join(os.path.dirname(__file__), "results", "envs.json")


def _tokenizer():
  """A character-level tokenizer (envs are tokenizer-agnostic; this one needs no training)."""
  specials = ("<answer>", "</answer>")
  vocab = ["<pad>"] + list(specials) + [chr(c) for c in range(32, 127)] + ["√", "\n"]
  index = {p: i for i, p in enumerate(vocab)}

  class CharTok:
    pad_id = 0

    def encode(self, text):
      out, i = [], 0
      while i < len(text):
        s = next((s for s in specials if text.startswith(s, i)), None)
        out.append(index[s or text[i]])
        i += len(s) if s else 1
      return out

    def decode(self, ids):
      return "".join(vocab[int(i)] for i in ids if int(i))

    def byte_table(self):
      rows = [b""] + [p.encode() for p in vocab[1:]]
      t = np.zeros((len(rows), max(map(len, rows))), np.uint8)
      for i, r in enumerate(rows):
        t[i, :len(r)] = np.frombuffer(r, np.uint8)
      return t, np.array([len(r) for r in rows], np.int32)

  return CharTok()


def _action_bank(tok, words, length=16):
  toks = np.zeros((len(words), length), np.int32)
  lens = np.zeros((len(words),), np.int32)
  for i, w in enumerate(words):
    ids = tok.encode(f"<answer>{w}</answer>")
    toks[i, :len(ids)], lens[i] = ids, len(ids)
  return jnp.asarray(toks), jnp.asarray(lens)


def _timed(fn, *args, repeats):
  return best_seconds(fn, *args, repeats=repeats)


def ours_steps_per_s(env, tasks, batch, steps, words, repeats, step=None):
  """Random actions with auto-reset; every observation is folded into a checksum.

  step: `(states, actions) -> (states, obs, reward, done, info)` for a batch; default the
  env's vmapped step (the breakdown passes pieces of it).
  """
  bank_toks, bank_lens = _action_bank(env.tokenizer, words)
  step = jax.vmap(env.step) if step is None else step

  @jax.jit
  def run(key, tasks):
    states, _ = jax.vmap(env.reset)(jax.random.split(key, batch), tasks)
    starts = states

    def body(carry, k):
      states, check = carry
      a = jax.random.randint(k, (batch,), 0, len(words))
      acts = Text(tokens=bank_toks[a], length=bank_lens[a])
      states, obs, reward, done, info = step(states, acts)
      check = check + jnp.sum(obs.tokens * (jnp.arange(obs.tokens.shape[1]) + 1), dtype=jnp.uint32)
      states = jax.tree.map(lambda s, r: jnp.where(done.reshape((-1,) + (1,) * (s.ndim - 1)), r, s),
                            states, starts)
      return (states, check + jnp.sum(reward).astype(jnp.uint32)), None

    (_, check), _ = jax.lax.scan(body, (states, jnp.uint32(0)), jax.random.split(key, steps))
    return check

  sec = _timed(run, jax.random.key(0), tasks, repeats=repeats)
  return batch * steps / sec


def sokoban_breakdown(env, tasks, batch, steps, words, repeats):
  """ns per env-step at `batch` of the pieces of a Sokoban step, each in the same loop as
  `ours_steps_per_s` (random actions, checksum, auto-reset), to show where the time goes.

  loop: the harness alone (one action token as the observation); parse: + parsing the action
  text; render: + moving the player by the parsed action and rendering the observation;
  full: env.step (parse, dynamics, render, state hash, rewards).
  """
  from agent_rl.envs import sokoban

  def fake(states, parsed):
    n = states.player.shape[0]
    zero = jnp.zeros((n,), jnp.float32)
    info = {"state_hash": jnp.zeros((n,), jnp.uint32)}
    obs = Text(tokens=jnp.maximum(parsed, 0)[:, :1], length=jnp.ones((n,), jnp.int32))
    return states, obs, zero, jnp.zeros((n,), bool), info

  def parse(states, acts):
    return fake(states, jax.vmap(env.parser)(acts).ids)

  def render(states, acts):
    ids = jax.vmap(env.parser)(acts).ids[:, 0]
    player = jnp.stack([1 + (states.player[:, 0] + ids) % (env.dim_room[0] - 2), states.player[:, 1]], 1)
    states = states.replace(player=player)
    codes = jax.vmap(sokoban.cell_codes)(states.walls, states.targets, states.boxes, player)
    _, obs, *rest = fake(states, ids[:, None])
    return (states, jax.vmap(env.grid.render)(codes), *rest)

  out = {}
  for name, fn in (("loop", lambda s, a: fake(s, a.tokens[:, 1:2])), ("parse", parse),
                   ("render", render), ("full", None)):
    out[name] = 1e9 / ours_steps_per_s(env, tasks, batch, steps, words, repeats, fn)
  return out


def _gym_sokoban():
  """Imports gym-sokoban; its __init__ needs pkg_resources (gone from new setuptools)."""
  if "pkg_resources" not in sys.modules:
    def resource_filename(pkg, path):
      return os.path.join(os.path.dirname(importlib.util.find_spec(pkg).origin), path)
    sys.modules["pkg_resources"] = types.SimpleNamespace(resource_filename=resource_filename)
  from gym_sokoban.envs import room_utils, sokoban_env
  return room_utils, sokoban_env


def ragen_python_steps_per_s(seconds):
  """RAGEN's Sokoban: gym-sokoban's env.step (push actions 1..4) + RAGEN's text render per step."""
  _, sokoban_env = _gym_sokoban()
  lookup = {0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P", 6: "S"}

  class RagenSokoban(sokoban_env.SokobanEnv):
    def render_text(self):
      room = np.where((self.room_state == 5) & (self.room_fixed == 2), 6, self.room_state)
      return "\n".join("".join(lookup.get(c, "?") for c in row) for row in room.tolist())

  env = RagenSokoban(dim_room=(6, 6), max_steps=100, num_boxes=1)
  np.random.seed(0)
  random.seed(0)
  env.reset()
  start = (env.room_state.copy(), env.room_fixed.copy(), env.box_mapping, env.player_position.copy())
  n, check, t = 0, 0, time.perf_counter()
  while time.perf_counter() - t < seconds:
    _, _, done, _ = env.step(random.randint(1, 4))[:4]
    check += len(env.render_text())
    n += 1
    if done:   # auto-reset to the same level, as ours does
      env.room_state, env.room_fixed = start[0].copy(), start[1].copy()
      env.player_position, env.num_env_steps, env.boxes_on_target = start[3].copy(), 0, 0
  return n / (time.perf_counter() - t)


def jumanji_steps_per_s(batch, steps, repeats, own_wrapper=False):
  """jumanji's JAX Sokoban (10x10 levels from its SimpleSolveGenerator; the default generator
  downloads Boxoban). Reset as ours (back to the start state), or with `own_wrapper` through
  jumanji's `VmapAutoResetWrapper`, which starts a new generated level after each episode."""
  from jumanji.environments import Sokoban
  from jumanji.environments.routing.sokoban.generator import SimpleSolveGenerator
  from jumanji.wrappers import VmapAutoResetWrapper
  env = Sokoban(generator=SimpleSolveGenerator())
  wrapped = VmapAutoResetWrapper(env)

  @jax.jit
  def run(key):
    states, _ = (wrapped.reset if own_wrapper else jax.vmap(env.reset))(jax.random.split(key, batch))
    starts = states

    def body(carry, k):
      states, check = carry
      a = jax.random.randint(k, (batch,), 0, 4)
      if own_wrapper:
        states, ts = wrapped.step(states, a)
        return (states, check + jnp.sum(ts.observation.grid, dtype=jnp.uint32)), None
      states, ts = jax.vmap(env.step)(states, a)
      check = check + jnp.sum(ts.observation.grid, dtype=jnp.uint32)
      done = ts.last()
      states = jax.tree.map(lambda s, r: jnp.where(done.reshape((-1,) + (1,) * (s.ndim - 1)), r, s),
                            states, starts)
      return (states, check), None

    (_, check), _ = jax.lax.scan(body, (states, jnp.uint32(0)), jax.random.split(key, steps))
    return check

  return batch * steps / _timed(run, jax.random.key(0), repeats=repeats)


def jumanji_python_loop_steps_per_s(batch, steps):
  """jumanji stepped the way its README shows: `jax.jit(env.step)` called from a Python loop
  (here with its VmapAutoResetWrapper), one dispatch per batch step. This reproduces the
  ~1.17 M steps/s the issue quotes for jumanji; the compiled-loop rate above is the fair peer."""
  from jumanji.environments import Sokoban
  from jumanji.environments.routing.sokoban.generator import SimpleSolveGenerator
  from jumanji.wrappers import VmapAutoResetWrapper
  env = VmapAutoResetWrapper(Sokoban(generator=SimpleSolveGenerator()))
  state, _ = jax.jit(env.reset)(jax.random.split(jax.random.key(0), batch))
  step = jax.jit(env.step)
  acts = jax.random.randint(jax.random.key(1), (steps, batch), 0, 4)
  state, ts = step(state, acts[0])
  jax.block_until_ready(ts)
  t = time.perf_counter()
  for i in range(steps):
    state, ts = step(state, acts[i])
  jax.block_until_ready(ts.observation.grid)
  return batch * steps / (time.perf_counter() - t)


def ours_levels_per_s(env, batch, repeats):
  gen = jax.jit(jax.vmap(env.sample_task))
  keys = jax.random.split(jax.random.key(1), batch)
  return batch / _timed(gen, keys, repeats=repeats)


def gym_sokoban_levels_per_s(seconds):
  room_utils, _ = _gym_sokoban()
  np.random.seed(0)
  random.seed(0)
  n, t = 0, time.perf_counter()
  while time.perf_counter() - t < seconds:
    try:
      room_utils.generate_room(dim=(6, 6), num_steps=int(1.7 * 12), num_boxes=1)
    except (RuntimeError, RuntimeWarning):   # gym-sokoban's own retry signal, counted as work
      pass
    n += 1
  return n / (time.perf_counter() - t)


def gymnasium_frozenlake_steps_per_s(size, seconds):
  import gymnasium as gym
  env = gym.make("FrozenLake-v1", map_name=f"{size}x{size}", is_slippery=True)
  env.reset(seed=0)
  rng = random.Random(0)
  n, t = 0, time.perf_counter()
  while time.perf_counter() - t < seconds:
    _, _, term, trunc, _ = env.step(rng.randrange(4))
    n += 1
    if term or trunc:
      env.reset()
  return n / (time.perf_counter() - t)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--quick", action="store_true", help="fewer steps (smoke run)")
  ap.add_argument("--out", default=RESULTS)
  args = ap.parse_args()
  steps, reps, secs = (20, 3, 2.0) if args.quick else (100, 5, 5.0)
  tok = _tokenizer()
  res = {"backend": jax.default_backend(), "device": str(jax.devices()[0]), "steps_per_call": steps}

  sok = envs.make("sokoban", tokenizer=tok, dim_room=(6, 6), num_boxes=1, max_steps=100)
  pool = jax.jit(jax.vmap(sok.sample_task))(jax.random.split(jax.random.key(0), 1024))
  words = ["Up", "Down", "Left", "Right"]
  s = res["sokoban_step"] = {}
  for b in (1, 64, 1024):
    sub = jax.tree.map(lambda x: x[:b], pool)
    s[f"ours_b{b}"] = ours_steps_per_s(sok, sub, b, steps, words, reps)
  s["ragen_python_text"] = ragen_python_steps_per_s(secs)
  s["jumanji_b1024_grid_obs"] = jumanji_steps_per_s(1024, steps, reps)
  s["jumanji_b1024_own_autoreset_wrapper"] = jumanji_steps_per_s(1024, steps, reps, own_wrapper=True)
  s["jumanji_b1024_python_loop"] = jumanji_python_loop_steps_per_s(1024, 2 * steps)
  s["ratio_ours_b1024_vs_jumanji"] = s["ours_b1024"] / s["jumanji_b1024_grid_obs"]
  s["ratio_ours_b1024_vs_jumanji_python_loop"] = s["ours_b1024"] / s["jumanji_b1024_python_loop"]
  s["ratio_ours_b1024_vs_ragen_python"] = s["ours_b1024"] / s["ragen_python_text"]
  s["ns_per_step_b1024"] = sokoban_breakdown(sok, pool, 1024, steps, words, reps)
  s["jumanji_ns_per_step_b1024"] = 1e9 / s["jumanji_b1024_grid_obs"]
  print(json.dumps(s, indent=1), flush=True)

  g = res["sokoban_gen"] = {}
  for b in (64, 1024):
    g[f"ours_b{b}_levels_per_s"] = ours_levels_per_s(sok, b, reps)
  g["gym_sokoban_generate_room_per_s"] = gym_sokoban_levels_per_s(secs)
  g["ratio_ours_b1024_vs_gym"] = g["ours_b1024_levels_per_s"] / g["gym_sokoban_generate_room_per_s"]
  print(json.dumps(g, indent=1), flush=True)

  f = res["frozenlake"] = {}
  for size in (4, 8):
    fl = envs.make("frozenlake", tokenizer=tok, size=size, is_slippery=True, max_steps=100 if size == 4 else 200)
    maps = jax.jit(jax.vmap(fl.sample_task))(jax.random.split(jax.random.key(2), 1024))
    for b in (1, 1024):
      f[f"{size}x{size}_ours_b{b}"] = ours_steps_per_s(fl, jax.tree.map(lambda x: x[:b], maps), b, steps,
                                                       ["Left", "Down", "Right", "Up"], reps)
    f[f"{size}x{size}_gymnasium"] = gymnasium_frozenlake_steps_per_s(size, secs)
    f[f"{size}x{size}_ratio_b1024"] = f[f"{size}x{size}_ours_b1024"] / f[f"{size}x{size}_gymnasium"]
  print(json.dumps(f, indent=1), flush=True)

  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as fh:
    json.dump(res, fh, indent=1)
  print("wrote", args.out)


if __name__ == "__main__":
  main()
