"""A pool of worker processes stepping `TextGame`s, with restarts of dead or hung workers.

    pool = GamePool(factory, num_games=64, workers=2, step_timeout_s=30)
    ticket = pool.submit("step", [(game, "open fridge"), ...])   # returns at once
    ...                                                          # decode the other half
    results = pool.wait(ticket)     # GameStep / GameObs per item, or `Failed`

Game i lives in worker `i % workers` for the whole run (interleaved, so any prefix of the
games, e.g. the smaller evaluation batch, is spread over all workers); a game's JVM lives
across episodes (ScienceWorld: one per game; TextWorld-Express: one per worker, shared by its
games, envs/host/jvm.py). Workers are `spawn`ed: JAX is not fork-safe and
the parent holds its threads. A worker that dies (a JVM crash, `kill -9`) or sends no reply
for `step_timeout_s` per item of its oldest outstanding request (a game that never returns)
is killed and started afresh; each item it owed becomes `Failed(reason)`, and its other games
lost their state, so their next step is `Failed` too until they are reset. The run goes on; the env
(text_env.py) ends those episodes with `fatal` / `worker_failed`.

Resets ahead: `pool.prefetch("reset", items)` sends a reset request now and returns; the
next request, if it is the same reset (same games, tasks and seeds), claims it instead of
sending it again, and any other request first lets it finish and drops its answers. A reset
is a function of (task, seed) alone, so its answer is the same whenever it runs: the run
(train/phases.py) starts the next iteration's resets before its update, and the workers
build those games while the learner trains (ALFWorld's planner, TextWorld's game load).

`workers=0` runs the games in this process, one after another (the sequential path: no
timeout can interrupt a hung game there; nothing runs ahead). Adapter exceptions inside a
step are `Failed` too (a game error ends the episode, not the run); an adapter that cannot
even be built (missing package, no data) raises at start-up with its own message.
"""
from __future__ import annotations

import collections
import dataclasses
import multiprocessing as mp
import time
import traceback
import weakref
from typing import Any, Callable, Sequence

from agent_rl.envs.host.game import game_roles
from agent_rl.registry import Registry

OPS = Registry("game pool operation")
OPS.register("reset", lambda game, arg: game.reset(*arg))
OPS.register("step", lambda game, arg: game.step(arg))
OPS.register("task_ids", lambda game, arg: list(game.task_ids(arg)))
OPS.register("roles", lambda game, arg: game_roles(game))
OPS.register("expert", lambda game, arg: list(game.expert(*arg)))


def _played(game, reset_arg, commands) -> list:
  """The game's observations [s_0, ..., s_n] from a fresh `reset(*reset_arg)` and `commands`
  played in order: another game's state rebuilt by replay (op "replay": the last one; a
  branched rollout's copies, text_env.py; early experience's next states,
  data/early_experience.py), or an expert plan's states (op "trace": every observation;
  world-model SFT and early experience, data/host_demos.py)."""
  obs = [game.reset(*reset_arg)]
  for command in commands:
    obs.append(game.step(command).obs)
  return obs


OPS.register("replay", lambda game, arg: _played(game, *arg)[-1])
OPS.register("trace", lambda game, arg: _played(game, *arg))
# Ops that start the game afresh and play ((task_id, seed), commands).
REPLAYS = ("replay", "trace")


@dataclasses.dataclass(frozen=True)
class Failed:
  """An item that did not return: "worker_died", "timeout", "lost" (its worker restarted
  since the game's reset) or "error: <exception>" (the adapter raised)."""
  reason: str


def run_item(game, op: str, arg):
  try:
    return OPS.get(op)(game, arg)
  except Exception as e:  # noqa: BLE001 — an adapter error fails the episode, not the run
    return Failed(f"error: {type(e).__name__}: {e}")


def _worker(conn, factory: Callable[[], Any], game_ids: Sequence[int]) -> None:
  """Worker main: builds its games, then serves (op, seq, items) until ("close",)."""
  try:
    games = {i: factory() for i in game_ids}
    first = games[game_ids[0]] if game_ids else factory()
    conn.send(("ready", first.instruction()))
  except Exception:  # noqa: BLE001 — reported to the parent, which raises it
    conn.send(("error", traceback.format_exc()))
    return
  while True:
    try:
      msg = conn.recv()
    except (EOFError, OSError):
      break
    if msg[0] == "close":
      break
    op, seq, items = msg
    conn.send((seq, [run_item(games[i], op, arg) for i, arg in items]))
  for g in games.values():
    try:
      g.close()
    except Exception:  # noqa: BLE001 — closing is best effort
      pass


@dataclasses.dataclass
class _Worker:
  games: tuple
  proc: Any = None
  conn: Any = None
  # requests sent, oldest first: (seq, items, game calls owed: the deadline's multiple)
  pending: collections.deque = dataclasses.field(default_factory=collections.deque)
  stash: dict = dataclasses.field(default_factory=dict)  # seq -> results
  clock: float = 0.0  # when the oldest outstanding request started being waited for


@dataclasses.dataclass
class Ticket:
  """One submitted request: its items, which worker holds each, the local results."""
  seq: int
  op: str
  items: list
  local: dict  # item index -> result known without a worker (in-process, or lost games)
  parts: dict  # worker index -> item indices it serves, in order


class GamePool:
  """`num_games` games from `factory()` (picklable: a class or functools.partial), in
  `workers` processes (0: in-process). step_timeout_s: the longest a worker may go without a
  reply while it owes one, per item of the request it owes; start_timeout_s: for building a
  worker's games."""

  def __init__(self, factory: Callable[[], Any], num_games: int, *, workers: int = 0,
               step_timeout_s: float = 60.0, start_timeout_s: float = 300.0):
    if num_games < 1:
      raise ValueError(f"GamePool: num_games must be >= 1, got {num_games}")
    if workers < 0:
      raise ValueError(f"GamePool: workers must be >= 0, got {workers}")
    if step_timeout_s <= 0:
      raise ValueError(f"GamePool: step_timeout_s must be > 0, got {step_timeout_s}")
    self.factory, self.num_games = factory, int(num_games)
    self.step_timeout_s, self.start_timeout_s = float(step_timeout_s), float(start_timeout_s)
    self.workers = min(int(workers), self.num_games)
    self.restarts = 0
    self.lost: set[int] = set()
    self._seq = 0
    self._ahead: Ticket | None = None  # a prefetched request not yet claimed
    if self.workers == 0:
      self._games = [factory() for _ in range(self.num_games)]
      self.instruction = self._games[0].instruction()
      self._pool: list[_Worker] = []
      return
    self._ctx = mp.get_context("spawn")
    self._pool = [_Worker(games=tuple(range(w, self.num_games, self.workers)))
                  for w in range(self.workers)]
    for w in self._pool:
      self._launch(w)
    self.instruction = [self._ready(w) for w in self._pool][0]
    self._finalizer = weakref.finalize(self, _shutdown, list(self._pool))

  # -- worker lifecycle ---------------------------------------------------------------------
  def _launch(self, w: _Worker) -> None:
    parent, child = self._ctx.Pipe()
    w.proc = self._ctx.Process(target=_worker, args=(child, self.factory, w.games), daemon=True)
    w.proc.start()
    child.close()  # the parent keeps one end only, so a dead worker reads as EOF
    w.conn = parent

  def _ready(self, w: _Worker) -> str:
    if not w.conn.poll(self.start_timeout_s):
      _kill(w)
      raise RuntimeError(f"GamePool: a worker did not build its games within "
                         f"{self.start_timeout_s:.0f} s")
    try:
      kind, payload = w.conn.recv()
    except (EOFError, OSError):
      raise RuntimeError("GamePool: a worker died while building its games") from None
    if kind == "error":
      raise RuntimeError(f"GamePool: building a game failed in a worker:\n{payload}")
    return payload

  def _restart(self, w: _Worker, reason: str) -> None:
    """Kills `w`, fails what it owed, marks its games lost, starts a fresh worker."""
    _kill(w)
    while w.pending:
      seq, n, _ = w.pending.popleft()
      w.stash[seq] = [Failed(reason)] * n
    self.lost.update(w.games)
    self.restarts += 1
    self._launch(w)
    self._ready(w)

  # -- requests -----------------------------------------------------------------------------
  def submit(self, op: str, items: Sequence[tuple[int, Any]]) -> Ticket:
    """Sends `items` [(game index, argument)] of `op` ("reset": (task_id, seed), "step":
    command, "replay" / "trace": ((task_id, seed), commands), "task_ids": split) to their
    workers;
    returns without waiting for them."""
    OPS.get(op)
    items = list(items)
    ahead, self._ahead = self._ahead, None
    if ahead is not None:
      if op == ahead.op and items == ahead.items:
        return self._claim(ahead)
      self.wait(ahead)  # not the request it ran ahead for: let it finish, drop its answers
    self._seq += 1
    t = Ticket(seq=self._seq, op=op, items=items, local={}, parts={})
    for k, (g, arg) in enumerate(t.items):
      if not 0 <= g < self.num_games:
        raise ValueError(f"GamePool: game index {g} outside [0, {self.num_games})")
      if op == "reset" or op in REPLAYS:  # they start the game afresh
        self.lost.discard(g)
      elif op == "step" and g in self.lost:
        t.local[k] = Failed("lost")
        continue
      if self.workers == 0:
        t.local[k] = run_item(self._games[g], op, arg)
      else:
        t.parts.setdefault(g % self.workers, []).append(k)
    for wi, ks in t.parts.items():
      w = self._pool[wi]
      if not w.pending:
        w.clock = time.perf_counter()
      # game calls the request owes (its deadline): a replay is a reset and its commands
      owed = sum(1 + len(t.items[k][1][1]) if op in REPLAYS else 1 for k in ks)
      try:
        w.conn.send((op, t.seq, [t.items[k] for k in ks]))
        w.pending.append((t.seq, len(ks), owed))
      except (BrokenPipeError, OSError):
        w.pending.append((t.seq, len(ks), owed))
        self._restart(w, "worker_died")
    return t

  def prefetch(self, op: str, items: Sequence[tuple[int, Any]]) -> None:
    """Sends `items` of `op` ("reset" only: a function of its arguments) now, for the next
    `submit` of the same request to claim (module docstring). In-process: does nothing."""
    if op != "reset":
      raise ValueError(f"GamePool.prefetch: only 'reset' runs ahead (a function of (task, "
                       f"seed)), got {op!r}")
    if self.workers:
      t = self.submit(op, items)  # settles an earlier prefetch first
      self._ahead = t

  def _claim(self, t: Ticket) -> Ticket:
    """A prefetched ticket handed to its request: its workers' deadlines start now (it may
    have been sent long before anyone waited for it)."""
    now = time.perf_counter()
    for wi in t.parts:
      w = self._pool[wi]
      if w.pending and w.pending[0][0] == t.seq:
        w.clock = now
    return t

  def wait(self, t: Ticket) -> list:
    """The results of `t`, item by item (GameObs / GameStep / list / `Failed`)."""
    out = [None] * len(t.items)
    for k, r in t.local.items():
      out[k] = r
    for wi, ks in t.parts.items():
      for k, r in zip(ks, self._collect(self._pool[wi], t.seq)):
        out[k] = r
    return out

  def _collect(self, w: _Worker, seq: int) -> list:
    while seq not in w.stash:
      # The worker answers a request after all its items: the oldest one owes step_timeout_s
      # per item (a slice of 12 ScienceWorld gold paths takes minutes on a loaded machine;
      # one deadline for the whole slice failed them by the load, not the game, and the
      # run's SFT demos then depended on the machine's load).
      owed = w.pending[0][2] if w.pending else 1
      left = w.clock + self.step_timeout_s * owed - time.perf_counter()
      try:
        ready = w.conn.poll(max(left, 0.0))
        if not ready:
          self._restart(w, "timeout")
          continue
        got_seq, results = w.conn.recv()
      except (EOFError, OSError):
        self._restart(w, "worker_died")
        continue
      w.pending.popleft()
      w.stash[got_seq] = results
      w.clock = time.perf_counter()
    return w.stash.pop(seq)

  def call(self, op: str, items: Sequence[tuple[int, Any]]) -> list:
    return self.wait(self.submit(op, items))

  def task_ids(self, split: str) -> list[str]:
    """The task panel of `split` (asked of game 0); an unknown split raises the adapter's
    own error here."""
    (r,) = self.call("task_ids", [(0, split)])
    if isinstance(r, Failed):
      raise ValueError(f"task ids of split {split!r}: {r.reason}")
    return r

  def roles(self) -> tuple[str, ...]:
    """The role names of the pool's game (asked of game 0; () for a game without roles)."""
    (r,) = self.call("roles", [(0, None)])
    if isinstance(r, Failed):
      raise ValueError(f"roles of the game: {r.reason}")
    return tuple(r)

  def pids(self) -> list[int]:
    return [w.proc.pid for w in self._pool]

  def close(self) -> None:
    if self.workers == 0:
      for g in self._games:
        g.close()
      self._games = []
    else:
      self._finalizer()


def _kill(w: _Worker) -> None:
  if w.proc is not None and w.proc.is_alive():
    w.proc.kill()
  if w.proc is not None:
    w.proc.join(10)
  if w.conn is not None:
    w.conn.close()


def _shutdown(workers: list) -> None:
  """Asks each worker to close its games, then makes sure it is gone."""
  for w in workers:
    try:
      w.conn.send(("close",))
    except (OSError, ValueError):
      pass
  for w in workers:
    if w.proc is not None:
      w.proc.join(5)
      if w.proc.is_alive():
        w.proc.kill()
        w.proc.join(5)
    try:
      w.conn.close()
    except OSError:
      pass
