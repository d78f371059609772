"""TextWorld-Express games as a `TextGame` (Jansen & Cote, 2022, arXiv:2208.01174).

TextWorld-Express re-implements CookingWorld, TextWorld Commonsense (twc), Coin Collector,
Map Reader, Arithmetic, Sorting, Simon Says and Pecking Order in Scala (a JVM behind py4j),
thousands of steps per second. A game is (game name, generation params, fold, seed): the
package fixes disjoint seed folds train / dev / test, so a task id is "<fold>/<seed>" and the
panel of a split is its fold's seeds (the first `num_tasks` of them when set).

Reward: TWX's `score` is a running total in [0, 1] (negative after a failure in some games),
the step's reward is its change. won / lost are the game's `tasksuccess` / `taskfailure`.
State key: TWX exposes the world only as a JSON object tree fetched through a temp file, an
extra JVM round trip that costs as much as a step, so the key is None (the host env hashes
the observation text) unless `state_from_tree=True`. Games are deterministic given the seed:
`reset`'s seed does not change the game.

The adapter talks to TWX's Scala `PythonInterface` (the server the package's Python wrapper
calls) on one JVM shared by every game of the process (jvm.py), not through the wrapper's
`TextWorldExpressEnv`, which starts a JVM per game and makes a second JVM call on every step
(the task description, which we fetch once per reset).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from typing import Optional, Sequence

from agent_rl.envs.host import jvm
from agent_rl.envs.host.game import ADAPTERS, GameObs, GameStep

FOLDS = ("train", "dev", "test")
INSTRUCTION = ("You are playing a TextWorld-Express text game ({game}). The first observation "
               "states your task. Reply with one text command per turn, for example: look "
               "around, open fridge, take cookbook.")


def require_java(package: str) -> str:
  """Path of the `java` executable, or a RuntimeError naming the Debian package to install."""
  java = shutil.which("java")
  if java is None:
    raise RuntimeError(f"host game {package!r} runs a JVM but `java` is not on PATH: "
                       f"apt-get install openjdk-17-jre-headless (Java 17)")
  return java


def import_twx():
  try:
    import textworld_express
  except ImportError as e:
    raise ImportError("host game 'textworld_express' needs the textworld-express package: pip "
                      "install textworld-express==1.1.0 (or bash launch/install.sh host)") from e
  return textworld_express


def text_key(*texts: str) -> bytes:
  """16-byte digest of texts (a state key built from text the package already returned)."""
  return hashlib.blake2b("\x00".join(texts).encode(), digest_size=16).digest()


@ADAPTERS.register("textworld_express")
class TextWorldExpressGame:
  """One TWX game family. game: a TWX game name ("cookingworld", "twc", "coin", ...);
  params: TWX generation params ("numLocations=1,numIngredients=2,..."; "" = the game's
  defaults); num_tasks: cap on the seeds per fold (None = the whole fold);
  state_from_tree: key states by the world's object tree (one extra JVM call a step)."""

  def __init__(self, *, game: str = "cookingworld", params: str = "",
               num_tasks: Optional[int] = None, state_from_tree: bool = False):
    import_twx()
    from textworld_express.constants import GAME_NAMES
    if game not in GAME_NAMES:
      raise ValueError(f"textworld_express.game {game!r} is not a TWX game; known: {GAME_NAMES}")
    if not isinstance(params, str):
      raise ValueError(f"textworld_express.params must be a str like 'numLocations=1', got {params!r}")
    if num_tasks is not None and (isinstance(num_tasks, bool) or not isinstance(num_tasks, int)
                                  or num_tasks < 1):
      raise ValueError(f"textworld_express.num_tasks must be None or an int >= 1, got {num_tasks!r}")
    require_java("textworld_express")
    from textworld_express.constants import BASEPATH, JAR_PATH
    self.game, self.params, self.num_tasks = game, params, num_tasks
    self.state_from_tree = state_from_tree
    self._jar, self._server, self._tree_file = JAR_PATH, None, None
    gateway = jvm.acquire(JAR_PATH, cwd=BASEPATH)
    try:
      self._server = gateway.jvm.textworldexpress.runtime.PythonInterface()
    except Exception:
      jvm.release(JAR_PATH)
      raise
    msg = self._server.load(game, params)
    if not msg:  # TWX accepts some bad values silently ("numLocations=x"); its games then say:
      first = json.loads(self._server.generateNewGameJSON(0, "train", False))["observation"]
      msg = first if first.startswith("ERROR") else ""
    if msg:
      self.close()
      raise ValueError(f"textworld_express.params {params!r} for {game!r}: {msg.strip()}")
    self._seeds = {"train": self._server.getSeedsTrain, "dev": self._server.getSeedsDev,
                   "test": self._server.getSeedsTest}
    self._score = 0.0
    self._task = ""
    self._ready = False

  def task_ids(self, split: str) -> Sequence[str]:
    if split not in FOLDS:
      raise ValueError(f"textworld_express: unknown split {split!r}; TWX folds are {FOLDS}")
    seeds = list(self._seeds[split]())
    return [f"{split}/{s}" for s in seeds[:self.num_tasks]]

  @staticmethod
  def parse_task(task_id: str) -> tuple[str, int]:
    fold, _, seed = task_id.partition("/")
    if fold not in FOLDS or not seed.isdigit():
      raise ValueError(f"textworld_express: task id {task_id!r} is not '<fold>/<seed>' with a "
                       f"fold in {FOLDS}")
    return fold, int(seed)

  def instruction(self) -> str:
    """What every game of the family asks (the task itself opens the first observation)."""
    return INSTRUCTION.format(game=self.game)

  def goal(self) -> str:
    """The current game's task description (after a reset)."""
    return self._task

  def _tree_key(self) -> bytes:
    """Digest of the world's object tree (TWX writes it to a file we name)."""
    if self._tree_file is None:
      self._tree_file = tempfile.NamedTemporaryFile(prefix="twx_tree_")
    msg = self._server.getObjectTree(self._tree_file.name)
    if msg:
      raise RuntimeError(f"textworld_express: object tree: {msg}")
    self._tree_file.seek(0)
    return text_key(json.dumps(json.loads(self._tree_file.read()), sort_keys=True))

  def _obs(self, text: str, infos) -> GameObs:
    key = self._tree_key() if self.state_from_tree else None
    return GameObs(text=text, admissible=tuple(infos["validActions"]), state_key=key)

  def reset(self, task_id: str, seed: int, *, gold: bool = False) -> GameObs:
    del seed  # the game is fixed by its TWX seed (in the task id)
    fold, game_seed = self.parse_task(task_id)
    infos = json.loads(self._server.generateNewGameJSON(game_seed, fold, gold))
    self._task = self._server.getTaskDescription()
    self._score, self._ready = float(infos["score"]), True
    # TWX's first observation is the room alone; its task description is a separate call,
    # so it opens the text (the agent must see its goal; the TWX paper's agents get it too).
    return self._obs(f"{self._task}\n\n{infos['observation']}", infos)

  def step(self, command: str) -> GameStep:
    if not self._ready:
      raise RuntimeError("textworld_express: step before reset")
    # The model's text goes to the game as it is (TWX answers unknown commands itself).
    infos = json.loads(self._server.stepJSON(" ".join(command.split())))
    text, score = infos["observation"], float(infos["score"])
    delta, self._score = score - self._score, score
    won, lost = bool(infos["tasksuccess"]), bool(infos["taskfailure"])
    return GameStep(obs=self._obs(text, infos), score_delta=delta, done=won or lost, won=won,
                    lost=lost, extras={"score": score})

  def expert(self, task_id: str, seed: int) -> list[str]:
    """TWX's gold action sequence for the game (leaves the game reset to its start)."""
    self.reset(task_id, seed, gold=True)
    return list(self._server.getGoldActionSequence())

  def close(self) -> None:
    if getattr(self, "_server", None) is not None:
      server, self._server = self._server, None
      jvm.release(self._jar, server)
    if getattr(self, "_tree_file", None) is not None:
      self._tree_file.close()
      self._tree_file = None
