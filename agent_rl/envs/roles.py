"""Roles over any env: K agents take its turns by a fixed schedule (issue 21 §1).

`envs.make("roles", tokenizer=tok, base="countdown", roles=("proposer", "solver"),
schedule=(0, 1), base_kwargs={...})` plays the base env unchanged while the turns rotate
over the schedule: turn t is acted by agent `schedule[t % len(schedule)]` (default: round
robin over the roles; a fixed graph such as solver -> verifier -> solver is `(0, 1, 0)`;
`offset_by_task=True` starts each episode at a different point of the cycle, the
"staggered" schedules in which different episodes are at different roles). Each
observation starts with the next agent's role line ("You are the solver.") so a shared
network knows who it is, and info says `agent_id` / `next_agent` (the multi-agent env
contract, envs/base.py). Rewards are the base env's (a team reward); envs whose roles are
paid differently by their rules (DealLite, CalcMath verify) define their own.

Per-role reward scales (`role_rewards`, optional; one `(term, scale)` pair per role, or the
string "f1=0.2,em=1.0"): role k is paid scale_k x the base env's reward term `term_k`, on every
step whoever acted (the per-role contract of agents/rewards.py: a searcher paid on the answer
turn its searches led to). The columns are appended to the base's reward terms as
`role/<role>` (`reward_names`, `info["reward_terms"]`, so the rollout stores
`extras["reward_terms/role/<role>"]`) and named by `role_reward_terms`, which makes the run
score each agent by its own return (`agent_return`: the `drmas` / `per_agent` kernels). The
scalar reward stays the base env's team reward (the role columns weigh 0 in `reward_weights`),
so team metrics read as without the option. This is the setting Dr. MAS (arXiv:2602.08847)
studies: agents whose rewards have different scales and distributions, here on any env
(configs/drmas_kbqa.py: searcher 0.2 x F1, answerer 1.0 x EM on KB-SearchQA).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import ENVS, Text, TokenizerLike, fingerprint, make
from agent_rl.envs.render import PieceTable
from agent_rl.envs.tools.text import concat


def parse_roles(spec, field: str) -> tuple[str, ...]:
  """Role names from a tuple or a comma string: distinct and non-empty (errors name `field`)."""
  roles = tuple(str(r).strip() for r in (spec.split(",") if isinstance(spec, str) else spec))
  if len(roles) < 1 or not all(roles) or len(set(roles)) != len(roles):
    raise ValueError(f"{field}: need distinct non-empty role names, got {spec!r}")
  return roles


def parse_schedule(spec, roles: tuple, field: str) -> tuple[int, ...]:
  """Who acts turn t (`schedule[t % len]`) from a tuple or "0,1,0"; () = round robin."""
  try:
    sched = tuple(int(s) for s in (spec.split(",") if isinstance(spec, str) else spec)
                  if str(s).strip())
  except ValueError:
    raise ValueError(f"{field}: agent indices as ints or '0,1,0', got {spec!r}") from None
  sched = sched or tuple(range(len(roles)))
  bad = [s for s in sched if not 0 <= s < len(roles)]
  if bad:
    raise ValueError(f"{field}: agents {bad} name no role (roles {roles}: 0..{len(roles) - 1})")
  return sched


def wrapped_base(tokenizer, wrapper: str, base: str, base_kwargs) -> tuple[Any, tuple]:
  """The base env of a wrapper env (`roles`, `route`) and its kwargs as a sorted tuple (a
  jit-static field); an unknown base or the wrapper itself names `<wrapper>.base`."""
  if base == wrapper or base not in ENVS:
    raise ValueError(f"{wrapper}.base: unknown base env {base!r}; known: "
                     f"{', '.join(n for n in ENVS.names() if n != wrapper)}")
  kw = tuple(sorted((dict(base_kwargs) if hasattr(base_kwargs, "items") else
                     dict(base_kwargs)).items()))
  return make(base, tokenizer=tokenizer, **dict(kw)), kw


def role_line(role: str) -> str:
  """The line that starts an observation read by `role` (a shared network knows who it is)."""
  return f"You are the {role}.\n"


def roles_instruction(instruction: str, roles) -> str:
  """An env's instruction with the roles that take its turns (the host text env's too)."""
  return (f"{instruction}\nSeveral agents ({', '.join(roles)}) take the turns in order; "
          "each observation says whose turn it is.")


@struct.dataclass
class RolesState:
  inner: Any
  turn: jax.Array    # i32 turns played
  offset: jax.Array  # i32 where in the schedule this episode starts


@ENVS.register("roles")
@dataclasses.dataclass(frozen=True)
class Roles:
  """A base env whose turns K role-prompted agents take in a fixed schedule (docstring)."""
  tokenizer: TokenizerLike = dataclasses.field(compare=False, hash=False, repr=False)
  base: str = "countdown"
  roles: tuple = ("first", "second")
  schedule: tuple = ()
  offset_by_task: bool = False
  base_kwargs: Any = ()
  role_rewards: Any = ()

  def __post_init__(self):
    if self.tokenizer is None:
      raise ValueError("Roles needs tokenizer=")
    inner, kw = wrapped_base(self.tokenizer, "roles", self.base, self.base_kwargs)
    roles = parse_roles(self.roles, "roles.roles")
    sched = parse_schedule(self.schedule, roles, "roles.schedule")
    object.__setattr__(self, "roles", roles)
    object.__setattr__(self, "schedule", sched)
    object.__setattr__(self, "base_kwargs", kw)
    object.__setattr__(self, "_inner", inner)
    lines = PieceTable(self.tokenizer, [role_line(r) for r in roles])
    object.__setattr__(self, "_lines", lines)
    object.__setattr__(self, "_sched", jnp.asarray(sched, jnp.int32))
    pay = _role_rewards(self.role_rewards, roles, self.base, getattr(inner, "reward_names", None))
    object.__setattr__(self, "role_rewards", pay)
    names = tuple(getattr(inner, "reward_names", ()) or ())
    object.__setattr__(self, "_pay_idx", tuple(names.index(t) for t, _ in pay))

  # jit-static identity: the fields plus the base env and role lines (tokenizer-dependent).
  def _key(self):
    return (self.base, self.roles, self.schedule, self.offset_by_task, self.base_kwargs,
            self.role_rewards, self._inner, self._lines)

  def __hash__(self):
    return hash(self._key())

  def __eq__(self, other):
    return type(other) is type(self) and other._key() == self._key()

  # -- what the run reads, the base env's --------------------------------------------------
  @property
  def inner(self):
    return self._inner

  @property
  def obs_len(self) -> int:
    return int(self._inner.obs_len) + int(self._lines.tokens.shape[1])

  @property
  def action_len(self):
    return getattr(self._inner, "action_len", None)

  @property
  def reward_names(self):
    if not self.role_rewards:
      return self._inner.reward_names
    return tuple(self._inner.reward_names) + tuple(f"role/{r}" for r in self.roles)

  @property
  def role_reward_terms(self):
    if not self.role_rewards:  # as before the option: the base env's, if it has them
      return self.__getattr__("role_reward_terms")
    return tuple(f"role/{r}" for r in self.roles)

  @property
  def reward_weights(self):
    if not self.role_rewards:
      return self.__getattr__("reward_weights")
    base = getattr(self._inner, "reward_weights", None)
    base = (1.0,) * len(self._inner.reward_names) if base is None else tuple(map(float, base))
    return base + (0.0,) * len(self.roles)

  @property
  def instruction(self) -> str:
    return roles_instruction(self._inner.instruction, self.roles)

  def sample_task(self, key):
    return self._inner.sample_task(key)

  def render_text(self, task) -> str:
    return self._inner.render_text(task)

  def solve(self, task):
    return self._inner.solve(task)

  def __getattr__(self, name):  # host-side helpers of the base (plan_format, episode_texts)
    if name.startswith("_") or name in ("first_agent",):
      raise AttributeError(name)
    return getattr(self._inner, name)

  # -- the schedule -----------------------------------------------------------------------
  def _agent(self, state: RolesState, turn) -> jax.Array:
    return self._sched[(turn + state.offset) % len(self.schedule)]

  def first_agent(self, state: RolesState) -> jax.Array:
    return self._agent(state, state.turn)

  def _with_line(self, agent, obs: Text) -> Text:
    line = Text(jnp.asarray(self._lines.tokens)[agent], jnp.asarray(self._lines.lengths)[agent])
    return concat([line, obs], self.obs_len, self.tokenizer.pad_id)

  def reset(self, key, task):
    inner, obs = self._inner.reset(key, task)
    # The staggered start: a function of the reset key (shared by a group's members).
    offset = (jax.random.randint(jax.random.fold_in(key, 7), (), 0, len(self.schedule))
              if self.offset_by_task else jnp.int32(0)).astype(jnp.int32)
    state = RolesState(inner=inner, turn=jnp.int32(0), offset=offset)
    return state, self._with_line(self._agent(state, 0), obs)

  def step(self, state: RolesState, action: Text):
    inner, obs, reward, done, info = self._inner.step(state.inner, action)
    acted, nxt = self._agent(state, state.turn), self._agent(state, state.turn + 1)
    info = {**info, "agent_id": acted, "next_agent": nxt}
    if self.role_rewards:
      terms = jnp.asarray(info["reward_terms"], jnp.float32)
      pay = jnp.asarray([s for _, s in self.role_rewards], jnp.float32)
      own = pay * terms[jnp.asarray(self._pay_idx, jnp.int32)]
      info["reward_terms"] = jnp.concatenate([terms, own])
    new = RolesState(inner=inner, turn=state.turn + 1, offset=state.offset)
    info["state_hash"] = self.state_hash(new)
    return new, self._with_line(nxt, obs), reward, done, info

  def state_hash(self, state: RolesState) -> jax.Array:
    """The base state's hash with the schedule position (who acts next is part of it)."""
    pos = (state.turn + state.offset) % len(self.schedule)
    base = (self._inner.state_hash(state.inner) if hasattr(self._inner, "state_hash") else
            jnp.uint32(0))
    return fingerprint(jnp.asarray(base, jnp.uint32)[None], pos.astype(jnp.uint32)[None])


def _role_rewards(spec, roles: tuple, base: str, names) -> tuple:
  """`role_rewards` as `((term, scale), ...)`, one pair per role, checked against the base
  env's reward terms (errors name the field)."""
  if isinstance(spec, str):
    pairs = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
      term, sep, scale = part.partition("=")
      if not sep:
        raise ValueError(f"roles.role_rewards: {part!r} is not term=scale")
      pairs.append((term.strip(), scale.strip()))
    spec = pairs
  spec = tuple(spec or ())
  if not spec:
    return ()
  if len(spec) != len(roles):
    raise ValueError(f"roles.role_rewards: need one (term, scale) per role {roles}, got "
                     f"{len(spec)}: {spec!r}")
  names = tuple(names or ())
  out = []
  for pair in spec:
    try:
      term, scale = pair
      term, scale = str(term).strip(), float(scale)
    except (TypeError, ValueError):
      raise ValueError(f"roles.role_rewards: {pair!r} is not a (term, scale) pair") from None
    if term not in names:
      raise ValueError(f"roles.role_rewards: {term!r} is not a reward term of base env {base!r}; "
                       f"its terms: {names}")
    if not np.isfinite(scale):
      raise ValueError(f"roles.role_rewards: the scale of {term!r} must be finite, got {scale}")
    out.append((term, scale))
  return tuple(out)
