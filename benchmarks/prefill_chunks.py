"""A cached block written in sequence chunks (`model.prefill_chunk`) vs the whole block at
once, same run: XLA's temporary memory of `prefill` and its time.

A windowed rollout prefills its whole window every turn, and evaluation prefills every prompt;
whole, each layer's scores are [B, heads, L, S] floats, the mask [B, L, S] and the MLP's
activations [B, L, F]; in chunks (`Transformer._in_chunks`), one chunk's of each. Rows:
  - `minishop_tiny`: the MiniShop tiny rollout's window (64 episodes x 1,093 tokens, the world
    configs' tiny policy), timed (paired medians) and sized;
  - `texthouse_listed_eval`: TextHouse tiny with the admissible actions listed and the
    searching expert's 24 turns (a window of ~4,400 tokens), at 16 episodes (its evaluation
    runs 256: whole, 16x these bytes; that evaluation died allocating 39.5 GB on 2026-12-07);
  - `qwen2.5-1.5b_full`: the GiGPO world configs at `full` (Qwen2.5-1.5B shape, bf16, 16 tasks
    x 8 = 128 episodes, a 4,096-token window), sized only: compiled from abstract shapes, never
    run (an accelerator's allocator sees what XLA:CPU's buffer assignment reports, up to
    fusion differences).
`temp_gib` is `compiled.memory_analysis().temp_size_in_bytes` (everything but arguments and
outputs, the logits and the cache: the scores, the mask, the MLP's activations);
`estimate_gib` the start-up report's estimate of them (`parallel.memory.prefill_bytes`);
`kv_cache_gib` the cache (compute dtype); `speedup` = whole / chunked seconds.

Run: `python benchmarks/prefill_chunks.py [--rounds 5]` -> benchmarks/results/prefill_chunks.json
"""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import size_sweep  # noqa: E402
from size_sweep import random_like, time_against_baseline  # noqa: E402

from agent_rl.models import Transformer, get_preset, init_cache, prefill  # noqa: E402
from agent_rl.parallel import DEFAULT_RULES, make_mesh  # noqa: E402
from agent_rl.parallel.memory import kv_cache_bytes, prefill_bytes  # noqa: E402

GIB = 1024 ** 3
TINY = dict(vocab_size=1024, hidden=128, num_layers=2, num_heads=4, num_kv_heads=2,
            head_dim=32, intermediate=384)
ROWS = {  # name -> (preset, overrides, episodes, window tokens, timed)
    "minishop_tiny": ("tiny", TINY, 64, 1093, True),
    "texthouse_listed_eval": ("tiny", TINY, 16, 4400, True),
    "qwen2.5-1.5b_full": ("qwen2.5-1.5b", dict(dtype="bfloat16"), 128, 4096, False),
}


MESH = make_mesh((1, 1, 1), devices=jax.devices()[:1])


def program(cfg, b: int, l: int):
  """(jitted prefill of a whole window read at its last row, its abstract arguments)."""
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
  tokens = jnp.zeros((b, l), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  last = jnp.full((b,), l - 1, jnp.int32)
  # Logits and the cache come back (the rollout keeps the cache): temporaries are the prefill's.
  fn = jax.jit(lambda s, c: prefill(graphdef, s, tokens, pos, jnp.ones((b, l), bool), c, last)[::2])
  cache = jax.eval_shape(lambda: init_cache(cfg, b, l))
  return fn, state, cache


def bench_row(preset, over, b, l, timed, chunks, rounds) -> dict:
  out, fns = {}, {}
  for chunk in chunks:
    cfg = get_preset(preset, **over, prefill_chunk=chunk)
    fn, state, cache = program(cfg, b, l)
    temp = fn.lower(state, cache).compile().memory_analysis().temp_size_in_bytes
    est = prefill_bytes(cfg, b, l, MESH, DEFAULT_RULES)
    out[f"chunk_{chunk}"] = {"temp_gib": temp / GIB, "estimate_gib": est / GIB,
                             "compiled_vs_estimate": temp / est}
    if timed:
      s, c = random_like(state), jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), cache)
      fns[f"chunk_{chunk}"] = (lambda f, s, c: lambda: jax.block_until_ready(f(s, c)))(fn, s, c)
  time_against_baseline(out, fns, rounds, "chunk_0", "temp_vs_whole")
  return dict(episodes=b, window=l, preset=preset,
              kv_cache_gib=kv_cache_bytes(cfg, b, l, MESH, DEFAULT_RULES) / GIB, **out)


if __name__ == "__main__":
  size_sweep.main(ROWS, bench_row, flag="chunks", default="0,512,256,128",
             out_name="prefill_chunks.json")
