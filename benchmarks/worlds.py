"""Worlds benchmark (issue 18), its generic core: any registered env's jitted, vmapped
`env.step` at batch 1,024, driven by a fake policy that replays each task's solver plan.

A pool of tasks is solved on the host (`env.solve`), each plan's turns tokenized as the
model would write them (`<answer>{action}</answer>`): the `PlanBank`. Row b of the batch plays
pool task b mod P; at its turn t it sends turn t of that plan, so episodes make the progress an
expert makes (valid actions, rewards, success) rather than a random policy's mostly invalid
text. A finished row resets to its task's start state and replays the plan from turn 0. Each
observation is folded into a checksum (so XLA cannot drop the render), and only the compiled
scan of `steps` batch steps is timed (the fastest of `repeats` calls, robust to a shared box).

Breakdowns: `harness` (a step that returns the state and one action token: the loop alone) is
measured for every env; env-specific pieces (parse, dynamics, render, ...) come from
`BREAKDOWNS`, where a world's module registers `(env) -> {piece: batched step}` built from its
public functions; the JSON has ns per env step of each.

The full benchmark adds TextHouse and MiniShop, their plain-Python ports
(tests/envs/<world>/reference.py) and the TextWorld peer (`benchmarks/textworld_peer.py`,
`textworld_steps_per_s(n_steps, seed)`). Run: `python benchmarks/worlds.py [--quick]
[--envs sokoban]`; `--textworld` adds that peer (needs requirements-bench.txt).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl import envs
from agent_rl.envs.base import Text
from agent_rl.registry import Registry

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_seconds  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results", "worlds.json")
TURN_FMT = "<answer>{}</answer>"
# env name -> (env) -> {piece name: batched step `(states, actions) -> step outputs`}.
BREAKDOWNS = Registry("worlds breakdown")


@dataclasses.dataclass(frozen=True)
class PlanBank:
  """The fake policy's turns: tokens [P, T, A] int32 (turn t of task p's solver plan, padded
  with the tokenizer's pad id), length [P, T] int32, plan_len [P] int32 (>= 1)."""
  tokens: np.ndarray
  length: np.ndarray
  plan_len: np.ndarray


def plan_bank(env, tasks: Any, *, fmt: str = TURN_FMT) -> PlanBank:
  """Solver plans of the P tasks in `tasks` (leaves [P, ...]), tokenized turn by turn."""
  pool = int(jax.tree.leaves(tasks)[0].shape[0])
  turns = []
  for p in range(pool):
    plan = env.solve(jax.tree.map(lambda x: x[p], tasks))
    if not plan:
      raise ValueError(f"plan_bank: task {p} has an empty solver plan (already solved?)")
    turns.append([env.tokenizer.encode(fmt.format(a)) for a in plan])
  t_max = max(len(t) for t in turns)
  a_max = max(len(ids) for t in turns for ids in t)
  tokens = np.full((pool, t_max, a_max), env.tokenizer.pad_id, np.int32)
  length = np.zeros((pool, t_max), np.int32)
  for p, plan in enumerate(turns):
    for t, ids in enumerate(plan):
      tokens[p, t, :len(ids)], length[p, t] = ids, len(ids)
  return PlanBank(tokens, length, np.array([len(t) for t in turns], np.int32))


def harness_step(states, actions: Text):
  """The loop alone: state unchanged, the first action token as the observation, no reward,
  never done (the `harness` row of every breakdown)."""
  n = actions.tokens.shape[0]
  obs = Text(tokens=actions.tokens[:, :1], length=jnp.ones((n,), jnp.int32))
  return states, obs, jnp.zeros((n,), jnp.float32), jnp.zeros((n,), bool), {}


def make_run(env, bank: PlanBank, batch: int, steps: int,
             step: Optional[Callable] = None) -> Callable:
  """`run(tasks) -> (checksum u32, episodes ended i32, episodes solved i32)`, jitted: `steps`
  batch steps of plan replay with auto-reset. tasks: the pool (leaves [P, ...]); row b plays
  task b mod P. step: a batched step (default `jax.vmap(env.step)`; a breakdown's piece)."""
  step = jax.vmap(env.step) if step is None else step
  pool = bank.tokens.shape[0]
  rows = jnp.arange(batch) % pool
  tok, lens, plan_len = (jnp.asarray(x) for x in (bank.tokens, bank.length, bank.plan_len))

  @jax.jit
  def run(tasks):
    tasks = jax.tree.map(lambda x: x[rows], tasks)
    starts, _ = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), batch), tasks)

    def body(carry, _):
      states, turn, check, ended, solved = carry
      t = turn % plan_len[rows]
      acts = Text(tokens=tok[rows, t], length=lens[rows, t])
      states, obs, reward, done, info = step(states, acts)
      weights = jnp.arange(obs.tokens.shape[-1], dtype=jnp.uint32) + 1
      check = check + jnp.sum(obs.tokens.astype(jnp.uint32) * weights, dtype=jnp.uint32)
      check = check + jnp.sum(jnp.round(reward * 1000).astype(jnp.int32)).astype(jnp.uint32)
      ended = ended + jnp.sum(done, dtype=jnp.int32)
      solved = solved + jnp.sum(done & info.get("success", jnp.zeros_like(done)), dtype=jnp.int32)
      states = jax.tree.map(
          lambda s, r: jnp.where(done.reshape((-1,) + (1,) * (s.ndim - 1)), r, s), states, starts)
      return (states, jnp.where(done, 0, turn + 1), check, ended, solved), None

    zero = jnp.zeros((), jnp.int32)
    init = (starts, jnp.zeros((batch,), jnp.int32), jnp.uint32(0), zero, zero)
    (_, _, check, ended, solved), _ = jax.lax.scan(body, init, None, length=steps)
    return check, ended, solved

  return run


def env_timing(env, tasks, bank: PlanBank, *, batch: int = 1024, steps: int = 100,
               repeats: int = 5, step: Optional[Callable] = None) -> dict:
  """{steps_per_s, ns_per_step, episodes, solved} of plan replay at `batch` (see make_run)."""
  run = make_run(env, bank, batch, steps, step)
  sec = best_seconds(run, tasks, repeats=repeats)
  _, ended, solved = run(tasks)
  return {"steps_per_s": batch * steps / sec, "ns_per_step": 1e9 * sec / (batch * steps),
          "episodes": int(ended), "solved": int(solved)}


def world_result(name: str, env, *, pool: int = 16, batch: int = 1024, steps: int = 100,
                 repeats: int = 5, seed: int = 0, tasks: Any = None, fmt: str = TURN_FMT) -> dict:
  """One env's JSON block: the full step and the ns/step of every breakdown piece.

  tasks: the pool (leaves [P, ...]); default `pool` tasks sampled from `seed`. fmt: how a
  solver action becomes the turn text (`plan_bank`)."""
  if tasks is None:
    tasks = jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.key(seed), pool))
  pool = int(jax.tree.leaves(tasks)[0].shape[0])
  bank = plan_bank(env, tasks, fmt=fmt)
  out = {"pool": pool, "batch": batch, "steps_per_call": steps,
         "mean_plan_len": float(bank.plan_len.mean()),
         **env_timing(env, tasks, bank, batch=batch, steps=steps, repeats=repeats)}
  pieces = {"harness": harness_step}
  if name in BREAKDOWNS.names():
    pieces.update(BREAKDOWNS.get(name)(env))
  out["breakdown_ns_per_step"] = {
      k: env_timing(env, tasks, bank, batch=batch, steps=steps, repeats=repeats, step=fn)[
          "ns_per_step"] for k, fn in pieces.items()}
  return out


def _tokenizer():
  from agent_rl.tokenizers.byte_level import ByteTokenizer
  return ByteTokenizer()  # envs are tokenizer-agnostic; this one needs no model file


# name -> env kwargs of the benchmark: the worlds with the configs' settings (windowed
# history repeats the goal; verl-agent lists the admissible actions, `--list-actions`).
WORLD_KWARGS = {"sokoban": dict(dim_room=(6, 6), num_boxes=1, max_steps=100),
                "texthouse": dict(max_steps=50, repeat_goal=True),
                "textlab": dict(repeat_goal=True),
                "minishop": dict(max_steps=15)}
PORTS = ("texthouse", "textlab", "minishop")  # worlds with a plain-Python port


def _register_worlds():
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import worlds_pieces as wp
  for name, fn in (("texthouse", wp.texthouse_pieces), ("textlab", wp.texthouse_pieces),
                   ("minishop", wp.minishop_pieces)):
    if name not in BREAKDOWNS.names():
      BREAKDOWNS.register(name, fn)
  return wp


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--quick", action="store_true", help="batch 64, 20 steps (smoke run)")
  ap.add_argument("--envs", default=",".join(WORLD_KWARGS), help="comma list of env names")
  ap.add_argument("--textworld", action="store_true", help="add the TextWorld peer")
  ap.add_argument("--tokenizer", choices=("trained", "byte"), default="trained",
                  help="trained: a 1,024-piece sentencepiece on the env's corpus (as tiny runs); "
                       "byte: one token per byte (longest observations)")
  ap.add_argument("--list-actions", action="store_true", help="worlds list admissible actions")
  ap.add_argument("--out", default=RESULTS)
  args = ap.parse_args(argv)
  batch, steps, reps = (64, 20, 2) if args.quick else (1024, 100, 5)
  res = {"backend": jax.default_backend(), "device": str(jax.devices()[0]),
         "tokenizer": args.tokenizer, "list_actions": args.list_actions,
         "load_average_start": os.getloadavg()}
  wp = _register_worlds()
  for name in [n.strip() for n in args.envs.split(",") if n.strip()]:
    kw = dict(WORLD_KWARGS.get(name, {}))
    if args.list_actions and name in PORTS:
      kw["list_actions"] = True
    tok = wp.trained_tokenizer(name, kw) if args.tokenizer == "trained" else _tokenizer()
    env = envs.make(name, tokenizer=tok, **kw)
    res[name] = world_result(name, env, batch=batch, steps=steps, repeats=reps)
    res[name]["obs_len"] = int(env.obs_len) if hasattr(env, "obs_len") else None
    if name in PORTS:
      tasks = jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.key(0), 16))
      plans = [env.solve(jax.tree.map(lambda x: x[i], tasks)) for i in range(16)]
      res[name]["python_port"] = wp.port_timing(name, env, tasks, plans,
                                                steps=200 if args.quick else 2000)
      res[name]["speedup_vs_python_port"] = (res[name]["steps_per_s"]
                                             / res[name]["python_port"]["steps_per_s"])
  if args.textworld:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from textworld_peer import textworld_steps_per_s
    tw = res["textworld"] = textworld_steps_per_s(200 if args.quick else 2000, 1)
    for name in PORTS:
      if name in res:  # the target: >= 1,000x TextWorld per env step
        res[name]["speedup_vs_textworld"] = res[name]["steps_per_s"] / tw["step_steps_per_s"]
        res[name]["speedup_vs_textworld_admissible"] = (res[name]["steps_per_s"]
                                                        / tw["step_admissible_steps_per_s"])
  res["load_average_end"] = os.getloadavg()
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  from results_io import write_json
  write_json(args.out, res)


if __name__ == "__main__":
  main()
