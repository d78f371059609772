"""JitRL at test time: a frozen run's policy improves over rounds on its held-out panel from an
experience library of its own earlier episodes, with no gradient step (rollout/jitrl.py).

    python -m agent_rl.eval.jitrl --workdir=RUN --rounds=4 --beta=0.1 --candidates=4 \
        --seeds=3 [--config=FILE.py[:arg]] [--out=FILE.json]

(without --config the run's own saved config).

Protocol: each seed draws a panel of `eval.num_tasks` held-out tasks x `eval.k` samples
(`config.eval.seed + seed`); round r replays the same panel with the same rollout key (the
same initial states) under the jitrl search with the library of rounds < r, then adds its
episodes to the library. Two arms share everything but the library:
  jitrl   the library grows round by round (pi'(a|s) ~ pi(a|s) exp(Q^(s, a) / beta));
  frozen  the same candidates and resampling with an always-empty library: every Q^ ties,
          the pick is uniform over i.i.d. draws from pi, i.e. the frozen policy itself.
Reported per arm and round: success (any success in an episode) and return, mean over the
panel; and the last round's success difference jitrl - frozen per seed (paired: the same
panel and key), its mean and 95% t-interval over seeds (`eval.reproduce.stats.arm_stats`).
Only JAX envs (the search clones env states).
"""
from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
from absl import app, flags, logging

from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import SearchConfig
from agent_rl.rollout.jitrl import LibraryBuilder, check_config


def test_time_rounds(rollout_fn, params, tasks, key, *, rounds: int, builder: LibraryBuilder,
                     learn: bool = True) -> list[dict]:
  """`rounds` rollouts of the same tasks and key; with `learn` each uses the library of the
  earlier rounds. Without, every round is the same rollout (same key, an empty library), run
  once and reported for each round. rollout_fn(params, tasks, key, library) -> (batch, _).
  Returns per round {success, ret, library_transitions}."""
  if rounds < 1:
    raise ValueError(f"jitrl rounds must be >= 1, got {rounds}")
  out = []
  for _ in range(rounds if learn else 1):
    lib = builder.library()  # empty before anything is added
    batch, _ = rollout_fn(params, tasks, key, lib)
    out.append(dict(success=float(jnp.mean(jnp.any(batch.success, axis=1))),
                    ret=float(jnp.mean(jnp.sum(batch.reward * batch.valid, axis=1))),
                    library_transitions=int(lib.num_transitions)))
    if learn:
      builder.add(batch)
  return out if learn else out * rounds


def evaluate_jitrl(c, workdir: str, *, rounds: int, beta: float, candidates: int,
                   capacity: int, gamma: float, seeds: int) -> dict:
  from agent_rl.agents.routing import rollout_policy
  from agent_rl.envs.host.build import is_host
  from agent_rl.envs.tasks import eval_tasks
  from agent_rl.eval.evaluate import episode_config
  from agent_rl.eval.reproduce.stats import arm_stats
  from agent_rl.parallel.placement import make_placement
  from agent_rl.train.config import validate
  from agent_rl.train.pretrained import load_run_policy, run_agents
  from agent_rl.train.setup import build
  check_config(beta, capacity)
  if is_host(c.env.name):
    raise ValueError(f"config.env.name: jitrl clones env states in the compiled rollout; "
                     f"host env {c.env.name!r} cannot")
  if candidates < 1 or seeds < 1:
    raise ValueError(f"jitrl: candidates and seeds must be >= 1, got {candidates}, {seeds}")
  validate(c)
  place = make_placement(c.mesh)
  with place.context():
    setup = build(c, workdir)
    rp = load_run_policy(workdir, setup.model_cfg.vocab_size, place, which="latest",
                         compute=setup.model_cfg)
    ag = run_agents(workdir)
    policy = rollout_policy(ag.mode, rp.model_cfg, rp.lm_graphdef, ag.num)
    ecfg = dataclasses.replace(
        episode_config(c, setup.tokenizer), group_size=max(int(c.eval.k), 1), gate=None,
        search=SearchConfig(mode="jitrl", num_candidates=candidates, beta=beta))
    fn = make_rollout(policy, setup.env, ecfg, setup.pieces)
    arms = {"jitrl": [], "frozen": []}
    for s in range(seeds):
      tasks = place.batch(eval_tasks(setup.env, c.eval.num_tasks, c.eval.seed + s))
      key = jax.random.key(c.eval.seed + s)
      for arm in arms:
        arms[arm].append(test_time_rounds(
            fn, rp.params, tasks, key, rounds=rounds, learn=arm == "jitrl",
            builder=LibraryBuilder(capacity=capacity, gamma=gamma)))
  diff = arm_stats([j[-1]["success"] - f[-1]["success"]
                    for j, f in zip(arms["jitrl"], arms["frozen"])])  # paired by seed
  return dict(workdir=workdir, checkpoint_step=rp.step, rounds=rounds, beta=beta,
              candidates=candidates, capacity=capacity, gamma=gamma, seeds=seeds,
              panel=dict(num_tasks=int(c.eval.num_tasks), k=int(c.eval.k)),
              per_seed=arms, last_round_success_diff=dict(
                  mean=diff.mean, std=diff.std, ci95=diff.ci95, per_seed=diff.values))


def _define_flags() -> dict:
  """The CLI's flags (defined only when run as a program: importing this module for
  `test_time_rounds` must not claim absl flag names such as --workdir)."""
  from agent_rl.train.cli import define_config_flag
  f = dict(
      config=define_config_flag("config", "a config file (default: the run's saved config)"),
      workdir=flags.DEFINE_string("workdir", None, "the frozen run's workdir"),
      rounds=flags.DEFINE_integer("rounds", 4, "rounds over the same panel"),
      beta=flags.DEFINE_float("beta", 0.1, "KL weight / temperature of the modulation"),
      candidates=flags.DEFINE_integer("candidates", 4, "actions drawn from pi per turn"),
      capacity=flags.DEFINE_integer("capacity", 8192, "library slots (transitions, states)"),
      gamma=flags.DEFINE_float("gamma", 1.0, "return-to-go discount"),
      seeds=flags.DEFINE_integer("seeds", 3, "panels (eval.seed + 0..seeds-1)"),
      num_tasks=flags.DEFINE_integer("num_tasks", 0, "panel tasks (0: config's eval.num_tasks)"),
      k=flags.DEFINE_integer("k", 0, "episodes per task (0: the config's eval.k)"),
      out=flags.DEFINE_string("out", "", "JSON file (default: WORKDIR/jitrl.json)"))
  flags.mark_flags_as_required(["workdir"])
  return f


def main(f: dict):
  from agent_rl.train.config import check_fields
  from agent_rl.train.pretrained import load_run_config
  logging.set_verbosity(logging.WARNING)
  workdir = f["workdir"].value
  c = f["config"].value if f["config"].value is not None else load_run_config(workdir)
  check_fields(c)
  if f["num_tasks"].value:
    c.eval.num_tasks = f["num_tasks"].value
  if f["k"].value:
    c.eval.k = f["k"].value
  out = evaluate_jitrl(c, workdir, rounds=f["rounds"].value, beta=f["beta"].value,
                       candidates=f["candidates"].value, capacity=f["capacity"].value,
                       gamma=f["gamma"].value, seeds=f["seeds"].value)
  path = f["out"].value or os.path.join(workdir, "jitrl.json")
  with open(path, "w") as fh:
    json.dump(out, fh, indent=2)
  print(json.dumps(out["last_round_success_diff"], indent=2))


if __name__ == "__main__":
  _FLAGS = _define_flags()
  app.run(lambda argv: main(_FLAGS))
