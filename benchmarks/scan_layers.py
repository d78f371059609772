"""Benchmark: decoder blocks unrolled (today's `Transformer`) vs `lax.scan` over stacked layers.

Measures whether scanning the layers (MaxText's `scan_layers`) would pay for changing the
parameter layout: compile seconds and step seconds of value-and-grad of a sum-of-squares of
the final hidden states, through the training (no-cache) path, with and without
`remat="block"`. The scanned variant is a faithful prototype, not a second model: it stacks
the very same `Block` states (`jax.tree.map(jnp.stack)`) and scans
`agent_rl.models.transformer._full_block` over them, so both compute the same function
(checked: same loss value). Model: hidden 512, 8 layers, 8/4 heads, intermediate 2048,
batch 4 x 512, float32. Paired rounds, median.

Result (benchmarks/results/scan_layers.json, 2 shared cores under load ~13, so step times
are noisy): temporaries 1.14 GB unrolled, 1.01 GB unrolled + remat (XLA:CPU schedules the
recomputation early), 1.72 GB scanned, 0.37 GB scanned + remat; compile 67 / 35 / 94 / 40 s;
steps 32 / 29 / 24 / 21 s. So `remat="block"` runs the scanned form
(`transformer._remat_blocks`: block states stacked at trace time, the stored parameter
layout unchanged); without remat the unrolled loop stays (scanning alone costs memory).

  python benchmarks/scan_layers.py [--rounds 3] [--layers 8]

Writes benchmarks/results/scan_layers.json (or --out) and prints it.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from agent_rl.models import ModelConfig, Transformer  # noqa: E402
from agent_rl.models import transformer as tr  # noqa: E402
from agent_rl.models.attention import mask_to_bias  # noqa: E402
from results_io import write_json  # noqa: E402

B, L = 4, 512


def _inputs(model: Transformer, tokens):
  b, l = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  cos, sin = model._rope(pos)["full"]
  bias = mask_to_bias(jnp.tril(jnp.ones((l, l), bool))[None] & jnp.ones((b, 1, l), bool))
  x = model.embed(tokens).reshape(b * l, -1)
  return x, cos.reshape(b * l, -1), sin.reshape(b * l, -1), bias[:, None, None]


def unrolled_loss(model: Transformer, tokens, remat: str):
  x, cos, sin, bias = _inputs(model, tokens)
  block = tr._full_block if remat == "none" else nnx.remat(tr._full_block, static_argnums=(5,))
  x = tr._unrolled(model.layers, x, {"full": (cos, sin)}, {"full": bias}, tokens.shape[0], block)
  return jnp.sum(model.final_norm(x) ** 2)


def scanned_loss(model: Transformer, tokens, remat: str):
  x, cos, sin, bias = _inputs(model, tokens)
  block_def, _ = nnx.split(model.layers[0])
  stacked = jax.tree.map(lambda *a: jnp.stack(a), *[nnx.split(b)[1] for b in model.layers])

  def body(x, layer_state):
    return tr._full_block(nnx.merge(block_def, layer_state), x, cos, sin, bias,
                          tokens.shape[0]), None

  if remat == "block":
    body = jax.checkpoint(body)
  x, _ = jax.lax.scan(body, x, stacked)
  return jnp.sum(model.final_norm(x) ** 2)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--layers", type=int, default=8)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                "scan_layers.json"))
  args = ap.parse_args()
  cfg = ModelConfig(vocab_size=1024, hidden=512, num_layers=args.layers, num_heads=8,
                    num_kv_heads=4, head_dim=64, intermediate=2048)
  graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
  tokens = jax.random.randint(jax.random.key(0), (B, L), 0, cfg.vocab_size)
  fns, info = {}, {}
  for layout, f in (("unrolled", unrolled_loss), ("scanned", scanned_loss)):
    for remat in ("none", "block"):
      name = f"{layout}/remat={remat}"
      g = jax.jit(jax.value_and_grad(
          lambda s, t, f=f, r=remat: f(nnx.merge(graphdef, s), t, r)))
      t0 = time.perf_counter()
      c = g.lower(state, tokens).compile()
      comp = time.perf_counter() - t0
      v, _ = c(state, tokens)
      info[name] = dict(compile_seconds=round(comp, 2), loss=float(v),
                        temp_bytes=c.memory_analysis().temp_size_in_bytes)
      fns[name] = c
      print(name, info[name], flush=True)
  walls = {n: [] for n in fns}
  for _ in range(args.rounds):
    for n, c in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(c(state, tokens))
      walls[n].append(time.perf_counter() - t0)
  for n, w in walls.items():
    info[n].update(step_seconds=statistics.median(w), rounds=[round(x, 3) for x in w])
  out = dict(benchmark="scan_layers", batch=B, length=L, layers=args.layers, results=info,
             jax=jax.__version__, platform=platform.platform(), cpus=os.cpu_count(),
             load_average=os.getloadavg())
  write_json(args.out, out, indent=1)


if __name__ == "__main__":
  main()
