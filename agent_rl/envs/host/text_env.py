"""`TextHostEnv`: a batch of `TextGame`s (in a `GamePool`) as the token-level `HostEnv` of
`agent_rl.rollout.bridge`.

Rows are games: row i of a reset / step is game i of the pool. Per turn:
- the action tokens are decoded (without the stop token) and the command is parsed by the
  configured `ACTION_FORMATS` rule (text_rules.py, with the other text rules of a turn): "answer" = our JAX envs' word-action rule
  (envs/actions.py: the text between the first `<answer>` and the first `</answer>` after it,
  at most `max_answer_bytes` bytes, the first `||` segment, ASCII whitespace stripped) or
  "raw" (the first non-empty line). No command = an invalid action: the game is not stepped,
  the reward is `invalid_penalty`, the observation says what was expected, the state (and its
  hash) is unchanged. Model text is only compared and passed to the game, never evaluated.
- reward = the game's score delta; done = the game's done; success = `won`.
- observation = the game's text, plus (`admissible=True`) its admissible commands as
  verl-agent's ALFWorld prompt lists them (Feng et al. 2025, GiGPO), tokenized with the run's
  tokenizer and truncated to `obs_len` tokens (the head is kept; truncations are counted in
  `info["obs_truncated"]` and `stats`).
- state_hash (uint32): BLAKE2b of `GameObs.state_key` where the package exposes the state
  (TextWorld's facts), else of the observation text as presented (so equal hashes mean equal
  prompts, GiGPO's anchor states). Not Python's `hash` (salted per process).
- a game whose worker died or hung, or whose adapter raised: done, reward 0, success False,
  `fatal` and `worker_failed` True (pool.py restarts the worker).

Several agents (issue 21; roles.py): a game with roles of its own, or any game on a schedule
of `roles=`. Each observation then starts with its reader's role line ("You are the scout."),
info carries `agent_id` (who acted) and `next_agent`, `first_agents()` says who acts turn 0,
the state hash includes who acts next, and per-role reward columns follow roles.py.

Tasks are int32 indices into the split's task panel (`sample_task(key)`: uniform, pure JAX),
and a reset seed is a pure function of the rollout's reset key, so panels and resets replay
exactly from the run seed (exact resume). Group members reset their own game with the same
(task_id, seed): the same initial state, as the compiled rollout's copied reset.
"""
from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text
from agent_rl.envs.host.game import GameObs, GameStep
from agent_rl.envs.host.pool import Failed, GamePool
from agent_rl.envs.host.roles import host_roles
from agent_rl.envs.host.text_rules import (ACTION_FORMATS, FAILED_TEXT, INVALID_TEXT, PLAN_PREFIX,
                                           present, reset_seed, state_hash)
from agent_rl.envs.roles import role_line, roles_instruction

class TextHostEnv:
  """A `HostEnv` over `pool`'s games. See the module docstring for the turn's rules.

  tokenizer: the run's (encode, decode, pad_id). split: the training task panel;
  eval_split: the panel of `for_eval()` ("" = the same panel, held-out reset seeds).
  extras: keys of `GameStep.extras` to carry into the batch (f32, 0 on rows without a step).
  roles / schedule / offset_by_task / role_scales: several agents playing a game without
  roles of its own (module docstring); a game with roles needs none of them.
  """

  def __init__(self, pool: GamePool, tokenizer, *, split: str = "train", eval_split: str = "",
               obs_len: int = 256, admissible: bool = False, action_format: str = "answer",
               invalid_penalty: float = -0.1, max_answer_bytes: int = 256,
               extras: Sequence[str] = (), overlap: bool = True, roles: Any = (),
               schedule: Any = (), offset_by_task: bool = False, role_scales: Any = (),
               score_scale: float = 1.0, _task_ids=None, _game_roles=None):
    if obs_len < 1:
      raise ValueError(f"TextHostEnv: obs_len must be >= 1, got {obs_len}")
    self._kw = dict(obs_len=obs_len, admissible=admissible, action_format=action_format,
                    invalid_penalty=invalid_penalty, max_answer_bytes=max_answer_bytes,
                    extras=extras, overlap=overlap, roles=roles, schedule=schedule,
                    offset_by_task=offset_by_task, role_scales=role_scales,
                    score_scale=score_scale)
    if not score_scale > 0:
      raise ValueError(f"TextHostEnv: score_scale must be > 0, got {score_scale}")
    # The game's score delta times this is the reward: ScienceWorld scores 0-100, TWX 0-1;
    # 0.01 puts ScienceWorld's on the scale of the invalid-action penalty and the other games.
    self.score_scale = float(score_scale)
    self.parse = ACTION_FORMATS.get(action_format)
    self.pool, self.tokenizer = pool, tokenizer
    self.split, self.eval_split = split, eval_split
    self.obs_len, self.action_len = int(obs_len), None  # None: reads the whole action
    self.admissible, self.action_format = bool(admissible), action_format
    self.invalid_penalty, self.max_answer_bytes = float(invalid_penalty), int(max_answer_bytes)
    self.extras, self.overlap = tuple(extras), bool(overlap)
    self.task_ids = tuple(_task_ids if _task_ids is not None else pool.task_ids(split))
    if not self.task_ids:
      raise ValueError(f"TextHostEnv: split {split!r} has no tasks")
    self._game_roles = tuple(_game_roles if _game_roles is not None else pool.roles())
    self.agents = host_roles(self._game_roles, roles, schedule, offset_by_task, role_scales)
    self.roles = self.agents.roles
    self.reward_names = self.agents.reward_names
    self.role_reward_terms = self.agents.role_reward_terms
    self.instruction = (roles_instruction(pool.instruction, self.roles) if self.roles else
                        pool.instruction)
    # tokenize_s: seconds spent in this process decoding actions and encoding observations
    # (benchmarks/host_envs.py reports its share of a turn: whether it belongs in the workers)
    self.stats = dict(obs_truncated=0, invalid_actions=0, failed_steps=0, replay_diverged=0,
                      tokenize_s=0.0)
    self._last: list = []   # per row: the GameObs the agent last saw
    self._hash: list = []   # per row: its state hash
    self._next: list = []   # per row: the agent that acts next (reads the observation)
    self._turn: list = []   # per row: turns played (the schedule's clock)
    self._offset: list = []  # per row: where in the schedule its episode started
    self._dead: set = set()  # rows whose reset failed: their first step ends them
    self._reset_arg: list = []  # per row: its game's reset (task_id, seed) ...
    self._played: list = []     # ... and the commands its game stepped since (clone_rows)
    self._runners: dict = {}
    self._eval: Optional[TextHostEnv] = None

  # -- tasks --------------------------------------------------------------------------------
  @property
  def plan_format(self) -> str:
    """How an expert command becomes the turn the policy writes (envs.tasks.plan_format)."""
    return "<answer>{}</answer>" if self.action_format == "answer" else "{}"

  def expert_plans(self, tasks, reset_keys) -> list:
    """The games' expert plans (`TextGame.expert`) from the starts a reset with these tasks
    `[n]` and reset keys `[n, 2]` gives (games 0..n-1 compute them): a list of command lists,
    None where the game has no plan (its adapter raised, or it has no expert)."""
    items = list(enumerate(self.starts(tasks, reset_keys)))
    return [p if isinstance(p, list) else None for p in self.pool.call("expert", items)]

  def starts(self, tasks, reset_keys) -> list:
    """[(task_id, seed)] of tasks `[n]` and reset keys `[n, 2]`, one per game 0..n-1."""
    return [arg for _, arg in self._reset_items(tasks, reset_keys, 1)[0]]

  def observation_traces(self, tasks, reset_keys, plans) -> list:
    """The games' observations [s_0, ..., s_n] (`GameObs`: text, admissible commands) along
    `plans` (expert_plans' lists, n commands each) from the same starts (games 0..n-1 play
    them): world-model SFT's states and early experience's branch points
    (data/host_demos.py). None where the plan is None or the game failed (its reason is not
    kept: the demo is left out as one without a plan)."""
    starts = self.starts(tasks, reset_keys)
    if len(plans) != len(starts):
      raise ValueError(f"TextHostEnv: {len(plans)} plans for {len(starts)} tasks")
    rows = [r for r, p in enumerate(plans) if p is not None]
    items = [(r, (starts[r], list(plans[r]))) for r in rows]
    out = [None] * len(plans)
    for r, got in zip(rows, self.pool.call("trace", items)):
      out[r] = got if isinstance(got, list) else None
    return out

  def replayed_observations(self, starts, command_lists) -> list:
    """The observation (`GameObs`) after each of `command_lists` played from a fresh reset at
    its start ((task_id, seed), as `starts` gives), spread over the pool's games (any number
    of items: a game plays its items in turn): early experience's next states
    (data/early_experience.py). None where the game failed."""
    items = [(i % self.pool.num_games, (tuple(s), list(cmds)))
             for i, (s, cmds) in enumerate(zip(starts, command_lists))]
    return [None if isinstance(o, Failed) else o for o in self.pool.call("replay", items)]

  def privileged_plans(self, tasks, reset_keys, width: int) -> Text:
    """`Text [n, width]` (host arrays), a JAX env's `privileged_text` for hindsight teachers
    (train/hindsight.py): the expert plan from each start of tasks `[n]` and reset keys
    `[n, 2]` (expert_plans) as "Expert plan: c1; c2; ...", cut to `width` tokens; empty
    where the game has no plan."""
    texts = ["" if p is None else PLAN_PREFIX + "; ".join(p)
             for p in self.expert_plans(tasks, reset_keys)]
    tok, length, _ = self._tokenize(texts, width)
    return Text(tokens=tok, length=length)

  def sample_task(self, key: jax.Array) -> jax.Array:
    """A task: an int32 index into `task_ids`, uniform."""
    return jax.random.randint(key, (), 0, len(self.task_ids), dtype=jnp.int32)

  def for_eval(self) -> "TextHostEnv":
    """The same games and pool over the `eval_split` panel (self when eval_split is "")."""
    if not self.eval_split or self.eval_split == self.split:
      return self
    if self._eval is None:
      self._eval = TextHostEnv(self.pool, self.tokenizer, split=self.eval_split,
                               _game_roles=self._game_roles, **self._kw)
    return self._eval

  # -- the HostEnv contract -----------------------------------------------------------------
  def info_keys(self) -> tuple[str, ...]:
    return tuple(self.info_spec(0, 1))

  def info_spec(self, action_len: int, n: Optional[int] = None) -> dict:
    """The batched info of one step `[n]` (default: the rows of the last reset), known before
    any step, so the rollout compiles once."""
    n = n if n is not None else (len(self._last) or 1)
    s = lambda d: jax.ShapeDtypeStruct((n,), d)  # noqa: E731
    spec = dict(success=s(jnp.bool_), valid_action=s(jnp.bool_), state_hash=s(jnp.uint32),
                fatal=s(jnp.bool_), worker_failed=s(jnp.bool_), obs_truncated=s(jnp.bool_),
                admissible_action=s(jnp.bool_))
    spec.update({k: s(jnp.float32) for k in self.extras})
    if self.roles:
      spec.update(agent_id=s(jnp.int32), next_agent=s(jnp.int32))
    if self.reward_names is not None:
      spec["reward_terms"] = jax.ShapeDtypeStruct((n, len(self.reward_names)), jnp.float32)
    return spec

  def first_agents(self) -> np.ndarray:
    """`[N]` i32: who acts turn 0 of the episodes of the last reset (0 without roles)."""
    return np.asarray(self._next, np.int32)

  def _reset_items(self, tasks, reset_keys, group_size: int) -> tuple[list, np.ndarray]:
    """The pool's reset items [(game, (task_id, seed))] of a reset, and the keys `[n, 2]`."""
    idx = np.asarray(tasks).reshape(-1)
    keys = np.asarray(reset_keys).reshape(len(idx), -1)
    n = len(idx) * group_size
    if n > self.pool.num_games:
      raise ValueError(f"TextHostEnv: {n} episodes but the pool holds {self.pool.num_games} "
                       "games (size it for the largest rollout: training and evaluation)")
    bad = [int(i) for i in idx if not 0 <= i < len(self.task_ids)]
    if bad:
      raise ValueError(f"TextHostEnv: task indices {bad} outside the {len(self.task_ids)} "
                       f"tasks of split {self.split!r}")
    return [(r, (self.task_ids[int(idx[r // group_size])], reset_seed(keys[r // group_size])))
            for r in range(n)], keys

  def prefetch_reset(self, tasks, reset_keys, group_size: int) -> None:
    """Starts the games' part of `reset(tasks, reset_keys, group_size)` in the workers now
    (GamePool.prefetch); that reset, when it comes, collects it. Same results either way."""
    self.pool.prefetch("reset", self._reset_items(tasks, reset_keys, group_size)[0])

  def reset(self, tasks, reset_keys, group_size: int):
    """tasks [n_tasks] int32; reset_keys [n_tasks, 2] uint32 -> obs_tokens [N, obs_len],
    obs_length [N], state_hash [N] uint32 (N = n_tasks * group_size)."""
    items, keys = self._reset_items(tasks, reset_keys, group_size)
    n = len(items)
    obs = self.pool.call("reset", items)
    self._reset_arg, self._played = [arg for _, arg in items], [[] for _ in items]
    failed = GameObs(text=FAILED_TEXT)
    self._dead = {r for r, o in enumerate(obs) if not isinstance(o, GameObs)}  # fail at step 0
    self._last = [failed if r in self._dead else o for r, o in enumerate(obs)]
    # The staggered start is a function of the reset seed (shared by a group's members).
    self._offset = [self.agents.offset(reset_seed(keys[r // group_size])) for r in range(n)]
    self._turn = [0] * n
    self._next = [0 if r in self._dead else self.agents.who(0, self._offset[r], o.next_agent)
                  for r, o in enumerate(self._last)]
    texts = [self._present(o, r) for r, o in enumerate(self._last)]
    tok, length, trunc = self._tokenize(texts)
    self.stats["obs_truncated"] += int(trunc.sum())
    self._hash = [self._state_hash(o, t, r) for r, (o, t) in enumerate(zip(self._last, texts))]
    return tok, length, np.asarray(self._hash, np.uint32)

  def step(self, action_tokens, action_length, active):
    n = len(self._last)
    return self.step_wait(self.step_async(np.arange(n), action_tokens, action_length, active))

  # -- asynchronous halves (rollout/overlap.py) ---------------------------------------------
  def step_async(self, rows, action_tokens, action_length, active):
    """Submits the step of `rows` (their tokens `[len(rows), A]`, lengths, active flags);
    returns a handle for `step_wait`. Parsing happens here, stepping in the pool."""
    rows = [int(r) for r in rows]
    a_tok, a_len, on = np.asarray(action_tokens), np.asarray(action_length), np.asarray(active)
    commands: list = []
    t0 = time.perf_counter()
    texts = [self.tokenizer.decode(a_tok[k, :int(a_len[k])]) if on[k] else "" for k in range(len(rows))]
    self.stats["tokenize_s"] += time.perf_counter() - t0
    for k, text in enumerate(texts):
      commands.append(self.parse(text, self.max_answer_bytes) if on[k] else None)
    items = [(r, c) for r, c, a in zip(rows, commands, on)
             if a and c is not None and r not in self._dead]
    return rows, commands, on, self.pool.submit("step", items)

  def step_wait(self, handle):
    """The outputs of the rows of `handle`: obs_tokens, obs_length, reward, done, info."""
    rows, commands, on, ticket = handle
    results = iter(self.pool.wait(ticket))
    m = len(rows)
    reward, done = np.zeros((m,), np.float32), np.zeros((m,), bool)
    info = {k: np.zeros(v.shape, v.dtype) for k, v in self.info_spec(0, m).items()}
    texts = []
    for k, (r, cmd) in enumerate(zip(rows, commands)):
      prev, acted = self._last[r], self._next[r]
      if self.roles:
        info["agent_id"][k] = acted
      if not on[k]:  # a finished episode: its outputs are ignored
        texts.append(self._present(prev, r))
        info["state_hash"][k] = self._hash[r]
        continue
      if cmd is None and r not in self._dead:
        self.stats["invalid_actions"] += 1
        obs = GameObs(text=INVALID_TEXT.get(self.action_format, INVALID_TEXT["raw"]),
                      admissible=prev.admissible,
                      state_key=prev.state_key, next_agent=prev.next_agent)
        reward[k] = self.invalid_penalty
        self._advance(r, prev)  # the schedule moves on; a game with roles did not move
        text = self._present(obs, r)
        texts.append(text)
        # the game did not move: the same state, unless the schedule passed the turn on
        self._hash[r] = info["state_hash"][k] = (
            self._state_hash(prev, self._present(prev, r), r) if self.agents.schedule
            else self._hash[r])
        info["admissible_action"][k] = False
        if self.reward_names:
          self.agents.pay(info["reward_terms"][k], acted, None, (), self.invalid_penalty)
        continue
      res = Failed("reset failed") if r in self._dead else next(results)
      info["valid_action"][k] = cmd is not None
      info["admissible_action"][k] = cmd is not None and (prev.admissible is None or cmd.lower() in {
          a.lower() for a in prev.admissible})
      if isinstance(res, Failed) or not isinstance(res, GameStep):
        self.stats["failed_steps"] += 1
        done[k] = info["fatal"][k] = info["worker_failed"][k] = True
        self._last[r] = GameObs(text=FAILED_TEXT)
        texts.append(FAILED_TEXT)
        self._hash[r] = 0
        self._dead.discard(r)
        continue
      self._last[r] = res.obs
      self._played[r].append(cmd)
      self._advance(r, res.obs)
      text = self._present(res.obs, r)
      texts.append(text)
      self._hash[r] = info["state_hash"][k] = self._state_hash(res.obs, text, r)
      score = res.score_delta * self.score_scale
      reward[k], done[k], info["success"][k] = score, res.done, res.won
      if self.reward_names:
        self.agents.pay(info["reward_terms"][k], acted, score,
                        tuple(self.score_scale * x for x in res.role_rewards), self.invalid_penalty)
      for e in self.extras:
        info[e][k] = float(res.extras.get(e, 0.0))
    if self.roles:  # rows that did not move (finished, failed) keep the agent that acted
      info["next_agent"][:] = [self._next[r] for r in rows]
    tok, length, trunc = self._tokenize(texts)
    info["obs_truncated"] = trunc & on
    self.stats["obs_truncated"] += int(info["obs_truncated"].sum())
    return tok, length, reward, done, info

  def clone_rows(self, dst, src) -> None:
    """Row dst[k] becomes a copy of row src[k] (a branched rollout, rollout/branch.py): its
    game replays src's reset and the commands src's game stepped (pool op "replay"), and
    takes src's bookkeeping. Games are functions of (task, seed, commands); a replay whose
    observation is not src's (a game that is not) fails the copy's episode at its next step,
    counted in `stats["replay_diverged"]`, as a failed reset does."""
    pairs = [(int(d), int(s)) for d, s in zip(dst, src)]
    items = [(d, (self._reset_arg[s], list(self._played[s]))) for d, s in pairs]
    for (d, s), obs in zip(pairs, self.pool.call("replay", items)):
      for rows in (self._last, self._hash, self._next, self._turn, self._offset,
                   self._reset_arg):
        rows[d] = rows[s]
      self._played[d] = list(self._played[s])
      self._dead.discard(d)
      same = (isinstance(obs, GameObs) and s not in self._dead
              and (obs.text, obs.admissible) == (self._last[s].text, self._last[s].admissible))
      if not same:
        self.stats["replay_diverged"] += 1
        self._dead.add(d)

  # -- several agents -----------------------------------------------------------------------
  def _advance(self, r: int, obs: GameObs) -> None:
    """A turn was played on row r: the schedule's clock moves; who acts next is updated."""
    self._turn[r] += 1
    self._next[r] = self.agents.who(self._turn[r], self._offset[r], obs.next_agent)

  def _state_hash(self, obs: GameObs, presented: str, r: int) -> int:
    return state_hash(obs, presented, self._next[r] if self.roles else None)

  # -- text ---------------------------------------------------------------------------------
  def _present(self, obs: GameObs, r: Optional[int] = None) -> str:
    """The observation as row r's next agent reads it (its role line first)."""
    text = present(obs, self.admissible)
    if self.roles and r is not None and obs.text != FAILED_TEXT:
      text = role_line(self.roles[self._next[r]]) + text
    return text

  def _tokenize(self, texts: Sequence[str], width: Optional[int] = None):
    """tokens [n, width (default obs_len)] int32 (pad_id after), length [n], truncated [n]."""
    t0 = time.perf_counter()
    width = self.obs_len if width is None else int(width)
    tok = np.full((len(texts), width), self.tokenizer.pad_id, np.int32)
    length = np.zeros((len(texts),), np.int32)
    trunc = np.zeros((len(texts),), bool)
    for i, t in enumerate(texts):
      ids = list(self.tokenizer.encode(t))
      trunc[i] = len(ids) > width
      ids = ids[:width]
      tok[i, :len(ids)] = ids
      length[i] = len(ids)
    self.stats["tokenize_s"] += time.perf_counter() - t0
    return tok, length, trunc

  # -- the rollout of this env (train/run.py, eval/evaluate.py) ------------------------------
  def runner(self, policy, cfg, pieces):
    """The host rollout `(params, tasks, key) -> (EpisodeBatch, metrics)` of this env, built
    once per (policy, cfg, pieces): two pipelined halves (rollout/overlap.py) when `overlap`,
    else the plain host loop (rollout/bridge.py)."""
    key = (policy, cfg, pieces)
    if key not in self._runners:
      from agent_rl.rollout.overlap import make_host_rollout
      self._runners[key] = make_host_rollout(policy, self, cfg, pieces, overlap=self.overlap)
    return self._runners[key]

  def rollout(self, policy, params, tasks, key, cfg, pieces):
    return self.runner(policy, cfg, pieces)(params, tasks, key)

  def close(self) -> None:
    self.pool.close()
