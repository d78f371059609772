"""TextWorld games as a `TextGame` (Cote et al., 2018, arXiv:1806.11532).

Two sources of games:
  game_dir   a directory of compiled games (`*.z8` / `*.ulx`, each with its `.json` beside it,
             as `tw-make` writes them). A split reads `game_dir/<split>/` when that folder
             exists (the TextWorld cooking challenge's train/valid/test layout), else the whole
             `game_dir`, the same panel for every split.
  generated  `game_dir=None`: games made on the fly with TextWorld's own generator
             (`textworld.generator.make_game` + `compile_game`, in-process, offline: Inform 7
             ships in the wheel), `num_games` per split, cached on disk under `cache_dir` by
             (generation seed, settings), so a second run, or a second worker, reuses them.

Reward: TextWorld's `score` is a running total, so the step's reward is its change. The
state key is a digest of the game state's facts (`GameState["_facts"]`, the logic state the
engine tracks: where the player and every object are, what is open or locked), so two
commands that reach one world state share a key (GiGPO's anchor states); it is never None
here. TextWorld games are deterministic: `reset`'s seed does not change the game.
"""
from __future__ import annotations

import glob
import hashlib
import os
import tempfile
import zlib
from typing import Optional, Sequence

from agent_rl.envs.host.game import ADAPTERS, GameObs, GameStep

SPLITS = ("train", "valid", "test")
DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "agent_rl_textworld_games")
_MAX_OPEN = 8          # started games kept per worker (a start loads the game and its interpreter)
INSTRUCTION = ("You are playing a TextWorld text adventure. The first observation tells you "
               "what to do. Reply with one text command per turn, for example: go east, open "
               "the chest, take the key from the table.")


# The infos every step asks the engine for (benchmarks/host_envs.py times the package with them).
REQUEST_INFOS = dict(admissible_commands=True, won=True, lost=True, score=True, max_score=True,
                     objective=True)


def import_textworld():
  """The textworld package, or an ImportError naming the install command."""
  try:
    import textworld
    import textworld.generator  # noqa: F401  (a broken install fails here, not mid-episode)
  except ImportError as e:
    raise ImportError("host game 'textworld' needs the textworld package: pip install "
                      "textworld==1.7.0 (or bash launch/install.sh host)") from e
  return textworld


def clean_command(command: str) -> str:
  """The model's command as one line of printable ASCII without backslashes (the Z-machine
  reads ASCII lines: a newline would submit a second command, other bytes are not in its
  alphabet, a backslash is the interpreter's meta-command prefix)."""
  text = command.encode("ascii", "ignore").decode("ascii")
  # A backslash starts one of dfrotz's own meta-commands (`\p`, `\h`, ...), not game input:
  # model text such as `\p*'` made the interpreter answer "unknown command" without end (an
  # 80 GB log on 2026-12-03, benchmarks/host_envs.py with random actions), so none reaches it.
  text = text.replace("\\", " ")
  return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def facts_key(facts) -> bytes:
  """16-byte digest of a set of logic facts, independent of their order."""
  return hashlib.blake2b("\n".join(sorted(map(str, facts))).encode(), digest_size=16).digest()


def generation_seed(seed: int, split: str, index: int) -> int:
  """The TextWorld generation seed of game `index` of `split` (crc32: splits never share a
  game, and the number does not depend on Python's hash seed)."""
  return zlib.crc32(f"{seed}/{split}/{index}".encode()) % (2 ** 31)


def make_game(gen_seed: int, *, world_size: int, nb_objects: int, quest_length: int,
              cache_dir: str) -> str:
  """Path of the compiled game for (gen_seed, settings); generates it when it is not cached.

  Written under a temporary name and renamed, `.json` first and `.z8` last, so a reader that
  sees the `.z8` sees a complete game even while another worker is writing the same one."""
  name = f"tw_ws{world_size}_no{nb_objects}_ql{quest_length}_s{gen_seed}"
  path = os.path.join(cache_dir, name + ".z8")
  if os.path.exists(path):
    return path
  textworld = import_textworld()
  from textworld.generator import compile_game, make_game as tw_make_game
  os.makedirs(cache_dir, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
    opts = textworld.GameOptions()  # the settings `tw-make custom` sets from its flags
    opts.seeds = gen_seed
    opts.nb_rooms, opts.nb_objects, opts.quest_length = world_size, nb_objects, quest_length
    opts.path, opts.file_ext, opts.force_recompile = os.path.join(tmp, name + ".z8"), ".z8", True
    compiled = compile_game(tw_make_game(opts), opts)
    os.replace(os.path.splitext(compiled)[0] + ".json", os.path.join(cache_dir, name + ".json"))
    os.replace(compiled, path)
  return path


def list_games(folder: str) -> list[str]:
  """Sorted compiled games (`*.z8`, `*.ulx`) directly in `folder`."""
  return sorted(glob.glob(os.path.join(folder, "*.z8")) + glob.glob(os.path.join(folder, "*.ulx")))


@ADAPTERS.register("textworld")
class TextWorldGame:
  """A TextWorld game per task id (see the module doc for the two sources).

  game_dir: folder of compiled games, or None to generate `num_games` per split with
  world_size rooms, nb_objects objects and quests of quest_length steps from `seed`;
  cache_dir: where generated games are kept. Task ids are game paths relative to game_dir
  (so a resumed run finds them on another machine), or "<split>/<index>" (generated).
  """

  def __init__(self, *, game_dir: Optional[str] = None, num_games: int = 8, world_size: int = 3,
               nb_objects: int = 6, quest_length: int = 3, seed: int = 0,
               cache_dir: str = DEFAULT_CACHE):
    self._tw = import_textworld()
    for name, v, low in (("num_games", num_games, 1), ("world_size", world_size, 1),
                         ("nb_objects", nb_objects, 0), ("quest_length", quest_length, 1),
                         ("seed", seed, 0)):
      if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"textworld.{name} must be an int >= {low}, got {v!r}")
    if game_dir is not None and not os.path.isdir(game_dir):
      raise FileNotFoundError(f"textworld.game_dir {game_dir!r} is not a directory")
    self.game_dir, self.num_games, self.seed, self.cache_dir = game_dir, num_games, seed, cache_dir
    self.settings = dict(world_size=world_size, nb_objects=nb_objects, quest_length=quest_length)
    self._infos = self._tw.EnvInfos(**REQUEST_INFOS)
    self._envs: dict[str, object] = {}
    self._env = None
    self._score = 0
    self._objective = ""

  def task_ids(self, split: str) -> Sequence[str]:
    if self.game_dir is None:
      if split not in SPLITS:
        raise ValueError(f"textworld: unknown split {split!r}; generated games have {SPLITS}")
      return [f"{split}/{i}" for i in range(self.num_games)]
    folder = os.path.join(self.game_dir, split)
    folder = folder if os.path.isdir(folder) else self.game_dir
    games = list_games(folder)
    if not games:
      raise FileNotFoundError(f"textworld.game_dir: no games (*.z8, *.ulx) in {folder!r}; make "
                              f"some with `tw-make` or set game_dir=None to generate them")
    return [os.path.relpath(g, self.game_dir) for g in games]

  def game_path(self, task_id: str) -> str:
    """The compiled game file of a task id (generating it when needed)."""
    if self.game_dir is not None:
      return os.path.join(self.game_dir, task_id)
    split, _, index = task_id.partition("/")
    if split not in SPLITS or not index.isdigit():
      raise ValueError(f"textworld: task id {task_id!r} is not '<split>/<index>'")
    return make_game(generation_seed(self.seed, split, int(index)), cache_dir=self.cache_dir,
                     **self.settings)

  def _start(self, path: str):
    env = self._envs.pop(path, None)
    if env is None:
      if not os.path.exists(path):
        raise FileNotFoundError(f"textworld: game file {path!r} does not exist")
      env = self._tw.start(path, request_infos=self._infos)
    self._envs[path] = env                                 # most recently used last
    while len(self._envs) > _MAX_OPEN:
      self._envs.pop(next(iter(self._envs))).close()
    return env

  def instruction(self) -> str:
    """What every TextWorld game asks (the game's own intro, the first observation, states
    its objective)."""
    return INSTRUCTION

  def goal(self) -> str:
    """The current game's objective (after a reset)."""
    return self._objective

  def _obs(self, gs) -> GameObs:
    return GameObs(text=gs.feedback, admissible=tuple(gs["admissible_commands"]),
                   state_key=facts_key(gs["_facts"]))

  def reset(self, task_id: str, seed: int) -> GameObs:
    del seed  # TextWorld games are deterministic
    self._env = self._start(self.game_path(task_id))
    gs = self._env.reset()
    self._score, self._objective = gs["score"], gs["objective"]
    return self._obs(gs)

  def step(self, command: str) -> GameStep:
    if self._env is None:
      raise RuntimeError("textworld: step before reset")
    gs, score, done = self._env.step(clean_command(command))
    delta, self._score = score - self._score, score
    return GameStep(obs=self._obs(gs), score_delta=float(delta), done=bool(done),
                    won=bool(gs["won"]), lost=bool(gs["lost"]),
                    extras={"score": float(score), "max_score": float(gs["max_score"])})

  def expert(self, task_id: str, seed: int) -> list[str]:
    """The game's walkthrough (the generator's quest commands; TextWorld's planner policy from
    the start state where a game has no walkthrough)."""
    del seed
    path = self.game_path(task_id)
    game = self._tw.Game.load(os.path.splitext(path)[0] + ".json")
    if game.walkthrough:
      return list(game.walkthrough)
    env = self._tw.start(path, request_infos=self._tw.EnvInfos(policy_commands=True))
    try:
      return list(env.reset()["policy_commands"])
    finally:
      env.close()

  def close(self) -> None:
    for env in self._envs.values():
      env.close()
    self._envs.clear()
    self._env = None
