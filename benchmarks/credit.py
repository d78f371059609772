"""Credit-kernel throughput vs verl `core_algos` (CPU): GRPO, GAE and the PPO policy loss.

Runs verl's own functions (pip `verl==0.9.1`, imported, not copied) and ours on the same
inputs in one process, checks that outputs agree, and writes benchmarks/results/credit.json.

    python benchmarks/credit.py [--repeats 5] [--out benchmarks/results/credit.json]

Timing: torch on 2 threads; each function is warmed up, then the median of `--repeats` runs
is reported. Ours is jitted; its compile time is measured separately and not in the median.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from agent_rl.credit import outcome, verl_compat  # noqa: E402
from results_io import write_json  # noqa: E402


def median_time(fn, repeats, warmup=1):
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return statistics.median(times)


def jax_timer(f, *args):
  """(compile seconds, callable running the compiled function to completion)."""
  t = time.perf_counter()
  compiled = jax.jit(f).lower(*args).compile()
  compile_s = time.perf_counter() - t
  return compile_s, lambda: jax.block_until_ready(compiled(*args))


def outcome_inputs(rng, B, L, group):
  lengths = rng.integers(L // 4, L + 1, B)
  mask = (np.arange(L)[None, :] < lengths[:, None]).astype(np.float32)
  rewards = np.zeros((B, L), np.float32)
  rewards[np.arange(B), lengths - 1] = rng.integers(0, 2, B).astype(np.float32)  # 0/1 outcomes
  index = np.repeat(np.arange(B // group), group).astype(np.int32)
  return rewards, mask, index


def bench_grpo(core_algos, repeats, B=16384, L=512, group=16):
  rng = np.random.default_rng(0)
  r, m, idx = outcome_inputs(rng, B, L, group)
  tr, tm = torch.from_numpy(r), torch.from_numpy(m)
  uids = np.array([f"uid-{i}" for i in idx], dtype=object)  # verl passes uid strings
  res = {"shape": [B, L], "group_size": group}

  verl_default = lambda: core_algos.compute_grpo_outcome_advantage(tr.clone(), tm, uids)
  verl_vec = lambda: core_algos.compute_grpo_vectorized_outcome_advantage(tr.clone(), tm, uids)
  ref_default = verl_default()[0].numpy()
  ref_vec = verl_vec()[0].numpy()
  res["verl_default_s"] = median_time(verl_default, max(2, repeats // 2))
  res["verl_vectorized_s"] = median_time(verl_vec, repeats)

  jr, jm, ji = jnp.asarray(r), jnp.asarray(m), jnp.asarray(idx)
  ours = lambda a, b, c: verl_compat.grpo_outcome_advantage(a, b, c)[0]
  compile_s, run = jax_timer(ours, jr, jm, ji)
  res["ours_s"], res["ours_compile_s"] = median_time(run, repeats), compile_s
  res["max_abs_diff_vs_verl_default"] = float(np.max(np.abs(np.asarray(run()) - ref_default)))
  # verl 0.9.1's vectorized GRPO floors the variance at 0.0 (ALGORITHMS.md's snapshot: 1e-6).
  vec = lambda a, b, c: verl_compat.grpo_vectorized_outcome_advantage(a, b, c, var_floor=0.0)[0]
  _, run_vec = jax_timer(vec, jr, jm, ji)
  res["max_abs_diff_vs_verl_vectorized"] = float(np.max(np.abs(np.asarray(run_vec()) - ref_vec)))
  # The registered kernel's path: per-row advantages only (the learner broadcasts them to
  # tokens inside the loss), so no [B, L] output is written.
  scores_only = lambda a, c: outcome.grpo_scores(a.sum(-1), c, B)
  c2, run2 = jax_timer(scores_only, jr, ji)
  res["ours_rowlevel_s"], res["ours_rowlevel_compile_s"] = median_time(run2, repeats), c2
  res["speedup_vs_verl_default"] = res["verl_default_s"] / res["ours_s"]
  res["speedup_vs_verl_vectorized"] = res["verl_vectorized_s"] / res["ours_s"]
  return res


def bench_gae(core_algos, repeats, B=256, L=2048):
  rng = np.random.default_rng(1)
  m = (rng.random((B, L)) > 0.2).astype(np.float32)  # multi-turn: observation tokens masked
  m[:, :8] = 1.0
  r = np.where(rng.random((B, L)) < 0.01, rng.normal(size=(B, L)), 0.0).astype(np.float32)
  v = rng.normal(size=(B, L)).astype(np.float32)
  tr, tv, tm = map(torch.from_numpy, (r, v, m))
  verl = lambda: core_algos.compute_gae_advantage_return(tr, tv, tm, 1.0, 1.0)
  ref_a, ref_r = (x.numpy() for x in verl())
  res = {"shape": [B, L], "verl_s": median_time(verl, repeats)}
  jr, jv, jm = map(jnp.asarray, (r, v, m))
  for unroll in (4, 16):
    ours = lambda a, b, c, u=unroll: verl_compat.gae_advantage_return(a, b, c, 1.0, 1.0, unroll=u)
    compile_s, run = jax_timer(ours, jr, jv, jm)
    res[f"ours_unroll{unroll}_s"] = median_time(run, repeats)
    res[f"ours_unroll{unroll}_compile_s"] = compile_s
    a, rt = run()
    res[f"max_abs_diff_unroll{unroll}"] = float(max(np.max(np.abs(np.asarray(a) - ref_a)),
                                                   np.max(np.abs(np.asarray(rt) - ref_r))))
  res["ours_s"] = res["ours_unroll4_s"]  # the default
  res["speedup_vs_verl"] = res["verl_s"] / res["ours_s"]
  return res


def bench_ppo_loss(core_algos, repeats, B=256, L=2048):
  try:
    from agent_rl import losses
    vanilla = losses.get("vanilla")
  except (ImportError, KeyError) as e:
    return {"skipped": f"agent_rl.losses has no 'vanilla' policy loss: {e}"}
  from omegaconf import OmegaConf
  rng = np.random.default_rng(2)
  old = rng.normal(-1, 0.5, (B, L)).astype(np.float32)
  new = (old + rng.normal(0, 0.1, (B, L))).astype(np.float32)
  adv = rng.normal(size=(B, L)).astype(np.float32)
  m = (rng.random((B, L)) > 0.2).astype(np.float32)
  cfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                          "clip_ratio_c": 3.0, "global_batch_info": {}})
  t_new = torch.from_numpy(new)
  t_old, t_adv, t_m = map(torch.from_numpy, (old, adv, m))

  def verl():
    lp = t_new.clone().requires_grad_(True)
    loss = core_algos.compute_policy_loss_vanilla(t_old, lp, t_adv, t_m, "token-mean", cfg)[0]
    loss.backward()
    return loss, lp.grad

  ref_loss, ref_grad = verl()
  res = {"shape": [B, L], "loss_agg_mode": "token-mean", "verl_s": median_time(verl, repeats)}

  def ours(lp, o, a, mm):
    f = lambda x: vanilla(x, o, a, mm, loss_agg_mode="token-mean", clip_ratio_low=0.2, clip_ratio_high=0.28,
                          clip_ratio_c=3.0)[0]
    return jax.value_and_grad(f)(lp)

  args = tuple(map(jnp.asarray, (new, old, adv, m)))
  compile_s, run = jax_timer(ours, *args)
  res["ours_s"], res["ours_compile_s"] = median_time(run, repeats), compile_s
  loss, grad = run()
  res["abs_diff_loss"] = abs(float(loss) - ref_loss.item())
  res["max_abs_diff_grad"] = float(np.max(np.abs(np.asarray(grad) - ref_grad.numpy())))
  res["speedup_vs_verl"] = res["verl_s"] / res["ours_s"]
  return res


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "credit.json"))
  args = ap.parse_args()
  torch.set_num_threads(2)
  from verl.trainer.ppo import core_algos  # the real verl, pip install --no-deps verl==0.9.1 (+ its import deps)
  import verl
  out = {
      "env": {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
              "jax": jax.__version__, "jax_backend": jax.default_backend(), "torch": torch.__version__,
              "torch_threads": torch.get_num_threads(), "verl": verl.__version__, "repeats": args.repeats,
              "load_avg_1m_at_start": os.getloadavg()[0],
              "timing": "median wall seconds after warm-up; ours excludes compile (reported separately)"},
      "grpo": bench_grpo(core_algos, args.repeats),
      "gae": bench_gae(core_algos, args.repeats),
      "ppo_loss_fwd_bwd": bench_ppo_loss(core_algos, args.repeats),
  }
  write_json(args.out, out, indent=2)


if __name__ == "__main__":
  main()
