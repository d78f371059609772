"""GamePool: worker processes give the in-process results; dead and hung workers restart."""
import functools
import os
import signal
import time

import pytest

from agent_rl.envs.host.pool import Failed, GamePool
from agent_rl.envs.host.toy import KeyRoomGame

from tests.envs.host.hostgames import CountingGame, FaultyGame

CMDS = ["go to kitchen", "take key", "look", "go to study", "unlock door", "go to hall"]


def _play(pool, n):
  out = [pool.call("reset", [(g, (f"keyroom-{g}", 7 + g)) for g in range(n)])]
  for s in range(4):
    out.append(pool.call("step", [(g, CMDS[(g + s) % len(CMDS)]) for g in range(n)]))
  return out


def test_workers_match_in_process_games():
  local = GamePool(KeyRoomGame, 5, workers=0)
  ref = _play(local, 5)
  pool = GamePool(KeyRoomGame, 5, workers=2)
  try:
    assert _play(pool, 5) == ref
    assert pool.instruction == KeyRoomGame().instruction()
    assert pool.task_ids("eval") == list(KeyRoomGame().task_ids("eval"))
    # Requests in flight together come back to their own tickets, whatever the wait order.
    t1 = pool.submit("step", [(0, "look"), (2, "go to kitchen")])
    t2 = pool.submit("step", [(1, "look"), (3, "look")])
    r2, r1 = pool.wait(t2), pool.wait(t1)
    assert r1 == local.call("step", [(0, "look"), (2, "go to kitchen")])
    assert r2 == local.call("step", [(1, "look"), (3, "look")])
  finally:
    pool.close()


def test_adapter_error_fails_the_item_not_the_pool():
  pool = GamePool(FaultyGame, 2, workers=0)
  pool.call("reset", [(0, ("keyroom-0", 1)), (1, ("keyroom-1", 1))])
  bad, good = pool.call("step", [(0, "boom"), (1, "look")])
  assert isinstance(bad, Failed) and "the game broke" in bad.reason
  assert good.obs.text.startswith("You are in")


def test_killed_worker_is_restarted_and_its_episodes_fail():
  pool = GamePool(FaultyGame, 4, workers=2, step_timeout_s=30)
  try:
    pool.call("reset", [(g, (f"keyroom-{g}", 3)) for g in range(4)])
    pid = pool.pids()[0]
    os.kill(pid, signal.SIGKILL)  # mid-episode: worker 0 owns games 0 and 2
    out = pool.call("step", [(g, "look") for g in range(4)])
    assert [isinstance(r, Failed) for r in out] == [True, False, True, False]
    assert out[0].reason == "worker_died" and pool.restarts == 1 and pool.pids()[0] != pid
    again = pool.call("step", [(g, "look") for g in range(4)])  # state lost until a reset
    assert [getattr(r, "reason", None) for r in again] == ["lost", None, "lost", None]
    pool.call("reset", [(g, (f"keyroom-{g}", 3)) for g in range(4)])
    assert not any(isinstance(r, Failed) for r in pool.call("step", [(g, "look") for g in range(4)]))
    # A game that kills its own process (a JVM crash) is the same failure.
    assert pool.call("step", [(1, "die")])[0] == Failed("worker_died")
    assert pool.restarts == 2
  finally:
    pool.close()


def test_hung_step_times_out_and_restarts():
  pool = GamePool(FaultyGame, 2, workers=2, step_timeout_s=1.5)
  try:
    pool.call("reset", [(0, ("keyroom-0", 1)), (1, ("keyroom-1", 1))])
    t = time.perf_counter()
    out = pool.call("step", [(0, "sleep"), (1, "look")])
    assert time.perf_counter() - t < 20
    assert out[0] == Failed("timeout") and not isinstance(out[1], Failed)
    assert pool.restarts == 1
    pool.call("reset", [(0, ("keyroom-0", 1))])
    assert not isinstance(pool.call("step", [(0, "look")])[0], Failed)
  finally:
    pool.close()


def test_timeout_is_per_item_of_a_request():
  """A worker's slice of a request is answered after all its items: 4 one-second steps on one
  worker (8 s of silence with a 2.5 s step limit) are slow, not hung."""
  pool = GamePool(FaultyGame, 8, workers=2, step_timeout_s=2.5)
  try:
    pool.call("reset", [(g, (f"keyroom-{g}", 1)) for g in range(8)])
    out = pool.call("step", [(g, "nap") for g in range(0, 8, 2)])  # all on worker 0
    assert not any(isinstance(r, Failed) for r in out) and pool.restarts == 0
    out = pool.call("step", [(0, "nap"), (2, "sleep")])  # one hangs: 2 x 2.5 s, then failed
    assert out == [Failed("timeout"), Failed("timeout")] and pool.restarts == 1
  finally:
    pool.close()


def test_bad_requests_raise_clearly():
  pool = GamePool(KeyRoomGame, 2, workers=0)
  with pytest.raises(ValueError, match="game index 5"):
    pool.submit("step", [(5, "look")])
  with pytest.raises(KeyError, match="unknown game pool operation 'jump'"):
    pool.submit("jump", [])
  with pytest.raises(ValueError, match="workers must be >= 0"):
    GamePool(KeyRoomGame, 2, workers=-1)
  with pytest.raises(ValueError, match="unknown split 'test'"):
    pool.task_ids("test")


def _resets(log) -> list[str]:
  return log.read_text().splitlines() if log.exists() else []


def test_reset_ahead_runs_in_the_workers_and_is_claimed(tmp_path):
  """`prefetch("reset", items)` runs the resets before anyone waits (the games' log fills
  while the caller does nothing), the same request then collects them without resetting
  again, and the answers are an in-process reset's."""
  log = tmp_path / "resets.txt"
  items = [(g, (f"keyroom-{g}", 11 + g)) for g in range(5)]
  ref = GamePool(KeyRoomGame, 5, workers=0).call("reset", items)
  pool = GamePool(functools.partial(CountingGame, log=str(log)), 5, workers=2)
  try:
    pool.prefetch("reset", items)
    deadline = time.time() + 60
    while len(_resets(log)) < 5 and time.time() < deadline:
      time.sleep(0.05)
    assert sorted(_resets(log)) == sorted(f"keyroom-{g} {11 + g}" for g in range(5))
    assert pool.call("reset", items) == ref
    assert len(_resets(log)) == 5  # claimed, not sent again
    steps = [(g, CMDS[g % len(CMDS)]) for g in range(5)]
    local = GamePool(KeyRoomGame, 5, workers=0)
    local.call("reset", items)
    assert pool.call("step", steps) == local.call("step", steps)
  finally:
    pool.close()


def test_reset_ahead_of_another_request_is_dropped(tmp_path):
  """A request other than the prefetched one (another reset, a step) lets the prefetched
  resets finish, drops their answers and is served as without them."""
  log = tmp_path / "resets.txt"
  a = [(g, (f"keyroom-{g}", 3)) for g in range(4)]
  b = [(g, (f"keyroom-{g + 4}", 5)) for g in range(4)]
  local = GamePool(KeyRoomGame, 4, workers=0)
  pool = GamePool(functools.partial(CountingGame, log=str(log)), 4, workers=2)
  try:
    pool.prefetch("reset", a)
    assert pool.call("reset", b) == local.call("reset", b)
    assert len(_resets(log)) == 8
    pool.prefetch("reset", a)  # then a step: it acts on the prefetched starts
    local.call("reset", a)
    steps = [(g, "take key") for g in range(4)]
    assert pool.call("step", steps) == local.call("step", steps)
    pool.prefetch("reset", a)
    pool.prefetch("reset", b)  # a second prefetch settles the first
    assert pool.call("reset", b) == local.call("reset", b) and len(_resets(log)) == 20
  finally:
    pool.close()


def test_reset_ahead_in_process_does_nothing(tmp_path):
  log = tmp_path / "resets.txt"
  pool = GamePool(functools.partial(CountingGame, log=str(log)), 2, workers=0)
  pool.prefetch("reset", [(0, ("keyroom-0", 1))])
  assert _resets(log) == []
  with pytest.raises(ValueError, match="only 'reset' runs ahead"):
    pool.prefetch("step", [(0, "look")])
