"""The train step's attention in key blocks (`model.attention_block`) vs the dense core, same
run: XLA's temporary memory of a forward + backward and its time.

The dense core (`attention.attention_core`) saves every layer's [B, heads, L, L] probabilities
for the backward; the blocked core (`models/blocked_attention.py`) saves each row's output and
log-sum-exp and recomputes one key block's probabilities at a time. The step is the learner's:
the policy's forward, chunked token log-probs (`models.logprobs.shifted_token_stats`) and the
gradient of their sum with respect to every weight. Rows:
  - `tiny_1024`: the world configs' tiny policy, 64 rows x 1,024 tokens (a world run's
    micro-batch of windows), timed (paired medians) and sized;
  - `tiny_4096`: the same policy at 8 rows x 4,096 tokens (long windows), timed and sized;
  - `qwen2.5-1.5b_full`: the GiGPO world configs at `full` (Qwen2.5-1.5B shape, bf16, block
    remat, micro-batches of 8 turn rows x 4,096 tokens: `world_defaults.full_policy`), and
    `qwen2.5-1.5b_episode` at one episode's 50 turns a micro-batch; sized only: compiled from
    abstract shapes, never run.
`temp_gib` is `compiled.memory_analysis().temp_size_in_bytes`; `estimate_gib` the start-up
report's estimate of them (`parallel.memory`: activations, float32, and the weight-sized
trees of block remat; the gradient tree is this program's output);
`speedup` = dense / blocked seconds.

Run: `python benchmarks/attention_blocks.py [--rounds 5]` -> benchmarks/results/attention_blocks.json
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

from agent_rl.models import Transformer, forward, get_preset  # noqa: E402
from agent_rl.models.logprobs import shifted_token_stats  # noqa: E402
from agent_rl.parallel import DEFAULT_RULES, make_mesh  # noqa: E402
from agent_rl.parallel.memory import (activation_bytes, tree_bytes_per_device,  # noqa: E402
                                      update_weight_bytes)

GIB = 1024 ** 3
TINY = dict(vocab_size=1024, hidden=128, num_layers=2, num_heads=4, num_kv_heads=2,
            head_dim=32, intermediate=384)
FULL = dict(dtype="bfloat16", remat="block")
LOGPROB_CHUNK = 256
ROWS = {  # name -> (preset, overrides, rows, tokens, timed)
    "tiny_1024": ("tiny", TINY, 64, 1024, True),
    "tiny_4096": ("tiny", TINY, 8, 4096, True),
    "qwen2.5-1.5b_full": ("qwen2.5-1.5b", FULL, 8, 4096, False),
    "qwen2.5-1.5b_episode": ("qwen2.5-1.5b", FULL, 50, 4096, False),
}


def program(cfg, rows: int, length: int):
  """(jitted gradient of the summed token log-probs, the abstract weights)."""
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
  tokens = jnp.zeros((rows, length), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (rows, length))
  valid = jnp.ones((rows, length), bool)

  def loss(s):
    _, hidden = forward(graphdef, s, tokens, pos, valid)
    head = nnx.merge(graphdef, s).head_weight()
    return jnp.sum(shifted_token_stats(hidden, head, tokens, chunk=LOGPROB_CHUNK)[0])
  return jax.jit(jax.grad(loss)), state


def bench_row(preset, over, rows, length, timed, blocks, rounds) -> dict:
  out, fns = {}, {}
  mesh = make_mesh((1, 1, 1), devices=jax.devices()[:1])
  for block in blocks:
    cfg = get_preset(preset, **over, attention_block=block)
    fn, state = program(cfg, rows, length)
    temp = fn.lower(state).compile().memory_analysis().temp_size_in_bytes
    # The start-up estimate of this program's temporaries: activations and the weight-sized
    # trees, less the gradient tree (this program's output, not a temporary).
    params = tree_bytes_per_device(state)
    est = (activation_bytes(cfg, rows, length, mesh, DEFAULT_RULES, logit_chunk=LOGPROB_CHUNK)
           + update_weight_bytes(params, cfg.remat) - params)
    out[f"block_{block}"] = {"temp_gib": temp / GIB, "estimate_gib": est / GIB}
    if timed:
      s = random_like(state)
      fns[f"block_{block}"] = (lambda f, s: lambda: jax.block_until_ready(f(s)))(fn, s)
  time_against_baseline(out, fns, rounds, "block_0", "temp_vs_dense")
  return dict(rows=rows, tokens=length, preset=preset, **out)


if __name__ == "__main__":
  size_sweep.main(ROWS, bench_row, flag="blocks", default="0,512,256", out_name="attention_blocks.json")
