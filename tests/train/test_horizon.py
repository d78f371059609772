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


def _with_jax_env(path) -> bool:
  """Configs whose tiny env is a JAX env (host games have no solver in the graph)."""
  c = _config(path)
  return c is not None and not c.env.name.startswith("host:") and c.env.name in envs.ENVS


JAX_CONFIGS = [p for p in CONFIGS if _with_jax_env(p)]


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
  fit = sum(n <= c.rollout.max_turns for n in need) / len(need)
  assert fit >= 0.5, (f"{os.path.basename(path)}: rollout.max_turns={c.rollout.max_turns} fits "
                      f"{fit:.0%} of expert plans (turns needed: {sorted(need)})")


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
