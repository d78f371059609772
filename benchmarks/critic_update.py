"""Benchmark: the critic-only update (train.critic_warmup / train.critic_prefit) with the
critic's forward alone (`ActorCritic.value_stats`: no vocabulary projection, no backward
through a shared trunk) vs the same update on the full policy forward, as it ran before.

Two parts, each a paired comparison in one process (old, new, old, new, ...; the first call of
each path is its compile and is dropped; medians of wall and CPU seconds):
- `runs`: a config's own `build_run` twice, the second with `values_only` ignored (the old
  forward: `token_stats`, whose entropy the objective logs and whose trunk the value loss
  backpropagates through), then `critic_update` (train.epochs x minibatches, one program) on
  one RL batch from copies of one state. Defaults: `iterpo_deal:fit_first` (IterPO's Q as a
  separate decoder, pre-fit 4 passes an iteration) and `iterpo_deal:fit_first+model.critic=shared`
  (Q as a head on the policy trunk; `--configs` is comma-separated, so a spec's extra variants
  are given as `+field=value` overrides). The value losses of both paths must agree.
- `model`: the update's gradient alone (value loss and the entropy metric the old path logs) at
  two shapes with Qwen2.5's 151,936-token vocabulary, 8 rows x 512 tokens: the learner-memory
  benchmark's model (hidden 512, 8 layers) and a 2-layer, 128-wide one, where the vocabulary
  projection the old path computes for its entropy metric is most of the forward.

  python benchmarks/critic_update.py [--configs iterpo_deal:fit_first] [--rounds 3]

Writes benchmarks/results/critic_update.json and prints it.
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
from unittest import mock

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from length_buckets import config_of  # noqa: E402
from results_io import write_json  # noqa: E402
from timing import paired_medians  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = "iterpo_deal:fit_first,iterpo_deal:fit_first+model.critic=shared"


def _row(med, old="full_forward", new="values_only") -> dict:
  return {f"{old}_s": med[old][0], f"{new}_s": med[new][0],
          f"{old}_cpu_s": med[old][1], f"{new}_cpu_s": med[new][1],
          "speedup_wall": med[old][0] / med[new][0], "speedup_cpu": med[old][1] / med[new][1]}


def bench_run(spec: str, rounds: int) -> dict:
  from agent_rl import agents
  from agent_rl.parallel.placement import make_placement
  from agent_rl.train import phases
  from agent_rl.train.run import build_run
  from agent_rl.train.state import copy_tree, init_params

  c = config_of(spec)
  if not (c.train.critic_warmup or c.train.critic_prefit):
    raise ValueError(f"{spec}: needs train.critic_warmup or train.critic_prefit (no critic-only "
                     "update to time)")
  place = make_placement(c.mesh)
  real = agents.make_apply
  full_forward = lambda *a, values_only=False, **k: real(*a, **k)  # the old critic-only forward
  with place.context(), tempfile.TemporaryDirectory() as wd:
    new = build_run(c, os.path.join(wd, "new"), place)
    with mock.patch.object(agents, "make_apply", full_forward):
      old = build_run(c, os.path.join(wd, "old"), place)
    prog = phases.initial_progress(new, init_params(new.spec))
    prog = phases.start_rl(new, prog.state.params, prog.meta)
    out = phases.rl_batch(new, prog, 0)
    rows, st, n = place.batch(out.rows), out.state, int(out.rows.tokens.shape[1])
    med, res = paired_medians({
        "full_forward": lambda: old.critic_update(copy_tree(st), rows, out.key, n)[1],
        "values_only": lambda: new.critic_update(copy_tree(st), rows, out.key, n)[1]}, rounds)
    loss = {k: float(np.mean(np.asarray(v["loss/value"]))) for k, v in res.items()}
    assert abs(loss["full_forward"] - loss["values_only"]) <= 1e-4 * max(1.0, abs(
        loss["full_forward"])), (spec, loss)
    for r in (new, old):
      r.ckpt.close()
  return {"config": spec, "critic": c.model.critic, "rows": int(out.rows.tokens.shape[0]),
          "row_length": n, "vocab": int(new.setup.model_cfg.vocab_size),
          "passes_per_iteration": int(c.train.critic_prefit),
          "loss_value": loss, **_row(med)}


MODELS = {  # name -> (hidden, layers, heads, kv heads, head dim, MLP width)
    "h512_l8": (512, 8, 8, 4, 64, 2048), "h128_l2": (128, 2, 4, 2, 32, 512)}


def bench_model(rounds: int, vocab: int = 151_936, rows: int = 8, length: int = 512) -> list:
  from flax import nnx
  from agent_rl.models import ModelConfig
  from agent_rl.train.policy import ActorCritic, make_apply

  rng = np.random.default_rng(0)
  tok = jnp.asarray(rng.integers(0, vocab, (rows, length)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (rows, length))
  valid = jnp.ones((rows, length), bool)
  ret = jnp.asarray(rng.normal(size=(rows, length)), jnp.float32)
  out = []
  for name, (hidden, layers, heads, kv, hd, inter) in MODELS.items():
    cfg = ModelConfig(vocab_size=vocab, hidden=hidden, num_layers=layers, num_heads=heads,
                      num_kv_heads=kv, head_dim=hd, intermediate=inter, tie_embeddings=True)
    for critic in ("shared", "separate"):
      graphdef, params = nnx.split(ActorCritic(cfg, critic, rngs=nnx.Rngs(0)))

      def step(values_only):  # the value loss and the entropy metric the objective logs
        apply = make_apply(graphdef, values_only)

        def loss(p):
          s = apply(p, tok, pos, valid)
          metrics = {} if s.entropy is None else {"loss/entropy": jnp.mean(s.entropy)}
          return jnp.mean((s.values - ret) ** 2), metrics
        return jax.jit(jax.value_and_grad(loss, has_aux=True))
      fns = {"full_forward": step(False), "values_only": step(True)}
      med, _ = paired_medians({k: (lambda f=f: f(params)[0][0]) for k, f in fns.items()}, rounds)
      out.append({"model": name, "critic": critic, "vocab": vocab, "rows": rows,
                  "row_length": length, **_row(med)})
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--configs", default=DEFAULT)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                "critic_update.json"))
  args = ap.parse_args()
  load_start = os.getloadavg()
  runs = [bench_run(s, args.rounds) for s in args.configs.split(",") if s]
  write_json(args.out, {
      "rounds": args.rounds, "runs": runs, "model": bench_model(args.rounds),
      "platform": platform.platform(), "devices": str(jax.devices()),
      "load_average_start": load_start, "load_average_end": os.getloadavg(),
      "note": ("medians of paired rounds (full_forward, values_only, ...), first call of each "
               "path (its compile) dropped; speedups are full_forward / values_only. "
               "full_forward is the critic-only update as it ran before policy.value_stats: "
               "the policy's token_stats (log-probs, entropy) and, with a shared trunk, its "
               "backward, both discarded")})


if __name__ == "__main__":
  main()
