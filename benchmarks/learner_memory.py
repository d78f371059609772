"""Benchmark: learner memory and speed at a real vocabulary, chunked log-probs vs materialized.

The step is the learner's own RL train step (`agent_rl.objective.build_objective` of the base
config: PPO clip, token-mean, entropy computed; `agent_rl.train.step.make_train_step`:
value-and-grad + AdamW, the state donated) over `agent_rl.train.policy.ActorCritic` (critic none). Model:
hidden 512, 8 layers, 8 heads / 4 KV heads (head_dim 64), intermediate 2048, vocab 151,936
(Qwen2's), tied embeddings, float32 (or `--dtype bfloat16`: bf16 compute over f32 master
weights). Shapes (issue 16 §5): batch 8 x 512 and 4 x 2,048 tokens.

Variants, in one run:
  chunked       `model.logprob_chunk` = --chunk (256): `shifted_token_stats` scans the
                sequence in chunks with a custom VJP that recomputes each chunk's logits.
  materialized  `model.logprob_chunk` = 0: [B, L, V] f32 logits, autodiff through them
                (the learner before issue 16).
  chunked+remat the chunked step with `model.remat = "block"` (jax.checkpoint per block).

Peak memory is read from the compiled executable's `memory_analysis()` (arguments + outputs
- aliased (donated) + temporaries): compile only, nothing runs, so it is reported for every
shape and variant. Steps are timed only where the compiled peak fits `--max-run-gib` of this
machine's RAM (the materialized 4 x 2,048 step does not: reported from memory analysis only).
Timed variants run in paired rounds (A, B, C, A, B, C, ...) on one shared state, each round
one step, so the shared CPU's load hits them alike; each variant reports its median step.

  python benchmarks/learner_memory.py [--quick] [--steps 3] [--chunk 256] [--dtype bfloat16]

Result (benchmarks/results/learner_memory.json; float32, chunk 256 tokens; the timing from
one --quick round on 2 cores shared with ~7 other jobs, load ~17, so only the ratio means
something): peak GiB chunked / materialized / chunked+remat = 4.83 / 8.44 / 2.59 at 8 x 512
and 9.28 / 17.52 / 2.83 at 4 x 2,048 (ratios 0.53 and, with remat, 0.16: the rest of the
chunked step is the 8 blocks' attention activations, which remat removes); step 510 s
chunked vs 463 s materialized at 8 x 512 (0.91x).

--quick: one timed round, timing only the first shape. --compile-only: memory analysis only.
--shapes 4x2048: other shapes. Writes benchmarks/results/learner_memory.json
(or --out) and prints it.
"""
from __future__ import annotations

import argparse
import dataclasses
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
from agent_rl.train.policy import ActorCritic, make_apply  # noqa: E402
from agent_rl.train.step import TrainState, make_train_step  # noqa: E402
from results_io import write_json  # noqa: E402

CFG = ModelConfig(vocab_size=151_936, hidden=512, num_layers=8, num_heads=8, num_kv_heads=4,
                  head_dim=64, intermediate=2048, tie_embeddings=True, qkv_bias=True)
SHAPES = ((8, 512), (4, 2048))
GIB = 2 ** 30


def variants(chunk: int) -> dict:
  """name -> (logprob_chunk, remat)."""
  return {"chunked": (chunk, "none"), "materialized": (0, "none"),
          "chunked+remat": (chunk, "block")}


def _model(cfg: ModelConfig, chunk: int, abstract: bool):
  make = lambda: ActorCritic(cfg, logprob_chunk=chunk, rngs=nnx.Rngs(0))
  return nnx.split(nnx.eval_shape(make) if abstract else make())


def _minibatch(b: int, l: int, vocab: int) -> Minibatch:
  rng = np.random.default_rng(0)
  f = lambda x: jnp.asarray(x, jnp.float32)
  return Minibatch(tokens=jnp.asarray(rng.integers(0, vocab, (b, l)), jnp.int32),
                   position=jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l)),
                   attention_mask=jnp.ones((b, l), bool),
                   loss_mask=f(np.ones((b, l))).at[:, 0].set(0.0),
                   turn_index=jnp.zeros((b, l), jnp.int32),
                   old_logprobs=f(-np.log(vocab) + 0.1 * rng.standard_normal((b, l))),
                   advantages=f(rng.standard_normal((b, l))))


def compile_step(cfg: ModelConfig, chunk: int, b: int, l: int, optimizer):
  """(compiled step, memory dict, compile seconds) from abstract inputs only."""
  graphdef, params = _model(cfg, chunk, abstract=True)
  apply_fn, objective = make_apply(graphdef), build_objective(base_config())
  loss = lambda p, mb, key: objective(apply_fn(p, mb.tokens, mb.position, mb.attention_mask),
                                      mb, key)
  step = make_train_step(loss, optimizer)
  state = TrainState(params=params, opt_state=jax.eval_shape(optimizer.init, params),
                     step=jax.ShapeDtypeStruct((), jnp.int32),
                     rng=jax.ShapeDtypeStruct((2,), jnp.uint32))
  mb = jax.eval_shape(lambda: _minibatch(b, l, cfg.vocab_size))
  t0 = time.perf_counter()
  compiled = jax.jit(step, donate_argnums=0).lower(state, mb).compile()
  seconds = time.perf_counter() - t0
  ma = compiled.memory_analysis()
  mem = dict(argument_bytes=ma.argument_size_in_bytes, output_bytes=ma.output_size_in_bytes,
             alias_bytes=ma.alias_size_in_bytes, temp_bytes=ma.temp_size_in_bytes)
  mem["peak_bytes"] = (mem["argument_bytes"] + mem["output_bytes"] - mem["alias_bytes"]
                       + mem["temp_bytes"])
  mem["peak_gib"] = round(mem["peak_bytes"] / GIB, 3)
  return compiled, mem, seconds


def time_rounds(compiled: dict, cfg: ModelConfig, b: int, l: int, optimizer, rounds: int):
  """Median wall seconds per step of each compiled step, in paired rounds on one state."""
  _, params = _model(cfg, 0, abstract=False)  # parameters do not depend on the chunk
  state = TrainState(params=params, opt_state=optimizer.init(params),
                     step=jnp.zeros((), jnp.int32), rng=jnp.zeros((2,), jnp.uint32))
  mb = _minibatch(b, l, cfg.vocab_size)
  walls = {name: [] for name in compiled}
  losses = {}
  for name, fn in compiled.items():  # warm-up: first call pays allocation / page faults
    state, m = fn(state, mb)
    jax.block_until_ready(m)
  for _ in range(rounds):
    for name, fn in compiled.items():
      t0 = time.perf_counter()
      state, m = fn(state, mb)
      losses[name] = float(m["loss/total"])  # blocks on the step
      walls[name].append(time.perf_counter() - t0)
  return {n: dict(step_seconds=statistics.median(w), rounds=[round(x, 3) for x in w],
                  tokens_per_second=b * l / statistics.median(w), last_loss=losses[n])
          for n, w in walls.items()}


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="1 round; time only 8 x 512")
  ap.add_argument("--steps", type=int, default=3, help="timed rounds (one step per variant)")
  ap.add_argument("--chunk", type=int, default=256, help="logprob_chunk of the chunked step")
  ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  ap.add_argument("--max-run-gib", type=float, default=9.0,
                  help="time a step only if its compiled peak fits this much RAM")
  ap.add_argument("--time-remat", action="store_true", help="also time chunked+remat")
  ap.add_argument("--shapes", default=",".join(f"{b}x{l}" for b, l in SHAPES),
                  help="comma-separated BxL shapes")
  ap.add_argument("--compile-only", action="store_true", help="memory analysis, no timing")
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                "learner_memory.json"))
  args = ap.parse_args()
  rounds = 1 if args.quick else args.steps
  optimizer = optax.adamw(1e-4, weight_decay=0.01)
  results = []
  shapes = [tuple(int(n) for n in s.split("x")) for s in args.shapes.split(",")]
  for si, (b, l) in enumerate(shapes):
    row = dict(batch=b, length=l, tokens=b * l, variants={})
    compiled = {}
    for name, (chunk, remat) in variants(args.chunk).items():
      cfg = dataclasses.replace(CFG, dtype=args.dtype, remat=remat)
      fn, mem, secs = compile_step(cfg, chunk, b, l, optimizer)
      row["variants"][name] = dict(logprob_chunk=chunk, remat=remat, compile_seconds=round(secs, 1),
                                   **mem)
      print(f"{b}x{l} {name}: peak {mem['peak_gib']} GiB (compiled in {secs:.0f} s)", flush=True)
      wanted = name != "chunked+remat" or args.time_remat
      fits = mem["peak_bytes"] <= args.max_run_gib * GIB
      if wanted and fits and not args.compile_only and not (args.quick and si):
        compiled[name] = fn
    if compiled:
      cfg = dataclasses.replace(CFG, dtype=args.dtype)
      for name, t in time_rounds(compiled, cfg, b, l, optimizer, rounds).items():
        row["variants"][name].update(t)
        print(f"{b}x{l} {name}: {t['step_seconds']:.1f} s/step, "
              f"{t['tokens_per_second']:.0f} tokens/s", flush=True)
    v = row["variants"]
    row["peak_ratio_chunked_vs_materialized"] = round(
        v["chunked"]["peak_bytes"] / v["materialized"]["peak_bytes"], 4)
    row["peak_ratio_chunked_remat_vs_materialized"] = round(
        v["chunked+remat"]["peak_bytes"] / v["materialized"]["peak_bytes"], 4)
    if "tokens_per_second" in v["chunked"] and "tokens_per_second" in v["materialized"]:
      row["speed_ratio_chunked_vs_materialized"] = round(
          v["chunked"]["tokens_per_second"] / v["materialized"]["tokens_per_second"], 3)
    results.append(row)
  out = dict(benchmark="learner_memory", model=dataclasses.asdict(CFG) | {"dtype": args.dtype},
             chunk=args.chunk, rounds=rounds, quick=args.quick, max_run_gib=args.max_run_gib,
             targets=dict(peak_ratio_at_4x2048="<= 0.25", speed_ratio=">= 0.8"),
             results=results, jax=jax.__version__, platform=platform.platform(),
             cpus=os.cpu_count(), load_average=os.getloadavg())
  write_json(args.out, out, indent=1)


if __name__ == "__main__":
  main()
