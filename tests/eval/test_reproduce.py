"""The reproduction harness (agent_rl/eval/reproduce, launch/reproduce.py): interval arithmetic
against scipy's Welch t-test and tabulated t quantiles; comparison declarations (every paper
config's); planning, --list and --dry-run; resumability with a fake run function; the files
written; and one budgeted real smoke (slow: a real run costs minutes on a shared 2-core box)."""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as st

from agent_rl.eval.reproduce import Comparison
from agent_rl.eval.reproduce import main as rep
from agent_rl.eval.reproduce import results, runs, stats
from agent_rl.eval.reproduce.comparison import load_comparisons, load_config
from tests.eval.toy_row import TOY, VALUES, FakeRun, toy  # noqa: F401 (toy: a fixture)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

# -- interval arithmetic --------------------------------------------------------------------

T975 = {1: 12.706205, 2: 4.302653, 4: 2.776445, 9: 2.262157}  # two-sided 95%, from t tables


@pytest.mark.parametrize("df", sorted(T975))
def test_t_quantile_matches_tables(df):
  assert stats.t_quantile(df) == pytest.approx(T975[df], abs=1e-5)


@pytest.mark.parametrize("x", [[0.70, 0.75, 0.72], [0.1, 0.9], [0.3, 0.3, 0.5, 0.6, 0.2]])
def test_arm_interval_against_numpy_and_table(x):
  s = stats.arm_stats(x)
  a = np.asarray(x)
  n, m, sd = len(a), a.mean(), a.std(ddof=1)
  h = T975[n - 1] * sd / math.sqrt(n)
  assert (s.n, s.mean, s.std) == (n, pytest.approx(m, abs=1e-12), pytest.approx(sd, abs=1e-12))
  assert s.ci95 == pytest.approx((m - h, m + h), abs=1e-5)
  lo, hi = st.t.interval(0.95, n - 1, loc=m, scale=st.sem(a))
  assert s.ci95 == pytest.approx((lo, hi), abs=1e-10)


@pytest.mark.parametrize("a,b", [([0.8, 0.9, 0.85], [0.7, 0.75, 0.72]),
                                 ([0.1, 0.5, 0.2, 0.9], [0.3, 0.31, 0.29]),
                                 ([0.0, 0.0, 0.5], [0.25, 0.5, 0.75, 1.0, 0.0])])
def test_welch_diff_against_scipy_ttest_ind(a, b):
  d = stats.welch_diff(a, b)
  ref = st.ttest_ind(a, b, equal_var=False)
  ci = ref.confidence_interval(0.95)
  assert d.diff == pytest.approx(np.mean(a) - np.mean(b), abs=1e-12)
  assert d.df == pytest.approx(ref.df, rel=1e-10)
  assert d.p == pytest.approx(ref.pvalue, rel=1e-8)
  assert d.ci95 == pytest.approx((ci.low, ci.high), abs=1e-10)


def test_degenerate_cases_do_not_raise():
  assert stats.arm_stats([]).mean is None
  one = stats.arm_stats([0.5])
  assert (one.n, one.mean, one.std, one.ci95) == (1, 0.5, None, None)
  assert stats.welch_diff([0.5], [0.2, 0.3]).ci95 is None
  flat = stats.welch_diff([0.5, 0.5], [0.25, 0.25])  # no spread: a point, no p-value
  assert flat.diff == 0.25 and flat.ci95 == (0.25, 0.25) and flat.p is None
  assert stats.welch_diff([], [0.1]).diff is None


def test_agreement_words():
  D = stats.Diff
  assert stats.agreement(D(0.2, (0.1, 0.3), 4.0, 0.01), 1) == "yes"
  assert stats.agreement(D(0.2, (-0.1, 0.5), 4.0, 0.2), 1) == "yes (n.s.)"
  assert stats.agreement(D(0.2, (0.1, 0.3), 4.0, 0.01), -1) == "no"
  assert stats.agreement(D(-0.2, (-0.5, 0.1), 4.0, 0.2), 1) == "no (n.s.)"
  assert stats.agreement(D(0.2, (0.1, 0.3), 4.0, 0.01), 0) == "no paper direction"
  assert stats.agreement(D(0.0, None, None, None), 1) == "tie"
  assert stats.agreement(D(None, None, None, None), 1) == "n/a"


# -- declarations -------------------------------------------------------------------------------

def test_comparison_rejects_bad_fields_naming_them():
  ok = dict(arms={"A": "", "B": "b"}, method="A", baselines=("B",))
  Comparison(**ok)
  for bad, field in [(dict(method="C"), "method"), (dict(baselines=("A",)), "baselines"),
                     (dict(baselines=["B"]), "baselines"), (dict(metrics=()), "metrics"),
                     (dict(paper={"Z": {"eval/success": 1.0}}), "paper"),
                     (dict(paper={"A": {"eval/other": 1.0}}), "paper"),
                     (dict(claims={"B": 2}), "claims"), (dict(arms={"A/x": ""}), "arms"),
                     (dict(arms={"A": "", "B, c": "b"}, baselines=("B, c",)), "arms"),
                     (dict(claims={"B": {"eval/other": 1}}), "claims"),
                     (dict(claims={"B": {"eval/success": 3}}), "claims")]:
    with pytest.raises(ValueError, match=f"Comparison.{field}"):
      Comparison(**{**ok, **bad})
  per_metric = Comparison(**ok, metrics=("eval/reward", "eval/success"),
                          claims={"B": {"eval/success": -1}})
  assert per_metric.paper_direction("B", "eval/success") == (-1, None)
  assert per_metric.paper_direction("B", "eval/reward") == (1, None)


def test_every_declared_comparison_builds_its_arms():
  declared = {pc.name: pc for pc in load_comparisons() if pc.comparison is not None}
  assert {"gigpo_texthouse", "ragen_sokoban", "dr_grpo_countdown", "spa_sokoban"} <= set(declared)
  for pc in declared.values():
    comp = pc.comparison
    for arm, variant in comp.arms.items():
      c = pc.module.get_config(runs.arm_arg("tiny", variant))  # unknown variants raise here
      assert c.scale == "tiny", (pc.name, arm)
    for arm, nums in comp.paper.items():
      assert all(0.0 <= v <= 1.0 for v in nums.values()), (pc.name, arm, "fractions, not %")
  assert load_config("reward_model").reason == "no comparison declared"


# -- the toy row (tests/eval/toy_row.py) ----------------------------------------------------

def test_plan_and_dry_run_commands(toy):
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  lines = rep.dry_run(pc, "tiny", 2, rdir, [("train.iterations", "1")])
  assert len(lines) == 4
  assert lines[0].startswith("python -m agent_rl.train --config=")
  assert lines[0].endswith(f":tiny --workdir={rdir}/toy/M/seed0 --config.train.iterations=1 "
                           "--config.seed=0")
  assert f":tiny,grpo --workdir={rdir}/toy/B/seed1" in lines[3]
  sb = rep.dry_run(pc, "full", 1, rdir, arms=["B"], launcher="sbatch launch/slurm_gpu.sbatch")
  assert sb == [f"sbatch launch/slurm_gpu.sbatch --config={pc.path}:full,grpo "
                f"--workdir={rdir}/toy/B/seed0 --config.seed=0"]
  with pytest.raises(ValueError, match="--arms"):
    runs.plan(pc, "tiny", 1, rdir, arms=["Z"])
  with pytest.raises(ValueError, match="no comparison declared"):
    rep.load("plain", cdir)


def test_list_names_rows_arms_and_reasons(toy):
  cdir, _ = toy
  text = rep.list_rows("tiny", configs_dir=cdir)
  assert "plain: no comparison declared" in text
  assert "toy: M vs B on toy world" in text
  assert re.search(r"^  M +:tiny +runnable$", text, re.M)
  unreg = text[text.index("unreg:"):]
  assert "NOT RUNNABLE: config.env.name: unknown environment 'no_such_env'" in unreg
  missing = rep.list_rows("tiny", [("model.init_from", "/nonexistent/run")], configs_dir=cdir)
  assert "NOT RUNNABLE" in missing and "/nonexistent/run" in missing
  ok, skipped = rep.runnable_papers("tiny", configs_dir=cdir)
  assert [p.name for p in ok] == ["cross", "toy"] and {n for n, _ in skipped} == {"plain", "unreg"}


def test_runs_resume_skip_finished_and_write_files(toy):
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)
  specs = runs.plan(pc, "tiny", 3, rdir)
  fake(specs[0])  # M/seed0 finished before
  os.makedirs(os.path.join(specs[1].workdir, "checkpoints", "2"))  # M/seed1 killed after SFT
  fake.calls.clear()
  said = []
  row, outcomes = rep.reproduce(pc, "tiny", 3, rdir, runner=fake, echo=said.append)
  assert ("M", 0) not in fake.calls and len(fake.calls) == 5
  assert [o.state for o in outcomes].count("skipped") == 1
  assert any("resume toy/M/seed1 from step 2" in s for s in said)
  # the plan is said up front ("to run"); a run says "start"/"resume" when it begins (jobs=1:
  # after the run before it is done)
  assert "to run toy/M/seed1 (resumes from step 2)" in said
  begins = [i for i, s in enumerate(said) if s.startswith(("start ", "resume "))]
  dones = [i for i, s in enumerate(said) if s.startswith("done ")]
  assert len(begins) == len(dones) == 5
  assert all(d < b for d, b in zip(dones, begins[1:])) and begins[0] > max(
      i for i, s in enumerate(said) if s.startswith("to run"))
  # the numbers: stats over seeds, Welch against scipy, the paper's diff and direction
  m, b = (a.stats["eval/success"] for a in row.arms)
  assert m.values == tuple(VALUES["M"]) and b.values == tuple(VALUES["B"])
  (pair,) = row.pairs
  ref = st.ttest_ind(VALUES["M"], VALUES["B"], equal_var=False).confidence_interval(0.95)
  assert pair.ours.ci95 == pytest.approx((ref.low, ref.high))
  assert pair.paper_diff == pytest.approx(0.2) and pair.agrees == "yes"
  for ext in ("json", "md", "png"):
    assert os.path.getsize(os.path.join(rdir, f"toy.{ext}")) > 0
  with open(os.path.join(rdir, "toy.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with open(os.path.join(rdir, "toy.json")) as f:
    saved = json.load(f)
  assert saved["pairs"][0]["agrees"] == "yes"
  assert saved["arms"][0]["stats"]["eval/success"]["n"] == 3
  md = open(os.path.join(rdir, "toy.md")).read()
  assert "| M | `(default)` | 3 | 0.850 |" in md and "| `eval/success` | B | +0.127 |" in md
  assert "| 0.800, 0.900, 0.850 | 0.425 | +0.425 |" in md  # after SFT (v / 2) and RL's gain
  # a second call runs nothing; the table collects the row
  fake.calls.clear()
  rep.reproduce(pc, "tiny", 3, rdir, runner=fake, echo=said.append)
  assert fake.calls == []
  path, table = results.write_table(rdir)
  assert os.path.exists(path)
  assert "| toy | toy world, tiny, 3 seeds | B | M | `eval/success` | +0.127 [" in table
  assert table.rstrip().endswith("| +0.200 (unverified) | yes |")


def test_a_baseline_shared_with_another_row_is_reused_not_rerun(toy):
  """toy2's B arm is toy's B config (same fields, same seeds): linked to toy's finished runs;
  its M arm (another credit) and a seed toy never ran are trained."""
  cdir, rdir = toy
  with open(os.path.join(cdir, "toy2.py"), "w") as f:
    f.write(TOY.replace('"dr_grpo"', '"rloo"'))
  pc, pc2 = rep.load("toy", cdir), rep.load("toy2", cdir)
  rep.reproduce(pc, "tiny", 2, rdir, runner=FakeRun(pc), echo=lambda s: None)
  fake2, said = FakeRun(pc2), []
  row, outcomes = rep.reproduce(pc2, "tiny", 3, rdir, runner=fake2, echo=said.append)
  assert sorted(fake2.calls) == [("B", 2), ("M", 0), ("M", 1), ("M", 2)]
  for k in (0, 1):
    wd = os.path.join(rdir, "toy2", "B", f"seed{k}")
    assert os.path.islink(wd)
    assert os.path.realpath(wd) == os.path.realpath(os.path.join(rdir, "toy", "B", f"seed{k}"))
  assert sum("reuse  toy2/B/seed" in s for s in said) == 2
  assert row.arms[1].stats["eval/success"].values == tuple(VALUES["B"])
  # a second pass sees the links as finished runs of its own config
  fake2.calls.clear()
  rep.reproduce(pc2, "tiny", 3, rdir, runner=fake2, echo=lambda s: None)
  assert fake2.calls == []


def test_a_kwarg_only_one_row_sets_makes_another_experiment_not_a_twin(toy):
  """toy3's B arm sets an env kwarg toy's B leaves to the env's default (carl_kbqa's
  parametric_frac vs search_r1_kbqa): trained, not linked; and a run dir linked by the old
  rule (a kwarg the saved run lacks passed as a "new default") is refused, naming it."""
  cdir, rdir = toy
  with open(os.path.join(cdir, "toy3.py"), "w") as f:
    f.write(TOY.replace('  c.train.iterations, c.sft.steps = 3, 2',
                        '  c.train.iterations, c.sft.steps = 3, 2\n'
                        '  c.env.kwargs.max_steps = 7'))
  pc, pc3 = rep.load("toy", cdir), rep.load("toy3", cdir)
  rep.reproduce(pc, "tiny", 1, rdir, runner=FakeRun(pc), echo=lambda s: None)
  fake3, said = FakeRun(pc3), []
  rep.reproduce(pc3, "tiny", 1, rdir, runner=fake3, echo=said.append)
  assert sorted(fake3.calls) == [("B", 0), ("M", 0)] and not any("reuse" in s for s in said)
  shutil.rmtree(os.path.join(rdir, "toy3", "B", "seed0"))
  runs.link_twin(os.path.join(rdir, "toy3", "B", "seed0"), os.path.join(rdir, "toy", "B", "seed0"))
  with pytest.raises(runs.StaleRunError, match=r"env.kwargs.max_steps: '\(unset\)' there, 7 here"):
    rep.reproduce(pc3, "tiny", 1, rdir, runner=fake3, echo=lambda s: None)


def test_another_config_in_a_run_dir_is_refused_naming_fields(toy):
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)
  rep.reproduce(pc, "tiny", 1, rdir, arms=["M"], runner=fake, echo=lambda s: None)
  with pytest.raises(runs.StaleRunError, match="train.iterations: 3 there, 7 here"):
    rep.reproduce(pc, "tiny", 1, rdir, [("train.iterations", "7")], arms=["M"], runner=fake,
                  echo=lambda s: None)


def test_a_failed_run_is_reported_and_the_others_go_on(toy):
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)

  def flaky(spec):
    if spec.arm == "B" and spec.seed == 0:
      raise RuntimeError("out of memory")
    return fake(spec)
  row, outcomes = rep.reproduce(pc, "tiny", 2, rdir, runner=flaky, jobs=2, echo=lambda s: None)
  failed = [o for o in outcomes if o.state == "failed"]
  assert len(failed) == 1 and "out of memory" in failed[0].message
  assert row.missing == (os.path.join(rdir, "toy", "B", "seed0"),)
  assert row.arms[1].stats["eval/success"].n == 1


def _hold_lock(workdir):
  """Another process holding workdir's lock (flock'ed, "<host> <pid>" written), until killed."""
  path = os.path.join(workdir, runs.LOCK_FILE)
  os.makedirs(workdir, exist_ok=True)
  code = ("import fcntl, os, socket, sys, time\n"
          f"fd = os.open({path!r}, os.O_RDWR | os.O_CREAT)\n"
          "fcntl.flock(fd, fcntl.LOCK_EX)\n"
          "os.write(fd, f'{socket.gethostname()} {os.getpid()}'.encode())\n"
          "print('held', flush=True)\ntime.sleep(120)\n")
  p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
  assert p.stdout.readline().strip() == "held"
  return p


def _locked(workdir):
  """Whether some process holds workdir's lock (a non-blocking flock attempt of our own)."""
  import fcntl
  fd = os.open(os.path.join(workdir, runs.LOCK_FILE), os.O_RDWR)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return False
  except BlockingIOError:
    return True
  finally:
    os.close(fd)


def test_a_run_another_harness_process_holds_is_skipped_and_a_dead_lock_is_taken(toy):
  """Two harness processes over one results dir: the run the other (live) process holds is
  skipped, a lock file its dead writer left is taken, and ours is released after the run."""
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)
  m0, b0 = (s.workdir for s in runs.plan(pc, "tiny", 1, rdir))
  live = _hold_lock(m0)
  os.makedirs(b0)
  with open(os.path.join(b0, runs.LOCK_FILE), "w") as f:  # written, then its process died
    f.write(f"{socket.gethostname()} 999999")
  try:
    said = []
    rep.reproduce(pc, "tiny", 1, rdir, runner=fake, echo=said.append)
    assert fake.calls == [("B", 0)]
    assert (f"busy   toy/M/seed0: running in pid {live.pid} on {socket.gethostname()}"
            in "\n".join(said))
    assert not _locked(b0) and _locked(m0)  # ours released, the live process's kept
  finally:
    live.kill()
    live.wait()
  fake.calls.clear()  # its holder died: the next pass runs it
  rep.reproduce(pc, "tiny", 1, rdir, runner=fake, echo=lambda s: None)
  assert fake.calls == [("M", 0)]


def test_the_trainer_holds_the_lock_after_its_harness_lets_go(tmp_path):
  """A harness killed while its run trains: the trainer (a child given `held_fds`) still holds
  the workdir, so a second harness does not start another trainer in it; when it exits, the
  workdir is free. Two claimers never both win."""
  wd = str(tmp_path / "run")
  assert runs.claim(wd) is None
  assert runs.claim(wd) is not None  # a second claim (another open file) is refused
  child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                           pass_fds=runs.held_fds(wd))
  try:
    runs.release(wd)  # the harness lets go (as a killed one does)
    held = runs.claim(wd)
    assert held is not None and f"pid {os.getpid()}" in held and runs.held_fds(wd) == ()
  finally:
    child.kill()
    child.wait()
  assert runs.claim(wd) is None  # the trainer exited: free
  runs.release(wd)


def test_a_run_finished_elsewhere_after_planning_is_not_rerun(toy):
  """A run another process finishes while this one works through its list is skipped when
  its turn comes (the state is read again under the lock)."""
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)
  m0, b0 = runs.plan(pc, "tiny", 1, rdir)

  def first_also_finishes_b0(spec):
    if spec == m0:
      fake(b0)
    return fake(spec)
  said = []
  rep.reproduce(pc, "tiny", 1, rdir, runner=first_also_finishes_b0, echo=said.append)
  assert fake.calls == [("B", 0), ("M", 0)]
  assert "skip   toy/B/seed0: finished (step 5)" in said


def test_override_typing():
  from agent_rl.train.config import base_config
  c = base_config()
  for k, v in [("train.iterations", "3"), ("optim.lr", "1e-3"), ("train.halt_on_nan", "false"),
               ("credit.kwargs.gamma", "0.9"), ("credit.kwargs.norm", "std_norm"),
               ("env.name", "countdown")]:
    runs.apply_override(c, k, v)
  assert (c.train.iterations, c.optim.lr, c.train.halt_on_nan) == (3, 1e-3, False)
  assert (c.credit.kwargs.gamma, c.credit.kwargs.norm, c.env.name) == (0.9, "std_norm", "countdown")
  with pytest.raises(ValueError, match="--config.train.iterations"):
    runs.apply_override(c, "train.iterations", "many")
  assert runs.parse_override("--config.sft.steps=0") == ("sft.steps", "0")
  with pytest.raises(ValueError, match="--set"):
    runs.parse_override("sft.steps")


def test_cli_dry_run_prints_one_command_per_run(tmp_path):
  out = subprocess.run([sys.executable, "launch/reproduce.py", "--paper=gigpo_texthouse",
                        "--seeds=2", "--dry-run", f"--results_dir={tmp_path}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  # the policy run the arms start from comes first where it is not built here (priors.py)
  first, lines = lines[:-10], lines[-10:]  # 5 arms x 2 seeds
  assert first in ([], ["python -m agent_rl.train --config=configs/gigpo_texthouse.py:tiny "
                        "--workdir=runs/texthouse_sft300 --config.train.iterations=0",
                        "# the runs below start from the runs above: let those finish first"])
  assert first or os.path.exists(os.path.join(ROOT, "runs", "texthouse_sft300"))
  assert lines[0] == (f"python -m agent_rl.train --config=configs/gigpo_texthouse.py:tiny "
                      f"--workdir={tmp_path}/gigpo_texthouse/GiGPO/seed0 "
                      "--config.model.init_from=runs/texthouse_sft300 "
                      "--config.tokenizer.path=runs/texthouse_sft300/tokenizer.model "
                      "--config.sft.steps=0 --config.seed=0")  # the row's overrides, then the seed
  assert not os.listdir(tmp_path)  # a dry run writes nothing


SMOKE = ["model.hidden=32", "model.num_layers=1", "model.num_heads=2", "model.num_kv_heads=1",
         "model.intermediate=64", "tokenizer.vocab_size=400", "rollout.num_tasks=4",
         "rollout.group_size=2", "sft.steps=2", "sft.num_demos=4", "sft.batch_size=4",
         "train.minibatch_episodes=2", "eval.num_tasks=2", "eval.k=2", "mesh.num_devices=1"]


@pytest.mark.slow
def test_real_smoke_two_seeds_then_resume_skips(tmp_path):
  """The budgeted CI smoke: Countdown (single turn, the cheapest config), the Dr.GRPO and
  GRPO arms x 2 seeds, 2 RL iterations of a 1-layer model, through the CLI; then the same
  command again runs nothing. 350 s here (2 cores, --jobs=2, a shared machine)."""
  cmd = [sys.executable, "launch/reproduce.py", "--paper=dr_grpo_countdown", "--arms=Dr.GRPO,GRPO",
         "--seeds=2", "--iterations=2", "--jobs=2", f"--results_dir={tmp_path}",
         *[f"--set={s}" for s in SMOKE]]
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
  assert out.returncode == 0, out.stdout + out.stderr
  with open(tmp_path / "dr_grpo_countdown.json") as f:
    row = json.load(f)
  assert [a["stats"]["eval/success"]["n"] for a in row["arms"]] == [2, 2, 0]  # DAPO: not run
  (pair,) = [p for p in row["pairs"] if p["metric"] == "eval/success"]
  a, b = (a["stats"]["eval/success"]["values"] for a in row["arms"])
  if np.var(a) + np.var(b) > 0:
    ref = st.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert pair["ours"]["ci95"] == pytest.approx([ref.low, ref.high])
  for ext in ("png", "md"):
    assert (tmp_path / f"dr_grpo_countdown.{ext}").exists()
  again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert again.returncode == 0 and again.stdout.count("skip ") == 4, again.stdout
