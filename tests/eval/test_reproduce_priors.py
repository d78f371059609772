"""Prior runs (agent_rl/eval/reproduce/priors.py): the runs a row's arms start from, built by the
harness before the first arm that needs one. A toy row whose arms start from two priors, the
second reading the first's tokenizer, with fake run functions (what train/run.py leaves in a
workdir); the declarations of every paper config; and one real prior + arm (slow)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from agent_rl.eval.reproduce import Comparison, paths, priors, runs
from agent_rl.eval.reproduce import main as rep
from agent_rl.eval.reproduce.comparison import PriorRun, load_comparisons
from tests.eval.toy_row import FakeRun

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

SRC = '''"""The priors' config."""
from agent_rl.train.config import scaled_config


def get_config(arg=None):
  c, _ = scaled_config(arg, {})
  c.sft.steps = 2
  return c
'''
ROW = '''"""A row whose M arm starts from prior P2 (which reads P1's tokenizer), B from P1."""
from agent_rl.eval.reproduce import Comparison
from agent_rl.eval.reproduce.comparison import PriorRun
from agent_rl.train.config import scaled_config

W1, W2 = {w1!r}, {w2!r}
P1 = PriorRun(W1, "src", overrides={{"train.iterations": "0"}})
P2 = PriorRun(W2, "src", overrides={{"train.iterations": "0",
                                     "tokenizer.path": W1 + "/tokenizer.model"}})
VARIANTS = dict(grpo=False)
COMPARISON = Comparison(arms={{"M": "", "B": "grpo"}}, method="M", baselines=("B",),
                        metrics=("eval/success",), priors=(P1, P2), setting="toy")


def get_config(arg=None):
  c, args = scaled_config(arg, VARIANTS)
  c.credit.name = "grpo" if args["grpo"] else "dr_grpo"
  c.train.iterations, c.sft.steps = 3, 0
  c.model.init_from = W1 if args["grpo"] else W2
  return c
'''


@pytest.fixture
def row(tmp_path):
  d = tmp_path / "configs"
  d.mkdir()
  w1, w2 = str(tmp_path / "runs" / "p1"), str(tmp_path / "runs" / "p2")
  (d / "src.py").write_text(SRC)
  (d / "row.py").write_text(ROW.format(w1=w1, w2=w2))
  return str(d), str(tmp_path / "results"), w1, w2


class FakePrior:
  """What a finished train run leaves: config.json, metrics.jsonl, the last checkpoint and
  the tokenizer file; records the workdirs it built; fails for those in `fail`."""

  def __init__(self, cdir, fail=()):
    self.cdir, self.fail, self.calls = cdir, set(fail), []

  def __call__(self, p, config_file):
    self.calls.append(p.workdir)
    assert config_file.endswith("src.py")
    if p.workdir in self.fail:
      return 3
    c = priors.build_config(p, self.cdir)
    os.makedirs(os.path.join(p.workdir, "checkpoints", str(priors.LAST_STEP[p.module](c))))
    with open(os.path.join(p.workdir, "config.json"), "w") as f:
      f.write(c.to_json_best_effort(indent=2, sort_keys=True))
    with open(os.path.join(p.workdir, "metrics.jsonl"), "w") as f:
      f.write(json.dumps({"step": 2, "eval/success": 0.5}) + "\n")
    with open(os.path.join(p.workdir, "tokenizer.model"), "wb") as f:
      f.write(b"\0")
    return 0


def test_prior_run_and_comparison_reject_bad_fields_naming_them():
  for kw, field in [(dict(workdir=""), "workdir"), (dict(config="configs/x.py"), "config"),
                    (dict(config="x.py"), "config"), (dict(module="agent_rl.export"), "module"),
                    (dict(overrides={"sft.steps": 40}), "overrides"),
                    (dict(workdir="gs://bucket/run"), "workdir")]:
    args = {"workdir": "runs/a", "config": "x", **kw}
    with pytest.raises(ValueError, match=f"PriorRun.{field}"):
      PriorRun(**args)
  p = PriorRun("runs/a", "x", overrides={"sft.steps": "40"})
  with pytest.raises(ValueError, match="Comparison.priors: two priors share a workdir"):
    Comparison(arms={"M": "", "B": "b"}, method="M", baselines=("B",),
               priors=(p, PriorRun("runs/a/", "y")))
  with pytest.raises(ValueError, match="Comparison.priors: a tuple of PriorRun"):
    Comparison(arms={"M": "", "B": "b"}, method="M", baselines=("B",), priors=[p])
  assert p.command() == ("python -m agent_rl.train --config=configs/x.py:tiny "
                         "--workdir=runs/a --config.sft.steps=40")
  with pytest.raises(TypeError):
    p.overrides["sft.steps"] = "1"  # a module-level declaration stays as written


def test_needed_lists_what_the_arms_name_dependencies_first(row):
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  comp = pc.comparison
  m, b = (runs.build_config(pc, runs.arm_arg("tiny", v), ()) for v in ("", "grpo"))
  assert [p.workdir for p in priors.needed(comp, [m], cdir)] == [w1, w2]  # P2 reads P1's tokenizer
  assert [p.workdir for p in priors.needed(comp, [b], cdir)] == [w1]
  assert [p.workdir for p in priors.needed(comp, [b, m], cdir)] == [w1, w2]
  b.model.init_from = ""
  assert priors.needed(comp, [b], cdir) == []
  # a path inside a prior's workdir names it too (the tokenizer file), a look-alike does not
  b.tokenizer.path = w2 + "/tokenizer.model"
  assert [p.workdir for p in priors.needed(comp, [b], cdir)] == [w1, w2]
  b.tokenizer.path = w2 + "x/tokenizer.model"
  assert priors.needed(comp, [b], cdir) == []
  # one run dir however it is spelled (relative to here or absolute)
  assert paths.provided_by(os.path.abspath("runs/x/tokenizer.model"), ["runs/x"]) == "runs/x"
  assert paths.provided_by("runs/x", [os.path.abspath("runs/x") + "/"]) is not None


def test_a_cycle_of_priors_is_refused_naming_it(row, tmp_path):
  cdir, rdir, w1, w2 = row
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  comp = Comparison(arms={"M": "", "B": "b"}, method="M", baselines=("B",), priors=(
      PriorRun(a, "src", overrides={"model.init_from": b}),
      PriorRun(b, "src", overrides={"model.init_from": a})))
  arm = priors.build_config(comp.priors[0], cdir)
  with pytest.raises(priors.PriorRunError, match=f"priors: {b} needs itself through {a}"):
    priors.needed(comp, [arm], cdir)


def test_the_row_builds_its_priors_once_before_the_arms(row):
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  order, said = [], []
  fp, arms = FakePrior(cdir), FakeRun(pc)
  prior_run = lambda p, f: (order.append(p.workdir), fp(p, f))[1]  # noqa: E731
  arm_run = lambda s: (order.append(s.arm), arms(s))[1]  # noqa: E731
  rep.reproduce(pc, "tiny", 2, rdir, runner=arm_run, prior_runner=prior_run, echo=said.append)
  assert order[:2] == [w1, w2] and sorted(order[2:]) == ["B", "B", "M", "M"]
  assert any(s.startswith(f"start  prior {w1}: python -m agent_rl.train --config=") for s in said)
  assert any(s.startswith(f"done   prior {w2} in ") for s in said)
  # the second pass: the arms are done, nothing is built or run
  fp.calls.clear()
  arms.calls.clear()
  rep.reproduce(pc, "tiny", 2, rdir, runner=arms, prior_runner=fp, echo=said.append)
  assert fp.calls == [] and arms.calls == []
  # a new seed of B needs P1 only, which is there: skipped, not rebuilt
  said.clear()
  rep.reproduce(pc, "tiny", 3, rdir, arms=["B"], runner=arms, prior_runner=fp, echo=said.append)
  assert fp.calls == [] and arms.calls == [("B", 2)]
  assert f"skip   prior {w1}: finished (step 2)" in said


def test_a_prior_killed_half_way_is_resumed_before_the_arms(row):
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  p1 = pc.comparison.priors[0]
  FakePrior(cdir)(p1, "configs/src.py")
  os.rename(os.path.join(w1, "checkpoints", "2"), os.path.join(w1, "checkpoints", "1"))
  assert "runnable" in rep.list_rows("tiny", configs_dir=cdir, results_dir=rdir)
  said, fp = [], FakePrior(cdir)
  rep.reproduce(pc, "tiny", 1, rdir, arms=["B"], runner=FakeRun(pc), prior_runner=fp,
                echo=said.append)
  assert fp.calls == [w1] and any(s.startswith(f"resume prior {w1} from step 1: ") for s in said)


def test_no_prior_is_built_when_no_arm_is_left(row):
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  rep.reproduce(pc, "tiny", 1, rdir, runner=FakeRun(pc), prior_runner=FakePrior(cdir),
                echo=lambda s: None)
  for w in (w1, w2):  # the arms finished; the runs they started from are gone (another machine)
    os.rename(w, w + ".gone")
  fp = FakePrior(cdir)
  rep.reproduce(pc, "tiny", 1, rdir, runner=FakeRun(pc), prior_runner=fp, echo=lambda s: None)
  assert fp.calls == []


def _with_failing_prior(row, failing):
  """The toy row run with the prior in `failing` exiting 3: (prior runner, arm runner, what the
  harness said, the row, its outcomes)."""
  cdir, rdir, _, _ = row
  pc = rep.load("row", cdir)
  fp, arms, said = FakePrior(cdir, fail=[failing]), FakeRun(pc), []
  row_, outcomes = rep.reproduce(pc, "tiny", 1, rdir, runner=arms, prior_runner=fp,
                                 echo=said.append)
  return fp, arms, said, row_, outcomes


def test_a_failed_prior_stops_only_the_arms_that_start_from_it(row):
  cdir, rdir, w1, w2 = row
  fp, arms, said, row_, outcomes = _with_failing_prior(row, w2)
  assert fp.calls == [w1, w2] and arms.calls == [("B", 0)]  # B starts from P1 only
  (m,) = [o for o in outcomes if o.spec.arm == "M"]
  assert m.state == "failed" and m.message == (
      f"prior run {w2} failed (exit status 3); see {w2}/reproduce.log")
  assert f"FAILED prior {w2}: {m.message}" in said and f"FAILED row/M/seed0: {m.message}" in said
  assert row_.missing == (os.path.join(rdir, "row", "M", "seed0"),)


def test_a_prior_whose_own_prior_failed_is_not_attempted(row):
  _, _, w1, w2 = row
  fp, arms, said, _, outcomes = _with_failing_prior(row, w1)
  assert fp.calls == [w1] and arms.calls == []  # P2 reads P1's tokenizer
  assert [o.state for o in outcomes] == ["failed", "failed"]
  assert f"FAILED prior {w2}: prior run {w2} not built: it starts from {w1}, which failed" in said


def test_a_prior_dir_holding_another_recipe_is_refused_naming_the_field(row):
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  other = PriorRun(w1, "src", overrides={"train.iterations": "0", "sft.steps": "5"})
  FakePrior(cdir)(other, "configs/src.py")
  arms = FakeRun(pc)
  _, (o,) = rep.reproduce(pc, "tiny", 1, rdir, arms=["B"], runner=arms,
                          prior_runner=FakePrior(cdir), echo=lambda s: None)
  assert o.state == "failed" and "sft.steps: 5 there, 2 here" in o.message and not arms.calls
  assert "NOT RUNNABLE" in rep.list_rows("tiny", configs_dir=cdir, results_dir=rdir)
  md = open(os.path.join(rdir, "row.md")).read()  # the row is still written, saying why
  assert "not built where this row was written (not read here: " in md
  assert "sft.steps: 5 there, 2 here" in md


def test_a_prior_another_harness_is_building_is_waited_for(row):
  """Another harness holds P1's workdir (its trainer is building it): this one waits for the
  lock, then finds it finished and does not build it again."""
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  comp = pc.comparison
  p1 = comp.priors[0]
  FakePrior(cdir)(p1, "configs/src.py")  # what the other harness's run leaves when it is done
  code = ("import fcntl, os, sys, time\n"
          f"fd = os.open({os.path.join(w1, runs.LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT)\n"
          "fcntl.flock(fd, fcntl.LOCK_EX)\nos.write(fd, b'otherhost 4242')\n"
          "print('held', flush=True)\ntime.sleep(1.5)\n")
  other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
  try:
    assert other.stdout.readline().strip() == "held"
    said, fp = [], FakePrior(cdir)
    assert priors.build(p1, cdir, runner=fp, echo=said.append, poll_s=0.1) is None
  finally:
    other.kill()
    other.wait()
  assert fp.calls == []
  assert said[0].startswith(f"wait   prior {w1}: running in pid 4242 on otherhost")
  assert said[-1] == f"skip   prior {w1}: finished (step 2)"


def test_dry_run_and_list_name_the_priors_left(row, tmp_path):
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  lines = rep.dry_run(pc, "tiny", 1, rdir)
  assert lines[0] == (f"python -m agent_rl.train --config={cdir}/src.py:tiny "
                      f"--workdir={w1} --config.train.iterations=0")
  assert lines[1].startswith("python -m agent_rl.train") and f"--workdir={w2}" in lines[1]
  assert lines[2].startswith("# ") and len(lines) == 5
  assert not os.path.exists(w1)  # a dry run writes nothing
  text = rep.list_rows("tiny", configs_dir=cdir, results_dir=rdir)
  assert f"M            :tiny                         runnable (builds {w1}, {w2} first)" in text
  assert f"runnable (builds {w1} first)" in text
  FakePrior(cdir)(pc.comparison.priors[0], "configs/src.py")
  assert rep.dry_run(pc, "tiny", 1, rdir, arms=["B"])[0].startswith(
      "python -m agent_rl.train --config=")  # P1 is finished: the arm's command comes first
  assert f"runnable (builds {w2} first)" in rep.list_rows("tiny", configs_dir=cdir,
                                                         results_dir=rdir)


def test_rows_sharing_a_prior_print_it_once(row):
  cdir, rdir, w1, w2 = row
  with open(os.path.join(cdir, "row2.py"), "w") as f:  # B's twin: P1 only
    f.write(open(os.path.join(cdir, "row.py")).read().replace("priors=(P1, P2)", "priors=(P1,)")
            .replace("c.model.init_from = W1 if args[\"grpo\"] else W2", "c.model.init_from = W1"))
  pcs = [rep.load(n, cdir) for n in ("row", "row2")]
  lines = rep.dry_run_rows(pcs, "tiny", 1, rdir)
  assert [ln.split(" --workdir=")[1].split()[0] for ln in lines if not ln.startswith("#")] == [
      w1, w2, *(os.path.join(rdir, n, a, "seed0") for n in ("row", "row2") for a in ("M", "B"))]
  assert sum(ln.startswith("#") for ln in lines) == 1 and lines[2].startswith("#")


def test_every_run_dir_a_paper_row_starts_from_is_a_declared_prior():
  """No row needs a recipe run by hand: every run dir its arms (at either scale) and its
  priors name under runs/ is built by one of its priors, whose configs build; the recipes the
  config docstrings quote are the priors' commands."""
  from agent_rl.train import world_defaults as wd
  seen = 0
  for pc in load_comparisons():
    comp = pc.comparison
    if comp is None:
      continue
    cdir = os.path.dirname(pc.path)
    dirs = [p.workdir for p in comp.priors]
    configs = [runs.build_config(pc, runs.arm_arg(scale, v), comp.overrides.items())
               for v in comp.arms.values() for scale in ("tiny", "full")]
    configs += [priors.build_config(p, cdir) for p in comp.priors]
    for c in configs:
      for field, path in paths.referenced_paths(c):
        if path.startswith("runs/"):
          assert paths.provided_by(path, dirs), (pc.name, field, path)
          seen += 1
    assert {p.workdir for p in priors.needed(comp, configs, cdir)} == set(dirs), pc.name  # all used
  assert seen > 40
  assert wd.SOKOBAN_SFT40_RECIPE == (
      "python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny "
      "--workdir=runs/sokoban_sft40 --config.train.iterations=0 --config.sft.steps=40")
  assert wd.MINISHOP_SFT_RECIPE == ("python -m agent_rl.train --config=configs/gigpo_minishop.py"
                                    ":tiny --workdir=runs/minishop_sft300 "
                                    "--config.train.iterations=0")
  assert wd.PRM_SFT40_RUN.command() == (
      "python -m agent_rl.reward.train --config=configs/reward_model.py:tiny,process "
      "--workdir=runs/prm_sft40 --config.rm.policy_run=runs/sokoban_sft40 "
      "--config.model.init_from=runs/sokoban_sft40")


SMOKE = {"model.hidden": "32", "model.num_layers": "1", "model.num_heads": "2",
         "model.num_kv_heads": "1", "model.intermediate": "64", "tokenizer.vocab_size": "400",
         "rollout.num_tasks": "4", "rollout.group_size": "2", "sft.num_demos": "4",
         "sft.batch_size": "4", "train.minibatch_episodes": "2", "eval.num_tasks": "2",
         "eval.k": "2", "mesh.num_devices": "1"}
REAL = '''"""Countdown smoke: an arm from a real prior run."""
from agent_rl.eval.reproduce import Comparison
from agent_rl.eval.reproduce.comparison import PriorRun, import_config

BASE = import_config({base!r})
SMOKE = {smoke!r}
W = {w!r}
P = PriorRun(W, "real", "tiny", {{**SMOKE, "train.iterations": "0", "sft.steps": "2"}})
COMPARISON = Comparison(arms={{"M": "", "B": "grpo"}}, method="M", baselines=("B",),
                        priors=(P,), overrides={{"model.init_from": W, "sft.steps": "0",
                                                 "tokenizer.path": W + "/tokenizer.model",
                                                 "train.iterations": "1", **SMOKE}})


def get_config(arg=None):
  return BASE.get_config(arg)
'''


@pytest.mark.slow
def test_a_real_prior_run_then_an_arm_from_it(tmp_path, monkeypatch):
  """The harness's own subprocesses: the prior (2 SFT steps of a 1-layer Countdown policy) is
  trained, then the arm starts from it (one RL iteration); a second pass builds and runs
  nothing (the prior's last step is what train/run.py checkpoints)."""
  monkeypatch.chdir(ROOT)
  d = tmp_path / "configs"
  d.mkdir()
  w = str(tmp_path / "runs" / "policy")
  (d / "real.py").write_text(REAL.format(base=os.path.abspath("configs/dr_grpo_countdown.py"),
                                         smoke=SMOKE, w=w))
  pc = rep.load("real", str(d))
  said = []
  _, outcomes = rep.reproduce(pc, "tiny", 1, str(tmp_path / "results"), arms=["M"],
                              echo=said.append)
  assert [o.state for o in outcomes] == ["ran"], said
  assert priors.state(pc.comparison.priors[0], str(d))[0] == "done"
  assert any(s.startswith(f"done   prior {w}") for s in said)
  said.clear()
  _, outcomes = rep.reproduce(pc, "tiny", 1, str(tmp_path / "results"), arms=["M"],
                              echo=said.append)
  assert [o.state for o in outcomes] == ["skipped"] and not any(" prior " in s for s in said)


def test_the_row_records_what_its_arms_started_from(row):
  """The row's JSON and markdown keep each prior's final evaluation; a fresh clone without the
  prior keeps the record's, and a prior built again with other values is added beside it."""
  cdir, rdir, w1, w2 = row
  pc = rep.load("row", cdir)
  rep.reproduce(pc, "tiny", 1, rdir, runner=FakeRun(pc), prior_runner=FakePrior(cdir),
                echo=lambda s: None)

  def saved():
    with open(os.path.join(rdir, "row.json")) as f:
      return {p["workdir"]: p for p in json.load(f)["priors"]}
  first = saved()
  assert first[w1]["seen"] == [{"step": 2, "final": {"eval/success": 0.5}}]
  assert first[w2]["command"].startswith(f"python -m agent_rl.train --config=configs/src.py:tiny "
                                         f"--workdir={w2}")
  md = open(os.path.join(rdir, "row.md")).read()
  assert f"- started from `{w1}` (`python -m agent_rl.train" in md
  assert "): step 2, eval/success 0.500\n" in md
  for w in (w1, w2):
    os.rename(w, w + ".gone")
  rep.reproduce(pc, "tiny", 1, rdir, run=False, echo=lambda s: None)
  assert saved() == first  # the record's, not "not built"
  FakePrior(cdir)(pc.comparison.priors[0], "configs/src.py")
  with open(os.path.join(w1, "metrics.jsonl"), "w") as f:  # a sibling build: other values
    f.write(json.dumps({"step": 2, "eval/success": 0.25, "eval/reward": 1.0}) + "\n")
  rep.reproduce(pc, "tiny", 1, rdir, run=False, echo=lambda s: None)
  assert saved()[w1]["seen"] == [{"step": 2, "final": {"eval/success": 0.5}},
                                 {"step": 2, "final": {"eval/reward": 1.0, "eval/success": 0.25}}]
  assert "another build of it: step 2, eval/reward 1.000, eval/success 0.250" in open(
      os.path.join(rdir, "row.md")).read()
  os.rename(w2 + ".gone", w2)
  shutil.rmtree(w2)
  os.makedirs(w2)
  with open(os.path.join(rdir, "row.json")) as f:
    doc = json.load(f)
  doc["priors"] = []  # a row written before priors were kept
  with open(os.path.join(rdir, "row.json"), "w") as f:
    json.dump(doc, f)
  rep.reproduce(pc, "tiny", 1, rdir, run=False, echo=lambda s: None)
  assert saved()[w2]["seen"] == []
  assert f"- started from `{w2}` (`" in open(os.path.join(rdir, "row.md")).read()
  assert "not built where this row was written" in open(os.path.join(rdir, "row.md")).read()


def test_a_tokenizer_path_the_run_resolved_is_its_recipe(row, tmp_path):
  """A reward-model (or distilling) run saves the tokenizer it resolved from an empty
  `tokenizer.path` (its policy run's, pretrained.run_tokenizer_path: a file in that run, or the
  one its config names): still its recipe. Any other path, or a filled path in a plain run (it
  trains its own tokenizer), is another run, as is a path the recipe sets and the dir differs on."""
  cdir, rdir, w1, w2 = row
  p1, p2 = rep.load("row", cdir).comparison.priors
  rm = PriorRun(str(tmp_path / "rm"), "src", overrides={"train.iterations": "0",
                                                         "rm.policy_run": w1})
  teach = PriorRun(str(tmp_path / "opd"), "src", overrides={"train.iterations": "0",
                                                             "distill.teacher": w2})
  for p in (p1, p2, rm, teach):
    FakePrior(cdir)(p, "configs/src.py")

  def saved_as(p, path):
    cfg = os.path.join(p.workdir, "config.json")
    saved = json.load(open(cfg))
    saved["tokenizer"]["path"] = path
    json.dump(saved, open(cfg, "w"))
  saved_as(rm, w1 + "/tokenizer.model")
  assert priors.state(rm, cdir) == ("done", 2)
  saved_as(teach, w1 + "/tokenizer.model")  # the teacher's config names P1's tokenizer
  assert priors.state(teach, cdir) == ("done", 2)
  for p, path in ((rm, "runs/other/tokenizer.model"), (p1, w1 + "/tokenizer.model"),
                  (p2, "runs/other/tokenizer.model")):
    saved_as(p, path)
    with pytest.raises(runs.StaleRunError, match=f"tokenizer.path: '{path}' there"):
      priors.state(p, cdir)


def test_a_nan_evaluation_is_one_observation_not_one_per_pass(row):
  cdir, rdir, w1, w2 = row
  comp = rep.load("row", cdir).comparison
  FakePrior(cdir)(comp.priors[0], "configs/src.py")
  with open(os.path.join(w1, "metrics.jsonl"), "w") as f:
    f.write('{"step": 2, "eval/rm_auc": NaN}\n')  # a PRM whose held-out labels are one class
  first = priors.observations(comp, cdir)
  again = priors.observations(comp, cdir, json.loads(json.dumps(first)))
  assert len(again[0]["seen"]) == 1
