"""Reproduce paper rows: each configs/<paper>.py declares its COMPARISON (method vs baselines
as variants of the config, the paper's metrics and numbers); this runs arms x seeds and
writes RESULTS_DIR/<paper>.json, .md and .png (agent_rl/eval/reproduce).

  python launch/reproduce.py --list                        # every row; which arms can run
  python launch/reproduce.py --paper=gigpo_texthouse --scale=tiny --seeds=3 [--jobs=2]
  python launch/reproduce.py --all --seeds=3               # every runnable row
  python launch/reproduce.py --paper=gigpo_texthouse --iterations=2 --set=sft.steps=5 \
      --results_dir=/tmp/smoke   # smoke (a scratch dir: the committed row refuses other settings)
  python launch/reproduce.py --paper=gigpo_texthouse --dry-run   # one train command per run
  python launch/reproduce.py --paper=gigpo_texthouse --scale=full --dry-run \
      --launcher="sbatch launch/slurm_gpu.sbatch" | bash       # one SLURM job per run
  python launch/reproduce.py --paper=gigpo_texthouse --collect   # files from what is there
  python launch/reproduce.py --table                       # RESULTS_DIR/TABLE.md of all rows

Resumable: a finished run (its last checkpoint exists) is skipped, a started one resumes from
its checkpoint (train/run.py). Run dirs: RESULTS_DIR/<paper>/<arm>/seed<k>; RESULTS_DIR is
--results_dir, else $RESULTS_DIR, else benchmarks/results/reproduce.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from absl import app, flags, logging  # noqa: E402

from agent_rl.eval.reproduce import main as rep  # noqa: E402
from agent_rl.eval.reproduce import results  # noqa: E402

_PAPER = flags.DEFINE_string("paper", None, "config name under configs/ (e.g. gigpo_texthouse)")
_SCALE = flags.DEFINE_enum("scale", "tiny", ["tiny", "full"], "the configs' scale")
_SEEDS = flags.DEFINE_integer("seeds", 3, "seeds 0..N-1 per arm (config.seed)")
_ARMS = flags.DEFINE_list("arms", [], "only these arms (default: all of the row)")
_JOBS = flags.DEFINE_integer("jobs", 1, "runs at once (each a subprocess)")
_ITERS = flags.DEFINE_integer("iterations", None, "override train.iterations (smoke runs)")
_SET = flags.DEFINE_multi_string("set", [], "config override key=value (repeatable), e.g. "
                                 "--set=sft.steps=0; passed as --config.key=value")
_RESULTS = flags.DEFINE_string("results_dir", None, "default $RESULTS_DIR or "
                               "benchmarks/results/reproduce")
_LIST = flags.DEFINE_bool("list", False, "list every row and which arms can run")
_ALL = flags.DEFINE_bool("all", False, "run every row whose arms can all run")
_DRY = flags.DEFINE_bool("dry-run", False, "print the train commands, one per run; run nothing")
_LAUNCHER = flags.DEFINE_string("launcher", "", "with --dry-run: the command that replaces "
                                "`python -m agent_rl.train` (a launcher taking its arguments)")
_COLLECT = flags.DEFINE_bool("collect", False, "write the row's files from the run dirs there; "
                             "run nothing")
_TABLE = flags.DEFINE_bool("table", False, "write RESULTS_DIR/TABLE.md from every <paper>.json")


def main(argv):
  try:
    return _main(argv)
  except ValueError as e:  # a bad flag value, an unknown paper/arm, a run dir of another config
    print(f"reproduce.py: {e}", file=sys.stderr)
    return 2


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # JAX's backend probing logs at INFO
  results_dir = _RESULTS.value or rep.default_results_dir()
  overrides = rep.overrides_from_flags(_ITERS.value, _SET.value)
  if _LIST.value:
    print(rep.list_rows(_SCALE.value, overrides, results_dir=results_dir))
    return 0
  if _TABLE.value:
    path, text = results.write_table(results_dir)
    print(text + f"\n(wrote {path})")
    return 0
  if _ALL.value == bool(_PAPER.value):
    raise app.UsageError("give --paper=NAME or --all (or --list / --table)")
  if _ALL.value:
    papers, skipped = rep.runnable_papers(_SCALE.value, overrides)
    for name, why in skipped:
      print(f"# skipped {name}: {why}", file=sys.stderr if _DRY.value else sys.stdout)
  else:
    papers = [rep.load(_PAPER.value)]
  if _DRY.value:
    print("\n".join(rep.dry_run_rows(papers, _SCALE.value, _SEEDS.value, results_dir, overrides,
                                     _ARMS.value, _LAUNCHER.value)))
    return 0
  failed = 0
  for pc in papers:
    _, outcomes = rep.reproduce(pc, _SCALE.value, _SEEDS.value, results_dir, overrides,
                                _ARMS.value, _JOBS.value, run=not _COLLECT.value)
    failed += sum(o.state == "failed" for o in outcomes)
  if failed:
    print(f"{failed} run(s) failed; rerun the same command to resume them", file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  app.run(main)
