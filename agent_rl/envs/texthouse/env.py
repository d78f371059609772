"""TextHouse / TextLab: ALFWorld-like household tasks as a pure-JAX text environment.

ALFWorld (Shridhar et al., 2021, arXiv:2010.03768) played through its TextWorld grammar, with
the late-2024 action syntax ("move {o} to {r}", alfworld/data/alfred.twl2 at commit 1fa7e68):
go to R, open R, close R, take O from R, move O to R, heat / cool / clean O with R, use O,
examine R|O, look, inventory. A turn is `<answer>go to cabinet 1</answer>` (one action).
The six ALFWorld families (pick_and_place, pick_two_obj_and_place, look_at_obj_in_light,
pick_clean/heat/cool_then_place) are drawn per stage; TextHouse has one stage, "textlab"
chains `stages` of them for long-horizon credit (20-40 expert steps at the default 4).

The step is a composition of public pure functions, so benchmarks can time each part:
    verb, obj, rec, valid = env.parse(action)                  # token automaton (parse.py)
    state, event          = env.dynamics(state, verb, obj, rec) # rules + goal tracking
    obs                   = env.render_step(state, event)       # piece gather + compaction
Reward terms (names `reward_names`, weights `reward_weights`, verl-agent's ALFWorld values):
    success    1 on the step that completes the last stage   (weight 10)
    milestone  subgoals newly reached this step              (weight 0: credit kernels read
                                                              info["milestone"] instead)
    format     1 if the turn was not a well-formed action    (weight -0.1)
info extras: milestone (bool), skill_injected (bool), subgoals (int32 reached so far),
stage (int32 stages done), progress (f32, `progress(state)`), applied (bool the action did
something), truncated.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import ENVS, Text, fingerprint, step_limit, validate_fields
from agent_rl.envs.tasks import plan_observations
from agent_rl.envs.texthouse import catalog as C
from agent_rl.envs.texthouse import solver, world
from agent_rl.envs.texthouse.dynamics import Event, advance, transition
from agent_rl.envs.texthouse.parse import HouseParser
from agent_rl.envs.texthouse.text import HouseText

REWARD_NAMES = ("success", "milestone", "format")
EXPERTS = ("planner", "search")  # TextHouse.expert


@ENVS.register("texthouse")
@dataclasses.dataclass(frozen=True)
class TextHouse:
  """`make("texthouse", tokenizer=tok, split="train")`; "textlab" = `stages=4`, 100 steps.

  families / objects: allowed family and object-kind names (None = all); split: "train" or
  "unseen" (held-out goal/target pairs); skill_prob: chance a sampled task has skill_injected;
  list_actions: append "Available actions: ..." (every applicable action) to each observation;
  repeat_goal: repeat the goal line in every observation (for `history="windowed"`, whose
  context keeps the prompt and the last turns but drops the first observation).
  repeat_room: repeat the room's receptacle list ("In the room, you see a cabinet 1, ...") in
  every observation, before the goal line (windowed histories drop the first observation, the
  only other place it is; the searching expert's next receptacle depends on it).
  expert: whose plans `solve` returns (SFT demos): "planner" (reads the true state, walks
  straight to hidden objects) or "search" (sweeps receptacles in the room's order until the
  object is in view, as ALFWorld's hand-coded agent explores; solver.py).
  """
  tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)
  split: str = "train"
  stages: int = 1
  num_objects: int = 10
  max_steps: int = 50
  families: tuple | None = None
  objects: tuple | None = None
  skill_prob: float = 0.0
  list_actions: bool = False
  repeat_goal: bool = False
  repeat_room: bool = False
  expert: str = "planner"
  reward_weights: tuple = (10.0, 0.0, -0.1)
  max_answer_bytes: int = 64
  text: HouseText = dataclasses.field(init=False, repr=False)
  parser: HouseParser = dataclasses.field(init=False, repr=False)

  reward_names = REWARD_NAMES

  def __post_init__(self):
    kind = type(self).__name__
    validate_fields(self, REWARD_NAMES, ("stages", "num_objects", "max_steps", "max_answer_bytes"))
    if self.split not in C.SPLITS:
      raise ValueError(f"{kind}.split must be one of {C.SPLITS}, got {self.split!r}")
    if self.expert not in EXPERTS:
      raise ValueError(f"{kind}.expert must be one of {EXPERTS}, got {self.expert!r}")
    if not 0.0 <= float(self.skill_prob) <= 1.0:
      raise ValueError(f"{kind}.skill_prob must be in [0, 1], got {self.skill_prob}")
    fams = self._mask("families", self.families, C.FAMILIES)
    kinds = self._mask("objects", self.objects, tuple(k[0] for k in C.OBJECT_KINDS))
    world.check_feasible(self.stages, self.num_objects, fams, kinds, self.split, kind)
    object.__setattr__(self, "text", HouseText(self.tokenizer, self.num_objects, self.stages))
    object.__setattr__(self, "parser", HouseParser(self.tokenizer, max_answer_bytes=self.max_answer_bytes))

  def _mask(self, field, names, known) -> np.ndarray:
    if names is None:
      return np.ones(len(known), bool)
    names = (names,) if isinstance(names, str) else tuple(names)
    bad = [n for n in names if n not in known]
    if bad:
      raise ValueError(f"{type(self).__name__}.{field} has unknown name(s) {bad}; known: {known}")
    return np.isin(np.asarray(known), np.asarray(names))

  @property
  def obs_len(self) -> int:
    step = (self.text.step_len + (self.text.goal_len if self.repeat_goal else 0)
            + (self.text.room_len if self.repeat_room else 0))
    return max(self.text.reset_len, step) + (self.text.adm_len if self.list_actions else 0)

  @property
  def instruction(self) -> str:
    return ("You are an expert agent operating in the ALFRED embodied household environment. "
            "Each observation describes what you see; your task is given in the first one. "
            "Commands: go to (receptacle), open (receptacle), close (receptacle), take (object) "
            "from (receptacle), move (object) to (receptacle), heat/cool/clean (object) with "
            "(receptacle), use (object), examine (something), look, inventory. Answer with one "
            "command, e.g. <answer>go to cabinet 1</answer>.")

  # -- tasks ----------------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> world.HouseTask:
    return world.generate(key, stages=self.stages, num_objects=self.num_objects,
                          families=self._mask("families", self.families, C.FAMILIES),
                          kinds=self._mask("objects", self.objects, tuple(k[0] for k in C.OBJECT_KINDS)),
                          split=self.split, skill_prob=float(self.skill_prob))

  def task_from_spec(self, *, layout: dict, objects: list, goals: list, skill: bool = False) -> world.HouseTask:
    """A task from host values: layout {"cabinet": 2, ...} (kinds with a minimum count may be
    omitted), objects [("mug", 1, "cabinet 2"), ...], goals [("pick_heat_then_place", "mug",
    "countertop"), ...] (look_at: the lamp's receptacle kind). Errors name the bad field."""
    return solver.task_from_spec(self, layout=layout, objects=objects, goals=goals, skill=skill)

  # -- the step's parts -------------------------------------------------------------------------
  def parse(self, action: Text):
    """`(verb, obj, rec, valid)`: catalog.VERBS id (-1 if invalid), global object id, receptacle slot."""
    return self.parser(action)

  def dynamics(self, state: world.HouseState, verb, obj, rec):
    """Rules and goal tracking: `(state, event, new_subgoals, success)` (steps/done untouched)."""
    moved, event = transition(state, verb, obj, rec)
    moved, new = advance(moved)
    return moved, event, new, moved.stage >= self.stages

  def render_step(self, state: world.HouseState, event: Event) -> Text:
    ids, mask = self.text.step_ids(state, event)
    out_len = self.text.step_len
    # Windowed histories drop the first observation: the room list and the goal, again.
    for on, part, n in ((self.repeat_room, self.text.room_ids, self.text.room_len),
                        (self.repeat_goal, self.text.goal_ids, self.text.goal_len)):
      if on:
        p_ids, p_mask = part(state.task)
        ids, mask = jnp.concatenate([ids, p_ids]), jnp.concatenate([mask, p_mask])
        out_len += n
    return self._pad(self._render(state, ids, mask, out_len))

  def _render(self, state, ids, mask, out_len) -> Text:
    """Renders pieces, followed by the admissible-action listing when `list_actions`."""
    if self.list_actions:
      a_ids, a_mask = self.text.admissible_ids(state)
      ids, mask = jnp.concatenate([ids, a_ids]), jnp.concatenate([mask, a_mask])
      out_len += self.text.adm_len
    return self.text.render(ids, mask, out_len)

  def _pad(self, obs: Text) -> Text:
    extra = self.obs_len - obs.tokens.shape[-1]
    if extra <= 0:
      return obs
    pad = jnp.full((extra,), self.text.table.pad_id, jnp.int32)
    return Text(tokens=jnp.concatenate([obs.tokens, pad]), length=obs.length)

  def render_reset(self, task: world.HouseTask) -> Text:
    ids, mask = self.text.reset_ids(task)
    return self._pad(self._render(world.initial_state(task), ids, mask, self.text.reset_len))

  def render_text(self, task: world.HouseTask) -> str:
    """Host-side first observation of a task (what `reset`'s tokens decode to)."""
    ids, mask = jax.jit(self.text.reset_ids)(task)
    text = self.text.host_text(ids, mask)
    if self.list_actions:
      text += self.text.host_text(*jax.jit(self.text.admissible_ids)(world.initial_state(task)))
    return text

  def privileged_text(self, task: world.HouseTask) -> Text:
    """Where the goal objects start ("The mug 1 is in cabinet 3."), `[priv_len]` tokens."""
    ids, mask = self.text.privileged_ids(task)
    return self.text.render(ids, mask, self.text.priv_len)

  # -- env contract -----------------------------------------------------------------------------
  def reset(self, key: jax.Array, task: world.HouseTask):
    del key  # deterministic dynamics; the task fixes the start state
    return world.initial_state(task), self.render_reset(task)

  def step(self, state: world.HouseState, action: Text):
    verb, obj, rec, valid = self.parse(action)
    live = ~state.done
    moved, event, new, success = self.dynamics(state, jnp.where(valid, verb, -1), obj, rec)
    solved = live & success
    steps, done, truncated = step_limit(state.steps, jnp.int32(1), live, solved, state.done,
                                        self.max_steps)
    new_state = moved.replace(steps=steps, done=done)
    terms = jnp.stack([solved, new, live & ~valid]).astype(jnp.float32)
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    info = {
        "success": success,
        "valid_action": valid,
        "state_hash": self.state_hash(new_state),
        "reward_terms": terms,
        "milestone": new > 0,
        "truncated": truncated,
        "skill_injected": state.task.skill,
        "subgoals": jnp.sum(new_state.reached, dtype=jnp.int32),
        "stage": new_state.stage,
        "progress": self.progress(new_state),
        "applied": event.kind > 0,
    }
    return new_state, self.render_step(new_state, event), reward, done, info

  def progress(self, state: world.HouseState) -> jax.Array:
    """f32 fraction of the task done: (stages done + the current stage's share of its family's
    subgoals reached) / stages; 1 when solved (search heuristic `env_progress`)."""
    t = state.task
    k = jnp.minimum(state.stage, self.stages - 1)
    total = jnp.sum(jnp.asarray(C.FAMILY_SUBGOALS)[t.goal_family[k]])
    part = jnp.where(state.stage < self.stages, jnp.sum(state.reached[k]) / total, 0.0)
    return ((state.stage + part) / self.stages).astype(jnp.float32)

  def state_hash(self, state: world.HouseState) -> jax.Array:
    """uint32 fingerprint of the world (task layout and objects, agent, contents, flags, stage);
    the step count is left out, as Sokoban's board hash does."""
    t = state.task
    return fingerprint(t.rec_count, t.obj_kind, t.obj_num, t.goal_family, t.goal_obj, t.goal_rec,
                       state.at[None], state.loc, state.opened, state.hot, state.cold, state.clean,
                       state.on, state.stage[None], state.reached)

  def episode_texts(self, task: world.HouseTask) -> list[str]:
    """Observations along the expert plan (tokenizer corpora see step feedback too)."""
    return plan_observations(self, task, self.solve(task))

  # -- expert ---------------------------------------------------------------------------------
  def solve(self, task: world.HouseTask) -> list[str]:
    """An expert plan (action strings) over the true state; replays to success."""
    return solver.plan(task, self.stages, search=self.expert == "search")


@ENVS.register("textlab")
def textlab(**kwargs) -> TextHouse:
  """TextLab: TextHouse with chained stages (defaults stages=4, num_objects=14, max_steps=100)."""
  kwargs.setdefault("stages", 4)
  kwargs.setdefault("num_objects", 14)
  kwargs.setdefault("max_steps", 100)
  return TextHouse(**kwargs)
