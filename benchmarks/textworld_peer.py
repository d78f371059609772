"""The TextWorld peer of the worlds benchmark (issue 18): a generated text game stepped by
the `textworld` package (Cote et al., 2018, arXiv:1806.11532), one env on one CPU thread.

`textworld_steps_per_s(n_steps, seed)` makes (or reuses from a cache folder) a game of about
a small ALFWorld house's size with TextWorld's own generator, the Python API of
`tw-make custom --world-size 5 --nb-objects 20 --quest-length 6 --seed S` (offline: the
Inform 7 compiler ships with the wheel), then times two ways of stepping it with random
admissible commands, episodes reset after `max_episode_steps` or when the game ends:
  step_admissible  `env.step` with `EnvInfos(admissible_commands=True)`: what an agent loop
                   that offers the model its valid commands (as ALFWorld's) pays per step.
  step             `env.step` with no extra infos, replaying the very same commands (the
                   feedback of every step is compared up to whitespace: `replay_matches`), so
                   the difference is what computing the admissible commands costs.
Only `env.step` is inside the timer: the command choice, resets and bookkeeping are not.
`benchmarks/worlds.py` calls the function next to our jitted worlds and their plain-Python
ports; `python benchmarks/textworld_peer.py` prints (and with --out writes) its JSON.
Needs the `worlds-bench` extra (`pip install -r requirements-bench.txt`).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "agent_rl_textworld_games")
RESET = None  # marks an episode boundary in the recorded command stream


def _textworld():
  try:
    import textworld
  except ImportError as e:
    raise ImportError("benchmarks/textworld_peer.py needs the `textworld` package: "
                      "pip install -r requirements-bench.txt") from e
  return textworld


def _check_int(name: str, value, low: int) -> int:
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise ValueError(f"textworld_steps_per_s: {name} must be an int >= {low}, got {value!r}")
  return value


def make_game(seed: int, *, world_size: int = 5, nb_objects: int = 20, quest_length: int = 6,
              cache_dir: str = DEFAULT_CACHE) -> tuple[str, float]:
  """(path of the compiled .z8 game, seconds spent generating it; 0.0 when cached).

  The game's file name holds every generation setting, so a cached file is that game."""
  textworld = _textworld()
  from textworld.generator import compile_game, make_game as tw_make_game
  name = f"tw_ws{world_size}_no{nb_objects}_ql{quest_length}_s{seed}"
  path = os.path.join(cache_dir, name + ".z8")
  if os.path.exists(path) and os.path.exists(os.path.join(cache_dir, name + ".json")):
    return path, 0.0
  os.makedirs(cache_dir, exist_ok=True)
  opts = textworld.GameOptions()  # the settings `tw-make custom` sets from its flags
  opts.seeds = seed
  opts.nb_rooms, opts.nb_objects, opts.quest_length = world_size, nb_objects, quest_length
  opts.path, opts.file_ext, opts.force_recompile = path, ".z8", True
  t = time.perf_counter()
  compiled = compile_game(tw_make_game(opts), opts)
  return compiled, time.perf_counter() - t


def _game_stats(path: str) -> dict:
  """Rooms, objects (non-room, non-player entities) and walkthrough length of a game."""
  from textworld import Game
  game = Game.load(os.path.splitext(path)[0] + ".json")
  objects = [e for e in game.world.entities if e.type not in ("r", "P", "I")]
  return {"rooms": len(game.world.rooms), "objects": len(objects),
          "walkthrough_len": len(game.walkthrough or [])}


def _words(text: str) -> str:
  """Feedback up to whitespace (the interpreter's blank lines differ once TextWorld has run
  its extra commands for the admissible set)."""
  return " ".join(text.split())


def _timed_steps(env, commands):
  """Steps `env` through `commands` (RESET entries reset it); returns (ns inside env.step,
  steps, feedback list). The first reset is untimed too."""
  env.reset()
  total, n, feedback = 0, 0, []
  for cmd in commands:
    if cmd is RESET:
      env.reset()
      continue
    t = time.perf_counter_ns()
    gs, _, _ = env.step(cmd)
    total += time.perf_counter_ns() - t
    n += 1
    feedback.append(_words(gs.feedback))
  return total, n, feedback


def _admissible_run(env, n_steps: int, seed: int, max_episode_steps: int):
  """n_steps random admissible commands; returns (ns inside env.step, recorded command
  stream, feedback list, episodes, mean number of admissible commands)."""
  rng = random.Random(seed)
  gs = env.reset()
  commands, feedback = [], []
  total, episodes, in_episode, n_adm = 0, 1, 0, 0
  for _ in range(n_steps):
    cmd = rng.choice(gs.admissible_commands)
    n_adm += len(gs.admissible_commands)
    t = time.perf_counter_ns()
    gs, _, done = env.step(cmd)
    total += time.perf_counter_ns() - t
    commands.append(cmd)
    feedback.append(_words(gs.feedback))
    in_episode += 1
    if done or in_episode >= max_episode_steps:
      commands.append(RESET)
      gs, episodes, in_episode = env.reset(), episodes + 1, 0
  return total, commands, feedback, episodes, n_adm / n_steps


def textworld_steps_per_s(n_steps: int, seed: int, *, world_size: int = 5, nb_objects: int = 20,
                          quest_length: int = 6, max_episode_steps: int = 50,
                          cache_dir: str = DEFAULT_CACHE) -> dict:
  """Steps/s and ns/step of TextWorld's `env.step` on a generated game (see the module doc).

  n_steps: timed steps per mode; seed: the game's generation seed and the command choice's.
  Returns a JSON-ready dict: `step_steps_per_s`, `step_ns_per_step` (no extra infos),
  `step_admissible_steps_per_s`, `step_admissible_ns_per_step` (admissible commands
  requested), `admissible_overhead_ns_per_step`, the game's settings and size, `episodes`,
  `mean_admissible_commands`, `replay_matches`, `generate_s` and the package version.
  """
  _check_int("n_steps", n_steps, 1)
  _check_int("seed", seed, 0)
  _check_int("max_episode_steps", max_episode_steps, 1)
  textworld = _textworld()
  path, gen_s = make_game(seed, world_size=world_size, nb_objects=nb_objects,
                          quest_length=quest_length, cache_dir=cache_dir)
  adm_env = textworld.start(path, request_infos=textworld.EnvInfos(admissible_commands=True))
  try:
    adm_ns, commands, adm_feedback, episodes, mean_adm = _admissible_run(
        adm_env, n_steps, seed, max_episode_steps)
  finally:
    adm_env.close()
  plain_env = textworld.start(path, request_infos=textworld.EnvInfos())
  try:
    plain_ns, n, plain_feedback = _timed_steps(plain_env, commands)
  finally:
    plain_env.close()
  assert n == n_steps
  out = {"peer": "textworld", "textworld_version": textworld.__version__, "game": path,
         "world_size": world_size, "nb_objects": nb_objects, "quest_length": quest_length,
         "seed": seed, **_game_stats(path), "n_steps": n_steps,
         "max_episode_steps": max_episode_steps, "episodes": episodes,
         "mean_admissible_commands": mean_adm, "replay_matches": plain_feedback == adm_feedback,
         "generate_s": gen_s}
  for mode, ns in (("step", plain_ns), ("step_admissible", adm_ns)):
    out[f"{mode}_ns_per_step"] = ns / n_steps
    out[f"{mode}_steps_per_s"] = 1e9 * n_steps / ns
  out["admissible_overhead_ns_per_step"] = (adm_ns - plain_ns) / n_steps
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--steps", type=int, default=2000, help="timed steps per mode")
  ap.add_argument("--seed", type=int, default=1)
  ap.add_argument("--quick", action="store_true", help="200 steps (smoke run)")
  ap.add_argument("--out", default=None, help="also write the JSON here")
  args = ap.parse_args()
  res = textworld_steps_per_s(200 if args.quick else args.steps, args.seed)
  if args.out:
    from results_io import write_json  # benchmarks/ is the script's folder
    write_json(args.out, res)
  else:
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
  main()
