"""Benchmark: epochs x minibatches as one `lax.scan` in one jit (purejaxrl) vs the Python loop.

Today `agent_rl.train.learner.update` runs `epochs` shuffled passes in Python: per minibatch
it gathers the rows (eager gathers), calls the jitted, donated train step, and adds
the metrics. purejaxrl instead permutes once per epoch, reshapes the rows to
[epochs * minibatches, rows, ...] and `lax.scan`s the step over them inside one jit
(`agent_rl.train.epochs.make_scan_update`). Both
paths here take the same permutations (`jax.random.permutation(fold_in(key, e), R)`), so
they compute the same updates; the script checks the final parameters agree.

Model: the learner tests' tiny policy (hidden 32, 1 layer, 2 heads, vocab 400) and a
medium one (hidden 256, 2 layers, vocab 4096), the RL step of the base config (PPO clip,
token-mean). Rows R = 16 of L = 128 tokens, minibatches of 4 rows, 2 epochs (8 steps per
update). Paired rounds (loop, scan, loop, scan, ...), one update each, median per path.

  python benchmarks/learner_scan.py [--rounds 7] [--quick]

Writes benchmarks/results/learner_scan.json (or --out) and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from agent_rl.models import ModelConfig  # noqa: E402
from agent_rl.objective import Minibatch, build_objective  # noqa: E402
from agent_rl.train.config import base_config  # noqa: E402
from agent_rl.train.epochs import make_scan_update  # noqa: E402
from agent_rl.train.learner import update  # noqa: E402
from agent_rl.train.policy import ActorCritic, make_apply  # noqa: E402
from agent_rl.train.step import TrainState, make_train_step  # noqa: E402
from results_io import write_json  # noqa: E402

MODELS = {
    "tiny": ModelConfig(vocab_size=400, hidden=32, num_layers=1, num_heads=2, num_kv_heads=1,
                        head_dim=16, intermediate=64),
    "medium": ModelConfig(vocab_size=4096, hidden=256, num_layers=2, num_heads=4,
                          num_kv_heads=2, head_dim=64, intermediate=1024),
}
ROWS, LENGTH, MB_ROWS, EPOCHS = 16, 128, 4, 2


def _rows(cfg: ModelConfig) -> Minibatch:
  rng = np.random.default_rng(0)
  f = lambda x: jnp.asarray(x, jnp.float32)
  return Minibatch(tokens=jnp.asarray(rng.integers(0, cfg.vocab_size, (ROWS, LENGTH)), jnp.int32),
                   position=jnp.broadcast_to(jnp.arange(LENGTH, dtype=jnp.int32), (ROWS, LENGTH)),
                   attention_mask=jnp.ones((ROWS, LENGTH), bool),
                   loss_mask=f(rng.random((ROWS, LENGTH)) < 0.5),
                   turn_index=jnp.zeros((ROWS, LENGTH), jnp.int32),
                   old_logprobs=f(-np.log(cfg.vocab_size) + 0.1 * rng.standard_normal((ROWS, LENGTH))),
                   advantages=f(rng.standard_normal((ROWS, LENGTH))))


def bench(cfg: ModelConfig, rounds: int) -> dict:
  graphdef, params = nnx.split(ActorCritic(cfg, rngs=nnx.Rngs(0)))
  optimizer = optax.adamw(1e-4, weight_decay=0.01)
  apply_fn, objective = make_apply(graphdef), build_objective(base_config())
  loss = lambda p, mb, key: objective(apply_fn(p, mb.tokens, mb.position, mb.attention_mask),
                                      mb, key)
  step = make_train_step(loss, optimizer)
  step_jit = jax.jit(step, donate_argnums=0)
  scan_jit = jax.jit(make_scan_update(step, epochs=EPOCHS, minibatch_rows=MB_ROWS),
                     donate_argnums=0)
  new_state = lambda: TrainState(params=jax.tree.map(jnp.copy, params),
                                 opt_state=optimizer.init(params),
                                 step=jnp.zeros((), jnp.int32), rng=jnp.zeros((2,), jnp.uint32))
  rows, key = _rows(cfg), jax.random.key(0)
  paths = {
      "python_loop": lambda s: update(step_jit, s, rows, key, epochs=EPOCHS,
                                      minibatch_rows=MB_ROWS),
      "lax_scan": lambda s: scan_jit(s, rows, key),
  }
  states, walls, first = {}, {n: [] for n in paths}, {}
  for name, fn in paths.items():  # first call compiles
    t0 = time.perf_counter()
    s, m = fn(new_state())
    jax.block_until_ready((s, m))
    first[name] = time.perf_counter() - t0
    states[name] = s
  diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in
             zip(jax.tree.leaves(states["python_loop"].params),
                 jax.tree.leaves(states["lax_scan"].params)))
  for _ in range(rounds):
    for name, fn in paths.items():
      t0 = time.perf_counter()
      states[name], m = fn(states[name])
      jax.block_until_ready((states[name], m))
      walls[name].append(time.perf_counter() - t0)
  med = {n: statistics.median(w) for n, w in walls.items()}
  return dict(update_seconds=med, rounds={n: [round(x, 4) for x in w] for n, w in walls.items()},
              first_call_seconds=first, speedup_scan_vs_loop=med["python_loop"] / med["lax_scan"],
              max_param_diff_after_one_update=diff)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--quick", action="store_true", help="3 rounds, tiny model only")
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                "learner_scan.json"))
  args = ap.parse_args()
  rounds = 3 if args.quick else args.rounds
  names = ["tiny"] if args.quick else list(MODELS)
  results = {}
  for n in names:
    results[n] = bench(MODELS[n], rounds)
    print(n, json.dumps(results[n]["update_seconds"]),
          f"speedup {results[n]['speedup_scan_vs_loop']:.2f}x", flush=True)
  out = dict(benchmark="learner_scan", rows=ROWS, length=LENGTH, minibatch_rows=MB_ROWS,
             epochs=EPOCHS, rounds=rounds, results=results, jax=jax.__version__,
             platform=platform.platform(), cpus=os.cpu_count(), load_average=os.getloadavg())
  write_json(args.out, out, indent=1)


if __name__ == "__main__":
  main()
