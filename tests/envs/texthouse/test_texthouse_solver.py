"""Expert plans replay to success: thousands of generated tasks, vmapped, both splits, TextLab;
the searching expert's plans too, and its decisions depend only on what it has observed."""
import collections

import jax
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.tasks import sample_tasks
from agent_rl.envs.texthouse import catalog as C
from agent_rl.envs.texthouse import solver
from conftest import CharTokenizer
from texthouse.common import batched, row, stack, turns


def replay(env, tok, tasks, n, chunk=32, solve=None):
  """Replays in chunks of 32 (the batch test_texthouse_rules compiles) -> (plans, success, ok).
  solve: task -> plan (default env.solve)."""
  solve = solve or env.solve
  out = [_replay(env, tok, jax.tree.map(lambda x: x[i:i + chunk], tasks), chunk, solve)
         for i in range(0, n, chunk)]
  return [p for o in out for p in o[0]], np.concatenate([o[1] for o in out]), np.concatenate([o[2] for o in out])


def _replay(env, tok, tasks, n, solve):
  plans = [solve(row(tasks, i)) for i in range(n)]
  reset, step = batched(env)
  state, _ = reset(jax.random.split(jax.random.key(1), n), tasks)
  success = np.zeros(n, bool)
  ok = np.ones(n, bool)
  prev = np.zeros(n)
  for t in range(max(len(p) for p in plans)):
    texts = [f"<answer>{p[t]}</answer>" if t < len(p) else "" for p in plans]
    state, _, reward, done, info = step(state, turns(tok, texts, 64))
    live = np.asarray([t < len(p) for p in plans])
    # Every plan action is well formed and applicable; success lands on the plan's last step.
    ok &= ~live | (np.asarray(info["valid_action"]) & np.asarray(info["applied"]))
    last = np.asarray([t == len(p) - 1 for p in plans])
    prog = np.asarray(info["progress"])                     # monotone along a plan, 1 at the end
    ok &= ~live | ((prog >= prev) & (prog <= 1) & ((prog == 1) == last))
    prev = np.where(live, prog, prev)
    success |= last & np.asarray(info["success"]) & np.asarray(done)
    ok &= ~(live & ~last) | ~np.asarray(done)
  return plans, success, ok


@pytest.mark.parametrize("name,n", [("texthouse", 1024), ("textlab", 384)])
def test_plans_replay_to_success(name, n):
  tok = CharTokenizer()
  env = envs.make(name, tokenizer=tok)
  unseen = envs.make(name, tokenizer=tok, split="unseen")
  # Both splits replayed by one env (the split only changes sampling), half the tasks each.
  tasks = stack(sample_tasks(env, range(n // 2)), sample_tasks(unseen, range(n // 2)))
  assert np.asarray(tasks.unseen).sum() == n // 2
  plans, success, ok = replay(env, tok, tasks, n)
  assert ok.all() and success.all(), (np.flatnonzero(~ok)[:5], np.flatnonzero(~success)[:5])
  fams = collections.Counter(np.asarray(tasks.goal_family).ravel().tolist())
  assert set(fams) == set(range(6)), fams                     # all six families drawn
  lens = [len(p) for p in plans]
  if name == "textlab":
    assert 20 <= np.median(lens) <= 40, np.median(lens)      # long-horizon chains
  else:
    assert max(lens) <= env.max_steps


@pytest.mark.parametrize("name,n", [("texthouse", 512), ("textlab", 128)])
def test_search_plans_replay_to_success(name, n):
  """The searching expert (solver.plan(search=True), env kwarg expert="search") solves every
  task too; its plans are longer than the planner's and never shorter."""
  tok = CharTokenizer()
  env = envs.make(name, tokenizer=tok)       # the replaying env: dynamics do not depend on expert
  assert envs.make(name, tokenizer=tok, expert="search").solve(row(sample_tasks(env, [0]), 0)) == \
      solver.plan(row(sample_tasks(env, [0]), 0), env.stages, search=True)
  tasks = sample_tasks(env, range(n))
  search = lambda t: solver.plan(t, env.stages, search=True)  # noqa: E731
  plans, success, ok = replay(env, tok, tasks, n, solve=search)
  assert ok.all() and success.all(), (np.flatnonzero(~ok)[:5], np.flatnonzero(~success)[:5])
  short = [len(env.solve(row(tasks, i))) for i in range(n)]
  assert all(len(p) >= s for p, s in zip(plans, short))
  assert np.mean([len(p) for p in plans]) > np.mean(short) + 1   # the sweep costs steps


def _spec_env():
  return envs.make("texthouse", tokenizer=CharTokenizer(), expert="search")


def test_search_plan_by_hand():
  """A hand-checked sweep: the room lists cabinet 1, cabinet 2, drawer 1, countertop 1,
  fridge 1, microwave 1, sinkbasin 1, desk 1, garbagecan 1; the mug is in the fridge."""
  env = _spec_env()
  task = env.task_from_spec(layout={"cabinet": 2, "desk": 1}, goals=[("pick_clean_then_place", "mug", "desk")],
                            objects=[("mug", 2, "fridge 1"), ("apple", 1, "countertop 1")])
  assert env.solve(task) == [
      "go to cabinet 1", "open cabinet 1", "go to cabinet 2", "open cabinet 2", "go to drawer 1",
      "open drawer 1", "go to countertop 1", "go to fridge 1", "open fridge 1",
      "take mug 2 from fridge 1", "go to sinkbasin 1", "clean mug 2 with sinkbasin 1",
      "go to desk 1", "move mug 2 to desk 1"]
  # In the first receptacle of the sweep it is the planner's plan.
  task = env.task_from_spec(layout={"cabinet": 2, "desk": 1}, goals=[("pick_clean_then_place", "mug", "desk")],
                            objects=[("mug", 2, "cabinet 1")])
  assert env.solve(task) == solver.plan(task, 1) == [
      "go to cabinet 1", "open cabinet 1", "take mug 2 from cabinet 1", "go to sinkbasin 1",
      "clean mug 2 with sinkbasin 1", "go to desk 1", "move mug 2 to desk 1"]


def test_search_decisions_use_only_what_was_observed():
  """Move the sought object to a receptacle the sweep reaches later: the plan must be the same
  up to looking into the old receptacle (nothing before it could have told the two apart),
  and differ right after it (the object is not there any more)."""
  tok = CharTokenizer()
  env = envs.make("texthouse", tokenizer=tok)
  tasks = sample_tasks(env, range(200))
  checked = 0
  for i in range(200):
    t = row(tasks, i)
    fam, tk = int(t.goal_family[0]), int(t.goal_rec[0])
    if fam == C.TWO:
      continue
    s = int(np.flatnonzero(t.obj_kind == t.goal_obj[0])[0])
    listed = [r for r in range(C.R) if C.REC_NUM[r] <= t.rec_count[C.REC_KIND[r]] and C.REC_KIND[r] != tk]
    later = listed[listed.index(int(t.obj_loc[s])) + 1:]
    if fam == C.LOOK:   # keep the desklamp's own receptacle out of it
      later = [r for r in later if r not in t.obj_loc[t.obj_kind == C.LAMP]]
    if not later:
      continue
    moved = t.replace(obj_loc=t.obj_loc.copy())
    moved.obj_loc[s] = later[-1]
    a, b = solver.plan(t, 1, search=True), solver.plan(moved, 1, search=True)
    k = next(j for j, x in enumerate(a) if x.startswith("take "))
    assert b[:k] == a[:k], (i, a, b)
    assert b[k].startswith("go to ") and b[k] != a[k], (i, a, b)
    assert len(b) > len(a)
    checked += 1
  assert checked > 100
