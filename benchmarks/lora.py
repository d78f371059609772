"""Benchmark: multi-LoRA batched forward+backward, and optimizer-state bytes of LoRA vs full.

Model: tiny-Qwen2-shaped (hidden 512, 8 layers, 8/4 heads, intermediate 2048, qkv bias,
vocab 1024, float32), LoRA rank 16 on q,k,v,o,gate,up,down. Step = value-and-grad w.r.t. the
adapters (the LoRA learner's backward) of a mean-square of the logits over 64 rows x L:
- one: one adapter for all 64 rows (the plain LoRA model);
- batched4: 4 stacked adapters, row b uses adapter b % 4, in one forward
  (`agent_rl.models.multi_lora.forward`, gather-based as S-LoRA/Punica);
- separate4: 4 forwards of 16 rows, each with its own adapter (what multi-LoRA replaces).
Target: batched4 <= 1.3 x one. Optimizer bytes: AdamW state of the LoRA learner
(`train.lora_learner.freeze_base`: moments of adapters only) vs full fine-tuning, from shapes.
Paired rounds, median; the machine's 2 cores are shared, so absolute times are noisy.

  python benchmarks/lora.py [--quick] [--rounds 3] [--length 64]

Writes benchmarks/results/lora.json (or --out) and prints it.
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
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from agent_rl.models import ModelConfig, Transformer, multi_lora  # noqa: E402
from agent_rl.models.lora import LoraConfig  # noqa: E402
from agent_rl.train import lora_learner  # noqa: E402
from results_io import write_json  # noqa: E402

ROWS, K = 64, 4


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="length 16, 1 round (about a minute)")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--length", type=int, default=64)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "lora.json"))
  args = ap.parse_args()
  length, rounds = (16, 1) if args.quick else (args.length, args.rounds)
  lcfg = LoraConfig(rank=16, alpha=32.0, targets=("q", "k", "v", "o", "gate", "up", "down"))
  cfg = ModelConfig(vocab_size=1024, hidden=512, num_layers=8, num_heads=8, num_kv_heads=4,
                    head_dim=64, intermediate=2048, qkv_bias=True, lora=lcfg)
  graphdef, adapters, base = multi_lora.split(Transformer(cfg, rngs=nnx.Rngs(0)))
  keys = iter(jax.random.split(jax.random.key(1), 1000))
  ads = [jax.tree.map(lambda a: 0.02 * jax.random.normal(next(keys), a.shape, a.dtype), adapters)
         for _ in range(K)]
  stacked = multi_lora.stack(ads)
  tokens = jax.random.randint(jax.random.key(0), (ROWS, length), 0, cfg.vocab_size)
  pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), tokens.shape)
  valid = jnp.ones(tokens.shape, bool)
  ids = jnp.arange(ROWS, dtype=jnp.int32) % K

  def single_loss(ad, tok, p, v):
    return jnp.mean(nnx.merge(graphdef, base, ad)(tok, p, v) ** 2)

  def batched_loss(st, tok, p, v, i):
    return jnp.mean(multi_lora.forward(graphdef, base, st, i, tok, p, v) ** 2)

  single = jax.jit(jax.value_and_grad(single_loss))
  batched = jax.jit(jax.value_and_grad(batched_loss))
  q = ROWS // K
  parts = [(ads[k], tokens[k * q:(k + 1) * q], pos[:q], valid[:q]) for k in range(K)]
  runs = {"one": lambda: single(ads[0], tokens, pos, valid),
          "batched4": lambda: batched(stacked, tokens, pos, valid, ids),
          "separate4": lambda: [single(*a) for a in parts]}
  info = {}
  for name, f in runs.items():  # compile + warm up
    t0 = time.perf_counter()
    jax.block_until_ready(f())
    info[name] = dict(first_call_seconds=round(time.perf_counter() - t0, 2))
  walls = {n: [] for n in runs}
  for _ in range(rounds):
    for n, f in runs.items():
      t0 = time.perf_counter()
      jax.block_until_ready(f())
      walls[n].append(time.perf_counter() - t0)
  for n, w in walls.items():
    info[n].update(step_seconds=round(statistics.median(w), 4), rounds=[round(x, 4) for x in w])
  ratio = info["batched4"]["step_seconds"] / info["one"]["step_seconds"]

  params = nnx.state(nnx.merge(graphdef, adapters, base), nnx.Param)
  adamw = optax.adamw(1e-4)
  full_bytes = lora_learner.state_bytes(jax.eval_shape(adamw.init, {"lm": params}))
  lora_bytes = lora_learner.state_bytes(
      jax.eval_shape(lora_learner.freeze_base(adamw).init, {"lm": params}))
  out = dict(benchmark="lora", rows=ROWS, length=length, adapters=K, rank=lcfg.rank,
             hidden=cfg.hidden, layers=cfg.num_layers, results=info,
             batched4_over_one=round(ratio, 3), target_batched4_over_one=1.3,
             meets_target=bool(ratio <= 1.3),
             optimizer_bytes=dict(full=full_bytes, lora_rank16=lora_bytes,
                                  ratio=round(lora_bytes / full_bytes, 5)),
             param_bytes=lora_learner.state_bytes(params),
             jax=jax.__version__, platform=platform.platform(), cpus=os.cpu_count(),
             load_average=os.getloadavg(), quick=bool(args.quick))
  write_json(args.out, out, indent=1)


if __name__ == "__main__":
  main()
