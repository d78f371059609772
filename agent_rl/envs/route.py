"""Step-level routing over worker policies (Hera, arXiv:2605.24598): a router picks which
worker acts each step of a base env, paying a cost per call.

`envs.make("route", tokenizer=tok, base="sokoban", base_kwargs={...}, costs=(0.0, 1.0))`
plays the base env unchanged; its turns alternate between the router (agent 0) and the
worker it picked (agents 1..W, roles `("router", *workers)`, default workers
`("device", "cloud")`: Hera's on-device and cloud models):

  router turn  observation: "You are the router." + the base observation + the choice line;
               action `<answer>device</answer>` or `<answer>cloud</answer>` (the worker's
               role name, ActionParser rules); the next turn goes to that worker with the
               same base state.
               A malformed choice is an invalid action (penalty `invalid_penalty`, term
               `route/invalid`) and the router chooses again.
  worker turn  observation: exactly the base env's (what the worker policy was trained on:
               no role line); its action steps the base env; reward = the base env's minus
               the call's cost (term `route/cost`, weighted -1: paid on the worker's turn, so
               forced runs pay it too); success, milestones and `done` are the base env's;
               the next turn is the router's.

So the router's episode return is the task reward minus the cost of its calls, Hera's
"task success and cloud usage efficiency". The workers are frozen checkpoints of their own
runs (`config.agents.init`, `config.agents.frozen`, agents/frozen.py); the router is the only
agent that trains. `force="cloud"` (or "device") removes the router: that worker acts every
turn (the always-cloud / always-device baselines, same agents and same costs). `info` says
per step `route/calls/<worker>` (1 on that worker's turns), so `eval/route/calls/<worker>` (`eval_extras`) reports
calls per episode. The base env's step budget counts worker steps only: give the rollout
`max_turns` = 2 x the base's steps (router turns included).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.actions import ActionParser
from agent_rl.envs.base import ENVS, Text, TokenizerLike, fingerprint
from agent_rl.envs.render import PieceTable
from agent_rl.envs.roles import parse_roles, role_line, wrapped_base
from agent_rl.envs.tools.text import concat

ROUTER = 0


@struct.dataclass
class RouteState:
  inner: Any
  obs: Text           # the base env's current observation (what a worker reads)
  phase: jax.Array    # i32 who acts next: 0 the router, k >= 1 worker k
  calls: jax.Array    # i32 [W] calls of each worker so far
  done: jax.Array     # bool the base episode ended


@ENVS.register("route")
@dataclasses.dataclass(frozen=True)
class Route:
  """A base env whose steps a router hands to one of W workers, per step (module doc)."""
  tokenizer: TokenizerLike = dataclasses.field(compare=False, hash=False, repr=False)
  base: str = "sokoban"
  base_kwargs: Any = ()
  workers: tuple = ("device", "cloud")
  costs: tuple = (0.0, 1.0)  # per call of each worker, in the base env's reward units
  force: str = ""            # "" | a worker's name: no router, that worker acts every turn
  invalid_penalty: float = 0.1

  def __post_init__(self):
    if self.tokenizer is None:
      raise ValueError("Route needs tokenizer=")
    inner, kw = wrapped_base(self.tokenizer, "route", self.base, self.base_kwargs)
    workers = parse_roles(self.workers, "route.workers")
    if "router" in workers:
      raise ValueError("route.workers: 'router' is the router's role name")
    costs = tuple(float(x) for x in (self.costs.split(",") if isinstance(self.costs, str)
                                     else self.costs))
    if len(costs) != len(workers) or not all(np.isfinite(costs)) or min(costs) < 0:
      raise ValueError(f"route.costs: one finite cost >= 0 per worker {workers}, got "
                       f"{self.costs!r}")
    if self.force and self.force not in workers:
      raise ValueError(f"route.force: {self.force!r} is not a worker; workers: {workers}")
    for name, value in (("workers", workers), ("costs", costs), ("base_kwargs", kw)):
      object.__setattr__(self, name, value)
    choice = ("Who takes this step? Answer " +
              " or ".join(f"<answer>{w}</answer>" for w in workers) + ".\n")
    object.__setattr__(self, "_inner", inner)
    object.__setattr__(self, "_pieces", PieceTable(self.tokenizer, [role_line("router"), choice]))
    object.__setattr__(self, "_parser", ActionParser(
        self.tokenizer, {w: i for i, w in enumerate(workers)}, max_actions=1))

  def _key(self):
    return (self.base, self.base_kwargs, self.workers, self.costs, self.force,
            self.invalid_penalty, self._inner, self._pieces, self._parser)

  def __hash__(self):
    return hash(self._key())

  def __eq__(self, other):
    return type(other) is type(self) and other._key() == self._key()

  # -- what the run reads ------------------------------------------------------------------
  @property
  def roles(self) -> tuple:
    return ("router", *self.workers)

  @property
  def inner(self):
    return self._inner

  @property
  def obs_len(self) -> int:
    return int(self._inner.obs_len) + int(self._pieces.lengths.sum())

  @property
  def action_len(self):
    return getattr(self._inner, "action_len", None)

  @property
  def reward_names(self):
    return tuple(self._inner.reward_names) + ("route/cost", "route/invalid")

  @property
  def reward_weights(self):
    base = getattr(self._inner, "reward_weights", None)
    base = (1.0,) * len(self._inner.reward_names) if base is None else tuple(map(float, base))
    return base + (-1.0, -float(self.invalid_penalty))

  @property
  def eval_extras(self) -> tuple:
    """Per-episode sums of these info keys are reported by evaluation (`eval/<key>`)."""
    return tuple(f"route/calls/{w}" for w in self.workers)

  @property
  def instruction(self) -> str:  # the workers' own prompt; the router reads its lines per turn
    return self._inner.instruction

  @property
  def _forced(self) -> int:
    return 1 + self.workers.index(self.force) if self.force else ROUTER

  def sample_task(self, key):
    return self._inner.sample_task(key)

  def render_text(self, task) -> str:
    return self._inner.render_text(task)

  def solve(self, task) -> list[str]:
    """A replayable plan: the base env's expert plan, each step handed to the last (costliest
    by convention: the strongest) worker by the router; forced: the base plan."""
    plan = list(self._inner.solve(task))
    return plan if self.force else [a for step in plan for a in (self.workers[-1], step)]

  def __getattr__(self, name):  # host-side helpers of the base (plan_format, episode_texts)
    if name.startswith("_") or name in ("first_agent", "role_reward_terms"):
      raise AttributeError(name)
    return getattr(self._inner, name)

  # -- turns -----------------------------------------------------------------------------
  def first_agent(self, state: RouteState) -> jax.Array:
    return state.phase

  def _view(self, agent, obs: Text) -> Text:
    """The router's view (role line, base observation, choice line) or a worker's (the base
    observation as is), padded to obs_len."""
    t = jnp.asarray(self._pieces.tokens)
    n = jnp.asarray(self._pieces.lengths)
    pad = self.tokenizer.pad_id
    router = concat([Text(t[0], n[0]), obs, Text(t[1], n[1])], self.obs_len, pad)
    width = self.obs_len - obs.tokens.shape[-1]
    worker = Text(jnp.pad(jnp.asarray(obs.tokens, jnp.int32), (0, width), constant_values=pad),
                  jnp.asarray(obs.length, jnp.int32))
    r = agent == ROUTER
    return Text(jnp.where(r, router.tokens, worker.tokens), jnp.where(r, router.length,
                                                                       worker.length))

  def reset(self, key, task):
    inner, obs = self._inner.reset(key, task)
    phase = jnp.int32(self._forced)
    state = RouteState(inner=inner, obs=obs, phase=phase,
                       calls=jnp.zeros((len(self.workers),), jnp.int32), done=jnp.bool_(False))
    return state, self._view(phase, obs)

  def step(self, state: RouteState, action: Text):
    w = len(self.workers)
    router = state.phase == ROUTER
    # The router's choice.
    pick = self._parser(action)
    chosen = jnp.maximum(pick.ids[0], 0)
    ok = router & pick.valid & ~state.done
    # A worker's step of the base env (computed on every turn, kept on worker turns).
    inner, obs, _, bdone, binfo = self._inner.step(state.inner, action)
    acting = ~router & ~state.done
    called = jnp.where(acting, jax.nn.one_hot(state.phase - 1, w, dtype=jnp.int32), 0)
    done = jnp.where(acting, bdone, state.done)
    nxt = jnp.where(router, jnp.where(ok, chosen + 1, ROUTER),
                    jnp.int32(self._forced)).astype(jnp.int32)
    new = RouteState(
        inner=jax.tree.map(lambda a, b: jnp.where(acting, a, b), inner, state.inner),
        obs=jax.tree.map(lambda a, b: jnp.where(acting, a, b), obs, state.obs),
        phase=nxt, calls=state.calls + called, done=done)
    bterms = jnp.asarray(binfo["reward_terms"], jnp.float32) * acting
    # A call is paid on the worker's turn, so forced runs (no router) pay the same costs.
    cost = jnp.where(acting, jnp.asarray(self.costs, jnp.float32)[jnp.maximum(state.phase - 1, 0)],
                     0.0)
    invalid = router & ~pick.valid & ~state.done
    terms = jnp.concatenate([bterms, jnp.stack([cost, invalid.astype(jnp.float32)])])
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    info = {k: jnp.where(acting, v, jnp.zeros_like(v)) for k, v in binfo.items()
            if k not in ("reward_terms", "state_hash", "valid_action", "agent_id", "next_agent")}
    info.update({
        "success": acting & binfo["success"],
        "valid_action": jnp.where(router, pick.valid, binfo["valid_action"]),
        "reward_terms": terms,
        "state_hash": self.state_hash(new),
        "agent_id": state.phase.astype(jnp.int32),
        "next_agent": nxt,
        **{f"route/calls/{name}": called[i] for i, name in enumerate(self.workers)},
    })
    return new, self._view(nxt, new.obs), reward, done, info

  def state_hash(self, state: RouteState) -> jax.Array:
    """The base state's hash with who acts next (a router state and the worker state it
    hands over are different anchor states)."""
    base = (self._inner.state_hash(state.inner) if hasattr(self._inner, "state_hash") else
            jnp.uint32(0))
    return fingerprint(jnp.asarray(base, jnp.uint32)[None], state.phase.astype(jnp.uint32)[None])
