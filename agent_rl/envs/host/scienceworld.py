"""ScienceWorld tasks as a `TextGame` (Wang et al., 2022, arXiv:2203.07540).

ScienceWorld simulates 30 grade-school science tasks (boil, melt, grow a plant, test
conductivity, ...) in Scala behind py4j (the jar ships in the wheel; it needs Java 17). Each
task has numbered variations that the package splits into train / dev / test; a task id is
"<task name>/<variation>" and a split's panel is every chosen task's variations of that split
(the first `num_variations` per task when set).

Reward: ScienceWorld's score is a running total on 0-100 (-100 once the task has failed); the
step's reward is its change, so an episode's rewards sum to the final score. won: score 100;
lost: score < 0 (ScienceWorld's failure marker). Admissible actions are the package's
`info["valid"]` (its valid action-object combinations). State key: a digest of the `look`
and inventory text the package returns with every step (the agent's room with every object's
visible state, and what it carries), no extra call. Variations are deterministic: `reset`'s
seed does not change the task.

Determinism: the JVM starts with `jvm.DETERMINISTIC_HASH` (identity hashes all 1). Under
HotSpot's default, the same variation listed the art studio's three wood cups in another
order from one JVM start to the next (1 of 4 tokenizer corpora of `configs/scienceworld.py:
tiny` built under load; every time the JIT's compiler-thread count was changed), and the order
decides which object an ambiguous command picks, so a run's metrics moved with the machine's
load. With it, the corpus is the same byte for byte with dynamic or fixed compiler threads
(tests/envs/host/test_adapters.py) and with the interpreter alone (`-Xint`, measured), and the
run replays (benchmarks/reset_ahead.py's `same_metrics`). Cost on one game: ~10% fewer
steps/s, resets ~0.13 s against ~0.09 s.
"""
from __future__ import annotations

from typing import Optional, Sequence

from agent_rl.envs.host.game import ADAPTERS, GameObs, GameStep
from agent_rl.envs.host.jvm import DETERMINISTIC_HASH, java_options
from agent_rl.envs.host.textworld_express import require_java, text_key

SPLITS = ("train", "dev", "test")
_STEP_LIMIT = 10 ** 9   # the host env owns max_steps
INSTRUCTION = ("You are an agent in ScienceWorld, a simulated house with a science lab, "
               "greenhouse and workshop. The first observation states your task. Reply with one "
               "command per turn, for example: look around, open door to kitchen, focus on "
               "the thermometer, move the pot to the stove.")


def import_scienceworld():
  try:
    import scienceworld
  except ImportError as e:
    raise ImportError("host game 'scienceworld' needs the scienceworld package: pip install "
                      "scienceworld==1.2.3 (or bash launch/install.sh host)") from e
  return scienceworld


@ADAPTERS.register("scienceworld")
class ScienceWorldGame:
  """ScienceWorld over a set of tasks. tasks: task names (None = all 30); num_variations:
  cap on the variations per task and split (None = all); simplifications: ScienceWorld's
  simplification string ("easy", "teleportAction,openDoors", ...; "" = none)."""

  def __init__(self, *, tasks: Optional[Sequence[str]] = None,
               num_variations: Optional[int] = None, simplifications: str = ""):
    sw = import_scienceworld()
    if num_variations is not None and (isinstance(num_variations, bool) or
                                       not isinstance(num_variations, int) or num_variations < 1):
      raise ValueError(f"scienceworld.num_variations must be None or an int >= 1, got "
                       f"{num_variations!r}")
    require_java("scienceworld")
    with java_options(DETERMINISTIC_HASH):
      self._env = sw.ScienceWorldEnv("", envStepLimit=_STEP_LIMIT)
    known = list(self._env.get_task_names())
    tasks = known if tasks is None else list(tasks)
    bad = [t for t in tasks if t not in known]
    if bad or not tasks:
      self.close()
      raise ValueError(f"scienceworld.tasks: unknown or empty {bad or tasks}; known: {known}")
    self.tasks, self.num_variations, self.simplifications = tuple(tasks), num_variations, simplifications
    self._loaded: Optional[tuple[str, int, bool]] = None
    self._score = 0
    self._task = ""

  def task_ids(self, split: str) -> Sequence[str]:
    if split not in SPLITS:
      raise ValueError(f"scienceworld: unknown split {split!r}; ScienceWorld's are {SPLITS}")
    out = []
    for task in self.tasks:
      self._load(task, 0, False)   # the variation lists are per loaded task
      variations = {"train": self._env.get_variations_train, "dev": self._env.get_variations_dev,
                    "test": self._env.get_variations_test}[split]()
      out += [f"{task}/{v}" for v in list(variations)[:self.num_variations]]
    return out

  def _load(self, task: str, variation: int, gold: bool) -> None:
    if self._loaded != (task, variation, gold):
      self._env.load(task, variation, self.simplifications, generateGoldPath=gold)
      self._loaded = (task, variation, gold)

  def parse_task(self, task_id: str) -> tuple[str, int]:
    task, _, variation = task_id.rpartition("/")
    if task not in self.tasks or not variation.isdigit():
      raise ValueError(f"scienceworld: task id {task_id!r} is not '<task>/<variation>' with a "
                       f"task in {self.tasks}")
    return task, int(variation)

  def instruction(self) -> str:
    """What every ScienceWorld task asks (the task itself opens the first observation)."""
    return INSTRUCTION

  def goal(self) -> str:
    """The current task's description (after a reset)."""
    return self._task

  def reset(self, task_id: str, seed: int, *, gold: bool = False) -> GameObs:
    del seed  # a variation is deterministic
    task, variation = self.parse_task(task_id)
    if self._loaded is not None and self._loaded[:2] == (task, variation) and not gold:
      gold = self._loaded[2]                       # a loaded gold path does not change the game
    self._load(task, variation, gold)
    text, info = self._env.reset()
    self._score, self._task = info["score"], info["taskDesc"]
    # The first observation is "look around" alone; the task description is a separate call,
    # so it opens the text (ScienceWorld's agents are given it the same way).
    return GameObs(text=f"{self._task}\n\n{text}", admissible=tuple(info["valid"]),
                   state_key=text_key(info["look"], info["inv"]))

  def step(self, command: str) -> GameStep:
    if self._loaded is None:
      raise RuntimeError("scienceworld: step before reset")
    text, _, _, info = self._env.step(" ".join(command.split()))
    score = info["score"]
    delta, self._score = score - self._score, score
    won, lost = score >= 100, score < 0
    return GameStep(obs=GameObs(text=text, admissible=tuple(info["valid"]),
                                state_key=text_key(info["look"], info["inv"])),
                    score_delta=float(delta), done=won or lost, won=won, lost=lost,
                    extras={"score": float(score)})

  def expert(self, task_id: str, seed: int) -> list[str]:
    """ScienceWorld's gold action sequence of the variation (leaves the task reset)."""
    self.reset(task_id, seed, gold=True)
    return list(self._env.get_gold_action_sequence())

  def close(self) -> None:
    if getattr(self, "_env", None) is not None:
      self._env.close()
      self._env.close = lambda: None     # its __del__ closes again (see textworld_express)
      self._env = None
