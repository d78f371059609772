"""Expert plans replay to success: thousands of generated tasks, vmapped, both splits, TextLab."""
import collections

import jax
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.tasks import sample_tasks
from agent_rl.envs.texthouse import catalog as C
from conftest import CharTokenizer
from texthouse.common import batched, row, stack, turns


def replay(env, tok, tasks, n, chunk=32):
  """Replays in chunks of 32 (the batch test_texthouse_rules compiles) -> (plans, success, ok)."""
  out = [_replay(env, tok, jax.tree.map(lambda x: x[i:i + chunk], tasks), chunk) for i in range(0, n, chunk)]
  return [p for o in out for p in o[0]], np.concatenate([o[1] for o in out]), np.concatenate([o[2] for o in out])


def _replay(env, tok, tasks, n):
  plans = [env.solve(row(tasks, i)) for i in range(n)]
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
