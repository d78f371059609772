"""benchmarks/worlds.py on Sokoban: the plan bank is the solver's plans tokenized, and the
jitted plan-replay loop (auto-reset, checksum, episode counts) equals a plain host loop over
rows stepping one env at a time; the timing JSON block has the harness breakdown."""
import jax
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.base import Text
from benchmarks.worlds import BREAKDOWNS, make_run, plan_bank, world_result
from agent_rl.tokenizers.byte_level import ByteTokenizer

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def sokoban():
  """(env, 4 tasks): one pool for every test (each new pool shape compiles the generator)."""
  env = envs.make("sokoban", tokenizer=TOK, dim_room=(6, 6), num_boxes=1, max_steps=100)
  tasks = jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.key(1), 4))
  return env, tasks


def _reference(env, tasks, bank, batch, steps):
  """Row by row, step by step on the host: (checksum mod 2^32, episodes ended, solved)."""
  step = jax.jit(env.step)
  pool = bank.tokens.shape[0]
  check, ended, solved = 0, 0, 0
  for b in range(batch):
    task = jax.tree.map(lambda x: x[b % pool], tasks)
    start, _ = env.reset(jax.random.key(0), task)
    state, turn = start, 0
    for _ in range(steps):
      t = turn % int(bank.plan_len[b % pool])
      p = b % pool
      act = Text(tokens=np.asarray(bank.tokens[p, t]), length=np.int32(bank.length[p, t]))
      state, obs, reward, done, info = step(state, act)
      tokens = np.asarray(obs.tokens, np.int64)
      check += int(np.sum(tokens * (np.arange(tokens.shape[-1]) + 1)))
      check += int(np.round(np.float32(reward) * np.float32(1000)))
      if bool(done):
        ended += 1
        solved += int(bool(info["success"]))
        state, turn = start, 0
      else:
        turn += 1
  return check % 2 ** 32, ended, solved


def test_plan_bank_is_the_solver_plans(sokoban):
  env, tasks = sokoban
  bank = plan_bank(env, tasks)
  for p in range(4):
    plan = env.solve(jax.tree.map(lambda x: x[p], tasks))
    assert bank.plan_len[p] == len(plan)
    for t, a in enumerate(plan):
      assert TOK.decode(bank.tokens[p, t, :bank.length[p, t]]) == f"<answer>{a}</answer>"
    assert (bank.length[p, len(plan):] == 0).all()


def test_plan_replay_loop_matches_a_host_loop(sokoban):
  env, tasks = sokoban
  bank = plan_bank(env, tasks)
  batch, steps = 5, int(bank.plan_len.max()) + 2  # every row ends an episode and restarts
  check, ended, solved = make_run(env, bank, batch, steps)(tasks)
  want = _reference(env, tasks, bank, batch, steps)
  assert (int(check), int(ended), int(solved)) == want
  assert want[1] >= batch and want[2] == want[1]  # the expert solves every episode


def test_world_result_has_timings_and_breakdown(sokoban):
  env, tasks = sokoban
  res = world_result("sokoban", env, batch=8, steps=6, repeats=1, tasks=tasks)
  assert res["pool"] == 4 and res["batch"] == 8
  assert res["steps_per_s"] == pytest.approx(1e9 / res["ns_per_step"])
  assert res["solved"] == res["episodes"] > 0
  pieces = {"harness"} | (set(BREAKDOWNS.get("sokoban")(env)) if "sokoban" in BREAKDOWNS.names()
                          else set())
  assert set(res["breakdown_ns_per_step"]) == pieces
  assert all(v > 0 for v in res["breakdown_ns_per_step"].values())
