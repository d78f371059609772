"""Benchmark: the learner on rows cut after their longest filled token (`train.length_bucket`,
agent_rl/train/buckets.py) vs the same update on the layout's whole rows.

Per config, the run's own `build_run` and one RL batch (`phases.rl_batch`: the rollout of the
initial policy), then paired rounds (whole, cut, whole, cut, ...) of
- the RL update (`rl_update`: the iteration's epochs x minibatches, one program), and
- the SFT step on one batch of the config's demos (`sft_step`; configs with `sft.steps`),
each from a copy of the same state, so both paths compute the same update (the script checks
the losses agree). Also the rows' filled lengths (the data the cut works from).

Default configs: `textworld_cooking:tiny` with `env.host.admissible=True` (the admissible
list fills most of each 192-token observation) and as it is (the game text only: most
observations are a few tokens), the host env the 10-minute budget of issue 20 is about.

  python benchmarks/length_buckets.py [--configs textworld_cooking:tiny] [--bucket 256]
      [--rounds 3]

Writes benchmarks/results/length_buckets.json and prints it.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from results_io import write_json  # noqa: E402
from timing import paired_medians  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = "textworld_cooking:tiny+env.host.admissible=True,textworld_cooking:tiny"


def config_of(spec: str):
  """`name:arg` with optional `+field=value` overrides (as `--config.field=value`)."""
  from agent_rl.eval.reproduce.comparison import config_path, import_config
  from agent_rl.eval.reproduce.runs import apply_override, parse_override
  head, *sets = spec.split("+")
  name, arg = head.split(":")
  c = import_config(config_path(name)).get_config(arg)
  for s in sets:
    apply_override(c, *parse_override(s))
  c.log.sinks, c.log.episodes = "jsonl", 0
  return c


def _filled(rows) -> np.ndarray:
  """Each row's filled length `[R]` (`buckets.filled_length` of the row alone)."""
  from agent_rl.train import buckets
  return np.asarray(jax.vmap(lambda a, m: buckets.filled_length(a[None], m[None]))(
      rows.attention_mask, rows.loss_mask))


@contextlib.contextmanager
def first_batch(spec: str):
  """(config, placement, workdir, run, its first RL batch): the run's own `build_run` and
  `phases.rl_batch` of the initial policy, in a temporary workdir; the run's checkpoint
  manager and env closed at exit."""
  from agent_rl.parallel.placement import make_placement
  from agent_rl.train import phases
  from agent_rl.train.run import build_run
  from agent_rl.train.state import init_params

  c = config_of(spec)
  place = make_placement(c.mesh)
  with place.context(), tempfile.TemporaryDirectory() as wd:
    r = build_run(c, wd, place)
    prog = phases.initial_progress(r, init_params(r.spec))
    prog = phases.start_rl(r, prog.state.params, prog.meta)
    try:
      yield c, place, wd, r, phases.rl_batch(r, prog, 0)
    finally:
      r.ckpt.close()
      close = getattr(r.setup.env, "close", None)
      if close is not None:
        close()


def bench(spec: str, bucket: int, rounds: int) -> dict:
  from agent_rl.train import buckets, sft
  from agent_rl.train.state import copy_tree

  with first_batch(spec) as (c, place, wd, r, out):
    rows, key = out.rows, out.key
    cut, full = buckets.cut(rows, bucket)
    filled = _filled(rows)
    st = out.state  # (a critic pre-fit donated prog.state)
    rl, rl_out = paired_medians({
        "whole": lambda: r.rl_update(copy_tree(st), place.batch(rows), key, full)[1],
        "cut": lambda: r.rl_update(copy_tree(st), place.batch(cut), key, full)[1]}, rounds)
    loss = {k: float(rl_out[k]["loss/total"]) for k in rl_out}
    out = {
        "config": spec, "rows": int(rows.tokens.shape[0]), "full_length": full,
        "cut_length": int(cut.tokens.shape[1]),
        "filled_length": {"median": float(np.median(filled)),
                          "p90": float(np.percentile(filled, 90)), "max": int(filled.max())},
        "rl_update": {"whole_s": rl["whole"][0], "cut_s": rl["cut"][0],
                      "whole_cpu_s": rl["whole"][1], "cut_cpu_s": rl["cut"][1],
                      "speedup_wall": rl["whole"][0] / rl["cut"][0],
                      "speedup_cpu": rl["whole"][1] / rl["cut"][1],
                      "loss_whole": loss["whole"], "loss_cut": loss["cut"]},
    }
    if c.sft.steps:
      demos = sft.demo_rows(c, r.setup, r.ecfg, wd, r.policy, st.params["lm"], r.spec.lm_graphdef)
      mb = sft.sft_batches(demos, c.sft.batch_size, 0, c.seed)
      mb_cut, _ = buckets.cut(mb, bucket)
      s, s_out = paired_medians({"whole": lambda: r.sft_step(copy_tree(st), place.batch(mb))[1],
                                 "cut": lambda: r.sft_step(copy_tree(st), place.batch(mb_cut))[1]},
                                rounds)
      dfill = _filled(demos)
      out["sft_step"] = {
          "batch": int(mb.tokens.shape[0]), "cut_length": int(mb_cut.tokens.shape[1]),
          "demo_filled_length": {"median": float(np.median(dfill)), "max": int(dfill.max())},
          "whole_s": s["whole"][0], "cut_s": s["cut"][0],
          "whole_cpu_s": s["whole"][1], "cut_cpu_s": s["cut"][1],
          "speedup_wall": s["whole"][0] / s["cut"][0],
          "speedup_cpu": s["whole"][1] / s["cut"][1],
          "loss_whole": float(s_out["whole"]["sft/loss"]),
          "loss_cut": float(s_out["cut"]["sft/loss"])}
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--configs", default=DEFAULT)
  ap.add_argument("--bucket", type=int, default=256)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                "length_buckets.json"))
  args = ap.parse_args()
  load_start = os.getloadavg()
  results = [bench(s, args.bucket, args.rounds) for s in args.configs.split(",")]
  for res in results:  # the cut must not change what is computed
    for part in ("rl_update", "sft_step"):
      if part in res:
        a, b = res[part]["loss_whole"], res[part]["loss_cut"]
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (res["config"], part, a, b)
  write_json(args.out, {
      "bucket": args.bucket, "rounds": args.rounds, "results": results,
      "platform": platform.platform(), "devices": str(jax.devices()),
      "load_average_start": load_start, "load_average_end": os.getloadavg(),
      "note": ("medians of paired rounds (whole, cut, ...) from copies of one state, the first "
               "call of each path (its compile) dropped; speedups are whole / cut; the host env "
               "configs' rollout is the initial policy's (no SFT), so its episodes run to the "
               "turn limit: the rows' filled length is the game text's, not an early end's")})


if __name__ == "__main__":
  main()
