"""Each paper config's tiny horizon admits its env's expert plans: a config whose turns
cannot fit the shortest solutions measures 0 on every arm however good the method (the first
`ragen_frozenlake` row: 5 one-move turns on 4x4 maps that need >= 6 moves). A slippery
FrozenLake's solver returns the optimal policy's most likely path, cut at its first repeated
state (mostly 1-5 moves, short of the goal), so FrozenLake is checked against the shortest
path of the same map without slip instead."""
import glob
import importlib.util
import os

import jax
import pytest

from agent_rl import envs
from agent_rl.envs.tasks import sample_tasks
from agent_rl.tokenizers import ByteTokenizer

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def _config(path):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.get_config("tiny") if hasattr(mod, "get_config") else None


TINY = {p: _config(p) for p in CONFIGS}  # each config module loaded once
JAX_CONFIGS = [p for p, c in TINY.items()  # a JAX env: its solver runs here, no game package
               if c is not None and not c.env.name.startswith("host:") and c.env.name in envs.ENVS]
HOST_CONFIGS = [p for p, c in TINY.items() if c is not None and c.env.name.startswith("host:")]


def _assert_most_fit(path, max_turns: int, need: list) -> None:
  fit = sum(n <= max_turns for n in need) / len(need)
  assert fit >= 0.5, (f"{os.path.basename(path)}: rollout.max_turns={max_turns} fits "
                      f"{fit:.0%} of expert plans (turns needed: {sorted(need)})")


@pytest.mark.parametrize("path", JAX_CONFIGS, ids=[os.path.basename(p) for p in JAX_CONFIGS])
def test_tiny_turns_fit_most_expert_plans(path):
  """One turn per plan entry (a whole turn, or one action written as one turn: data/demos.py
  replays a plan that way)."""
  c = _config(path)
  env = envs.make(c.env.name, tokenizer=ByteTokenizer(), **dict(c.env.kwargs))
  tasks = sample_tasks(env, range(32))
  need = []
  for i in range(32):
    try:
      need.append(len(env.solve(jax.tree.map(lambda x: x[i], tasks))))
    except Exception:  # noqa: BLE001 — an unsolvable sample says nothing about the horizon
      continue
  assert need, f"{c.env.name}: the solver solved none of 32 sampled tasks"
  _assert_most_fit(path, c.rollout.max_turns, need)


@pytest.mark.parametrize("path", [p for p in CONFIGS if "frozenlake" in os.path.basename(p)])
def test_frozenlake_turns_fit_the_shortest_paths(path):
  c = _config(path)
  kw = {**dict(c.env.kwargs), "is_slippery": False}
  env = envs.make("frozenlake", tokenizer=ByteTokenizer(), **kw)
  tasks = sample_tasks(env, range(32))
  moves = [len(env.solve(jax.tree.map(lambda x: x[i], tasks))) for i in range(32)]
  per_turn = int(c.env.kwargs.get("max_actions", 1))
  assert max(moves) <= min(c.env.kwargs.max_steps, c.rollout.max_turns * per_turn), (
      f"{os.path.basename(path)}: shortest paths of {sorted(moves)} moves vs max_steps="
      f"{c.env.kwargs.max_steps}, {c.rollout.max_turns} turns x {per_turn} actions")


# CI budget (2026-12-07): ScienceWorld's case (30 s: the JVM and its gold paths) runs with -m slow,
# as its config does (tests/train/test_configs.py); the TextWorld / ALFWorld cases run in CI.
@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if "scienceworld" in p
                                               else []) for p in HOST_CONFIGS],
                         ids=[os.path.basename(p) for p in HOST_CONFIGS])
def test_host_tiny_turns_fit_most_of_the_games_expert_plans(path):
  """A host config's SFT demos (data/host_demos.py) replay its games' expert plans, one turn
  per command: most must fit `rollout.max_turns` (the first tiny textworld_cooking setting, 8
  turns for TWX's 8-12-command gold paths, replayed 6% of its demos to success). A command
  too long for `rollout.max_action_tokens` is already a start-up error (data/scripted.py)."""
  import numpy as np
  from agent_rl.envs.host.build import adapter_name, make_env
  from agent_rl.rollout.compiled import episode_keys
  from agent_rl.train.sft import DEMO_SEED_BASE
  c = _config(path)
  pytest.importorskip(adapter_name(c.env.name))  # the adapters are named for their packages
  c.env.host.workers = 0
  if "games_per_family" in c.env.kwargs:  # ALFWorld's generator: its plans whatever the count
    c.env.kwargs.games_per_family = 1     # (8 a family take ~1 min to write and verify)
  c.rollout.num_tasks, c.rollout.group_size, c.eval.num_tasks = 4, 1, 1  # a pool of 4 games
  env = make_env(c, ByteTokenizer())
  try:
    tasks = np.asarray(sample_tasks(env, [DEMO_SEED_BASE + i for i in range(4)]))
    keys, _, _ = episode_keys(jax.random.key(0), len(tasks), 1)
    plans = [p for p in env.expert_plans(tasks, np.asarray(keys)) if p]
  finally:
    env.close()
  assert plans, f"{os.path.basename(path)}: no expert plan for 4 training games"
  _assert_most_fit(path, c.rollout.max_turns, [len(p) for p in plans])
