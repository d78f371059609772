"""Benchmark (fidelity, not speed): a micro-batched update against the whole minibatch's, on
the windowed turn rows of a real rollout, with each slice aggregated by the minibatch's
counts (`losses.Counts`, train/step.py) and by its own (the older convention: the mean of
the slices' token means).

Per config: the run's own `build_run`, one RL batch of the initial policy (`phases.rl_batch`:
rollout, credit), its first minibatch of `minibatch_episodes x max_turns` turn rows, and the
objective's gradient three ways in float32:
  whole      one piece (the reference),
  minibatch  k slices, each with the minibatch's counts, the gradients summed (what runs),
  slice      k slices, each its own token mean, the gradients averaged (older verl).
Reports each sliced gradient's relative error and cosine against the whole one, and the
slices' loss-token counts (what makes the two conventions differ).

  python benchmarks/micro_counts.py [--configs gigpo_texthouse:tiny+train.minibatch_episodes=8]
      [--slices 8]

Writes benchmarks/results/micro_counts.json and prints it.
"""
from __future__ import annotations

import argparse
import os
import platform

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from length_buckets import first_batch  # noqa: E402
from results_io import write_json  # noqa: E402

# 8 episodes x 8 turns = 64 window rows: one piece fits this machine (the tiny configs' 64
# episodes would be 35 GiB by the start-up estimate); 8 slices of 8 turn rows are the full
# configs' layout (world_defaults.FULL_MICRO_ROWS).
DEFAULT = ("gigpo_texthouse:tiny+train.minibatch_episodes=8+train.microbatches=1,"
           "gigpo_minishop:tiny+train.minibatch_episodes=8+train.microbatches=1")


def _flat(tree) -> np.ndarray:
  return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(tree)])


def _compare(g: np.ndarray, ref: np.ndarray) -> dict:
  return {"relative_error": float(np.linalg.norm(g - ref) / np.linalg.norm(ref)),
          "cosine": float(g @ ref / (np.linalg.norm(g) * np.linalg.norm(ref)))}


def bench(spec: str, k: int) -> dict:
  from agent_rl import losses
  from agent_rl.agents.routing import make_apply
  from agent_rl.objective import build_objective
  from agent_rl.train.checks import minibatch_rows

  with first_batch(spec) as (c, _, _, r, out):
    n = minibatch_rows(c)
    mb = jax.tree.map(lambda x: None if x is None else x[:n], out.rows)
    params = out.state.params
    apply_fn = make_apply(r.setup.agents.mode, r.spec.graphdef, r.setup.agents.frozen)
    objective = build_objective(c)
    key = jax.random.key(0)

    @jax.jit
    def grad(p, rows, counts):
      f = lambda q: objective(apply_fn(q, rows.tokens, rows.position, rows.attention_mask,
                                       agent=rows.agent), rows, key, None, counts)[0]
      return jax.grad(f)(p)

    whole = _flat(grad(params, mb, None))
    counts = losses.mask_counts(mb.loss_mask, mb.turn_index)  # as train/step.py counts them
    parts = [jax.tree.map(lambda x: None if x is None else x[i * n // k:(i + 1) * n // k], mb)
             for i in range(k)]
    summed = sum(_flat(grad(params, p, counts)) for p in parts)
    averaged = sum(_flat(grad(params, p, None)) for p in parts) / k
    tokens = [float(jnp.sum(p.loss_mask)) for p in parts]
  return {"config": spec, "rows": n, "slices": k, "row_length": int(mb.tokens.shape[1]),
          "loss_agg_mode": c.loss.agg_mode, "loss_terms": c.loss.terms,
          "slice_loss_tokens": {"min": min(tokens), "max": max(tokens),
                                "mean": float(np.mean(tokens))},
          "minibatch_counts": _compare(summed, whole),
          "slice_means": _compare(averaged, whole)}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--configs", default=DEFAULT)
  ap.add_argument("--slices", type=int, default=8)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                "results", "micro_counts.json"))
  args = ap.parse_args()
  results = [bench(s, args.slices) for s in args.configs.split(",")]
  for res in results:  # what runs must be the whole minibatch's update, up to float32 sums
    assert res["minibatch_counts"]["relative_error"] < 1e-4, res
  write_json(args.out, {
      "results": results, "platform": platform.platform(), "devices": str(jax.devices()),
      "note": ("gradients of the run's objective on the first minibatch of the initial "
               "policy's rollout (float32); relative_error = |g - g_whole| / |g_whole|; "
               "minibatch_counts is train.step's micro-batch path, slice_means the mean of "
               "slice-local token means it replaced")})


if __name__ == "__main__":
  main()
