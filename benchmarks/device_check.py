"""One prepared accelerator check (issue 17): bf16 train-step tokens/s and MFU of the
qwen2.5-0.5b and qwen3-0.6b presets at 8 x 2,048 tokens, decode tokens/s at batch 64 and 1,
and the same with torch/transformers when they are on the machine; JSON out.

    python benchmarks/device_check.py --out=$OUT/device_check.json [--budget_s=420]

Run by `benchmarks/device_check.sh` through the `device` tool when a GPU is lent. Imports only
the models room (the device image has jax/flax/optax but not our TFDS / ml_collections pins).
Each section is skipped, with the reason in the JSON, once the time budget is spent, so the
whole check fits inside the device tool's 10-minute command limit.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from agent_rl.models import SamplerConfig, Transformer, generate, get_preset  # noqa: E402
from agent_rl.models.logprobs import shifted_token_stats  # noqa: E402

PEAK_BF16 = {"NVIDIA H200": 989e12, "NVIDIA H100": 989e12}  # dense bf16, vendor datasheets
PRESETS = ("qwen2.5-0.5b", "qwen3-0.6b")


def train_flops(cfg, batch: int, length: int) -> float:
  """Model FLOPs of forward + backward (3 x forward): dense projections, head, causal attention."""
  e, d, h, k, m = cfg.hidden, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate
  per_layer = e * d * (2 * h + 2 * k) + 3 * e * m
  dense = 2 * (cfg.num_layers * per_layer + e * cfg.vocab_size) * batch * length
  attn = 4 * h * d * cfg.num_layers * batch * length * (length + 1) / 2
  return 3.0 * (dense + attn)


def _bench(fn, warm=1, reps=3):
  for _ in range(warm):
    jax.block_until_ready(fn())
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return min(times)


def ours_train(preset: str, batch: int, length: int) -> dict:
  cfg = get_preset(preset, dtype="bfloat16", param_dtype="float32", remat="block")
  model = Transformer(cfg, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model)
  opt = optax.adamw(1e-5)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, length)),
                       jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(length), (batch, length))
  valid = jnp.ones((batch, length), bool)

  def loss_fn(p):
    m = nnx.merge(graphdef, p)
    _, hidden, _ = m.apply(tokens, pos, valid)
    lp, _ = shifted_token_stats(hidden, m.head_weight(), tokens, chunk=256, with_entropy=False)
    return -jnp.mean(lp[:, 1:])

  @jax.jit
  def step(p, s):
    loss, g = jax.value_and_grad(loss_fn)(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s, loss

  state = [params, opt.init(params)]

  def one():
    state[0], state[1], loss = step(*state)
    return loss

  t = _bench(one)
  flops = train_flops(cfg, batch, length)
  peak = PEAK_BF16.get(jax.devices()[0].device_kind)
  return {"tokens_per_s": batch * length / t, "step_s": t, "model_tflops": flops / t / 1e12,
          "mfu": (flops / t / peak) if peak else None, "remat": "block"}


def ours_decode(preset: str, batch: int, prompt: int = 128, new: int = 128) -> dict:
  cfg = get_preset(preset, dtype="bfloat16", param_dtype="bfloat16")
  graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
  ids = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size, (batch, prompt)), jnp.int32)
  scfg = SamplerConfig(temperature=1.0, max_tokens=new, stop_tokens=())
  fn = jax.jit(lambda p, k: generate(graphdef, p, ids, jnp.ones_like(ids, bool), k, scfg).tokens)
  t = _bench(lambda: fn(params, jax.random.key(0)))
  return {"tokens_per_s": batch * new / t, "wall_s": t}


def torch_train(preset: str, batch: int, length: int) -> dict:
  import torch
  import transformers
  from agent_rl.models.hf_families import family_for
  cfg = get_preset(preset)
  hf_cfg = dict(family_for(cfg).to_hf_config(cfg))
  config = transformers.AutoConfig.for_model(hf_cfg.pop("model_type"), **hf_cfg)
  model = transformers.AutoModelForCausalLM.from_config(config).cuda().train()
  model.gradient_checkpointing_enable()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
  ids = torch.randint(0, cfg.vocab_size, (batch, length), device="cuda")

  def one():
    with torch.autocast("cuda", dtype=torch.bfloat16):
      loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

  one()
  ts = []
  for _ in range(3):
    t0 = time.perf_counter()
    one()
    ts.append(time.perf_counter() - t0)
  t = min(ts)
  return {"tokens_per_s": batch * length / t, "step_s": t}


def torch_decode(preset: str, batch: int, prompt: int = 128, new: int = 128) -> dict:
  import torch
  import transformers
  from agent_rl.models.hf_families import family_for
  cfg = get_preset(preset)
  hf_cfg = dict(family_for(cfg).to_hf_config(cfg))
  config = transformers.AutoConfig.for_model(hf_cfg.pop("model_type"), **hf_cfg)
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).cuda().eval()
  ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")

  def one():
    with torch.no_grad():
      model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=new,
                     min_new_tokens=new, pad_token_id=0)
    torch.cuda.synchronize()

  one()
  t0 = time.perf_counter()
  one()
  t = time.perf_counter() - t0
  return {"tokens_per_s": batch * new / t, "wall_s": t}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default="benchmarks/results/device_check.json")
  ap.add_argument("--budget_s", type=float, default=420.0)
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--length", type=int, default=2048)
  ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated (CPU smoke: tiny)")
  a = ap.parse_args()
  t_start = time.perf_counter()
  out = {"benchmark": "device_check", "device": str(jax.devices()[0].device_kind),
         "platform": platform.platform(), "jax": jax.__version__, "results": {}}
  jobs = []
  presets = [p for p in a.presets.split(",") if p]
  # Ours and torch's peer side by side per preset, so a budget cut loses whole pairs. JAX must
  # not preallocate (XLA_PYTHON_CLIENT_PREALLOCATE=false, set by the .sh scripts): with 90% of
  # the card held by XLA, torch's train step ran out of memory (H200, 2026-12-04).
  for p in presets:
    jobs += [(f"{p}/train_bf16_{a.batch}x{a.length}", lambda p=p: ours_train(p, a.batch, a.length)),
             (f"{p}/torch_train_bf16_{a.batch}x{a.length}",
              lambda p=p: torch_train(p, a.batch, a.length)),
             (f"{p}/decode_b64", lambda p=p: ours_decode(p, 64)),
             (f"{p}/torch_decode_b64", lambda p=p: torch_decode(p, 64)),
             (f"{p}/decode_b1", lambda p=p: ours_decode(p, 1)),
             (f"{p}/torch_decode_b1", lambda p=p: torch_decode(p, 1))]
  for name, fn in jobs:
    if time.perf_counter() - t_start > a.budget_s:
      out["results"][name] = {"skipped": "time budget spent"}
      continue
    try:
      out["results"][name] = fn()
    except Exception as e:  # noqa: BLE001 — one failing section must not lose the others
      out["results"][name] = {"error": f"{type(e).__name__}: {e}",
                              "trace": traceback.format_exc()[-1500:]}
    print(name, json.dumps(out["results"][name])[:300], flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
      json.dump(out, f, indent=2)
  out["wall_s"] = time.perf_counter() - t_start
  with open(a.out, "w") as f:
    json.dump(out, f, indent=2)


if __name__ == "__main__":
  main()
