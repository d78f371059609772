"""The committed record (agent_rl/eval/reproduce/record.py): a results dir whose run workdirs
are gone (a fresh clone commits the row's .json, not the git-ignored workdirs) adds arms
without retraining the recorded ones or dropping them from the row, and refuses a recorded
run of another config."""
import json
import os
import shutil

import pytest

from agent_rl.eval.reproduce import main as rep
from agent_rl.eval.reproduce import runs
from tests.eval.toy_row import VALUES, FakeRun, toy  # noqa: F401 (toy: a fixture)


def _fresh_clone(rdir):
  """What a clone of the repository has: the row's files, none of its workdirs."""
  shutil.rmtree(os.path.join(rdir, "toy"))


def _recorded(toy, seeds=1):
  """The toy row run (both arms), then its workdirs gone: (row config, results dir, runner)."""
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)
  rep.reproduce(pc, "tiny", seeds, rdir, runner=fake, echo=lambda s: None)
  _fresh_clone(rdir)
  fake.calls.clear()
  return pc, rdir, fake


def _record(rdir, new=None):
  """The toy row's committed .json, read (or replaced by `new`)."""
  path = os.path.join(rdir, "toy.json")
  if new is not None:
    with open(path, "w") as f:
      json.dump(new, f)
  with open(path) as f:
    return json.load(f)


def test_an_arm_added_in_a_fresh_clone_keeps_the_recorded_arm(toy):
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)
  rep.reproduce(pc, "tiny", 2, rdir, arms=["M"], runner=fake, echo=lambda s: None)
  _fresh_clone(rdir)
  fake.calls.clear()
  listed = rep.list_rows("tiny", configs_dir=cdir, results_dir=rdir)
  toy_rows = listed[listed.index("toy:"):].splitlines()
  assert toy_rows[1].endswith("recorded (seeds 0,1); runnable")  # M: in the record
  assert toy_rows[2].endswith(":tiny,grpo                    runnable")  # B: not run yet
  assert "recorded" not in rep.list_rows("full", configs_dir=cdir, results_dir=rdir)
  assert "recorded" not in rep.list_rows("tiny", [("train.iterations", "9")], configs_dir=cdir,
                                         results_dir=rdir)  # recorded with other --set values
  said = []
  row, outcomes = rep.reproduce(pc, "tiny", 2, rdir, arms=["B"], runner=fake, echo=said.append)
  assert sorted(fake.calls) == [("B", 0), ("B", 1)]
  m, b = row.arms
  assert m.stats["eval/success"].values == tuple(VALUES["M"][:2])  # from the record
  assert b.stats["eval/success"].values == tuple(VALUES["B"][:2])
  assert all(r.recorded and r.config is not None for r in m.runs)
  assert not any(r.recorded for r in b.runs) and row.missing == ()
  assert row.pairs[0].ours.diff == pytest.approx(
      sum(VALUES["M"][:2]) / 2 - sum(VALUES["B"][:2]) / 2)
  md = open(os.path.join(rdir, "toy.md")).read()
  assert "- 2 runs read from this row's committed record" in md and "not kept" not in md
  # the whole row again: nothing to train (B's workdirs, M's record), the same numbers
  fake.calls.clear()
  said.clear()
  row2, _ = rep.reproduce(pc, "tiny", 2, rdir, runner=fake, echo=said.append)
  assert fake.calls == [] and sum("in the row's record" in s for s in said) == 2
  assert row2.arms[0].stats == m.stats and row2.pairs == row.pairs
  # and once more from a clone with no workdir at all: the record alone
  _fresh_clone(rdir)
  row3, _ = rep.reproduce(pc, "tiny", 2, rdir, runner=fake, echo=lambda s: None)
  assert fake.calls == [] and row3.pairs == row.pairs
  assert all(r.recorded for a in row3.arms for r in a.runs)


def test_a_recorded_run_of_another_config_is_refused_naming_fields(toy):
  pc, rdir, fake = _recorded(toy)
  saved = _record(rdir)
  saved["arms"][0]["runs"][0]["config"]["train"]["iterations"] = 5  # recorded from another run
  _record(rdir, saved)
  with pytest.raises(runs.StaleRunError, match=r"toy/M/seed0 \(recorded.*train.iterations"):
    rep.reproduce(pc, "tiny", 1, rdir, runner=fake, echo=lambda s: None)
  assert fake.calls == []  # refused before anything trains


def test_a_record_without_configs_is_matched_by_scale_and_overrides_and_flagged(toy):
  """Rows written before configs were kept in the record: accepted at the same scale and
  --set overrides, flagged in the markdown; another override is refused."""
  pc, rdir, fake = _recorded(toy)
  saved = _record(rdir)
  for a in saved["arms"]:
    for r in a["runs"]:
      del r["config"]
  _record(rdir, saved)
  row, _ = rep.reproduce(pc, "tiny", 1, rdir, runner=fake, echo=lambda s: None)
  assert fake.calls == [] and row.arms[0].stats["eval/success"].values == (VALUES["M"][0],)
  assert "2 of them recorded before configs were kept" in open(os.path.join(rdir, "toy.md")).read()
  with pytest.raises(runs.StaleRunError, match=r"recorded at .*'tiny'.*train.iterations.*"
                     r"remove the row's .json .* or use another --results_dir"):
    rep.reproduce(pc, "tiny", 1, rdir, [("train.iterations", "7")], runner=fake,
                  echo=lambda s: None)


def test_a_corrupt_record_is_a_clear_error(toy):
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  os.makedirs(rdir)
  with open(os.path.join(rdir, "toy.json"), "w") as f:
    f.write('{"arms": [')
  with pytest.raises(ValueError, match=r"toy.json: not valid JSON"):
    rep.reproduce(pc, "tiny", 1, rdir, runner=FakeRun(pc), echo=lambda s: None)


def test_the_record_is_read_by_arm_and_seed_not_by_the_results_dirs_spelling(toy):
  pc, rdir, fake = _recorded(toy)
  other = os.path.join(rdir, ".", "")  # the same dir, spelled with "./" and a trailing slash
  row, _ = rep.reproduce(pc, "tiny", 1, other, runner=fake, echo=lambda s: None)
  assert fake.calls == [] and row.arms[0].runs[0].workdir.startswith(other)
  assert row.arms[0].stats["eval/success"].values == (VALUES["M"][0],)


def test_fewer_seeds_keep_the_recorded_ones_and_a_stale_arm_stops_before_training(toy):
  """--seeds below the record's keeps its seeds in the row (a row rewritten from fewer would
  lose them for good); an arm not asked for whose record is another config is refused before
  the asked-for arm trains (not after it, with no row written)."""
  pc, rdir, fake = _recorded(toy, seeds=3)
  row, _ = rep.reproduce(pc, "tiny", 1, rdir, arms=["B"], runner=fake, echo=lambda s: None)
  assert fake.calls == [] and row.seeds == 3
  assert [a.stats["eval/success"].values for a in row.arms] == [tuple(VALUES["M"]),
                                                               tuple(VALUES["B"])]
  saved = _record(rdir)
  saved["arms"][0]["runs"][2]["config"]["train"]["iterations"] = 5  # M/seed2: another config
  saved["arms"][1]["runs"] = []  # B not recorded: --arms=B would train it
  _record(rdir, saved)
  with pytest.raises(runs.StaleRunError, match=r"M/seed2 \(recorded"):
    rep.reproduce(pc, "tiny", 3, rdir, arms=["B"], runner=fake, echo=lambda s: None)
  assert fake.calls == []


def test_the_row_says_which_code_its_runs_came_from_and_the_record_keeps_it(toy):
  """Each run's commits (its WORKDIR/code.jsonl, train/provenance.py) go into the row's JSON
  and a `code` line of its markdown; a fresh clone keeps them from the record."""
  cdir, rdir = toy
  pc = rep.load("toy", cdir)
  fake = FakeRun(pc)

  def with_code(spec):
    rc = fake(spec)
    if spec.arm == "M":  # B's runs predate code.jsonl
      with open(os.path.join(spec.workdir, "code.jsonl"), "w") as f:
        for dirty in (False, spec.seed == 1):  # seed 1 resumed on changed files
          f.write(json.dumps({"commit": "0123456789abcdef", "dirty": dirty}) + "\n")
    return rc
  rep.reproduce(pc, "tiny", 2, rdir, runner=with_code, echo=lambda s: None)
  runs_ = {(a["arm"], r["seed"]): r["code"] for a in _record(rdir)["arms"] for r in a["runs"]}
  assert runs_ == {("M", 0): ["0123456789"], ("M", 1): ["0123456789", "0123456789+dirty"],
                   ("B", 0): [], ("B", 1): []}
  line = ("- code of the finished runs (git commit of each start-up, train/provenance.py): "
          "`0123456789` (1 run); `0123456789, 0123456789+dirty` (1 run); `no code.jsonl` (2 runs)")
  assert line in open(os.path.join(rdir, "toy.md")).read().splitlines()
  _fresh_clone(rdir)
  rep.reproduce(pc, "tiny", 2, rdir, run=False, echo=lambda s: None)
  assert line in open(os.path.join(rdir, "toy.md")).read().splitlines()
