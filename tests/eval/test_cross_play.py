"""Cross-play of a row's runs (agent_rl/eval/reproduce/cross_play.py): the panels each run is
evaluated on, their summary against a plain loop, resumability and waiting for the row, the
row's cross/ metrics; and the real `train.evaluate` command it runs, on a tiny two-agent run."""
import json
import os

import numpy as np
import pytest

from agent_rl.eval.reproduce import Comparison
from agent_rl.eval.reproduce import cross_play
from agent_rl.eval.reproduce import main as rep
from agent_rl.eval.reproduce import runs
from tests.eval.toy_row import FakeRun, toy  # noqa: F401 (toy: a fixture)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


class FakeEval:
  """Writes what train.evaluate would: per panel a success and per-agent returns, the agent
  under test's return encoding (its arm, its seed, the counterpart) so sums can be checked."""

  def __init__(self):
    self.calls = []

  def __call__(self, spec, cps, out):
    self.calls.append((spec.arm, spec.seed, dict(cps)))
    ev = {"checkpoint_step": 5, "eval/success": 1.0}
    for name in cps:
      ev[f"eval/{name}/agent0/return"] = self.value(spec, name)
      ev[f"eval/{name}/agent1/return"] = -1.0
      ev[f"eval/{name}/success"] = 0.5
    with open(out, "w") as f:
      json.dump(ev, f)
    return 0

  @staticmethod
  def value(spec, name):
    return 0.1 * spec.seed + (0.5 if name == "early" else 0.01 * len(name) + 0.2 * (name[1] == "1"))


def test_panels_summary_and_row_metrics(toy):
  cdir, rdir = toy
  pc = rep.load("cross", cdir)
  specs = runs.plan(pc, "tiny", 2, rdir)
  fake, ev = FakeRun(pc), FakeEval()
  said = []
  # one run still going: the row trains it and only then cross-plays
  row, _ = rep.reproduce(pc, "tiny", 2, rdir, runner=fake, eval_runner=ev, echo=said.append,
                         arms=["M"])
  assert ev.calls == [] or all(a == "M" for a, _, _ in ev.calls)
  os.makedirs(os.path.join(specs[0].workdir, "checkpoints", "2"))  # M/seed0 kept step 2
  ev.calls.clear()
  row, _ = rep.reproduce(pc, "tiny", 2, rdir, runner=fake, eval_runner=ev, echo=said.append)
  assert len(ev.calls) == 4
  by = {(a, k): cps for a, k, cps in ev.calls}
  m0 = specs[0].workdir
  assert by[("M", 0)] == {"a0s1": specs[1].workdir, "a1s0": specs[2].workdir,
                          "a1s1": specs[3].workdir, "early": f"{m0}@2"}
  assert "early" not in by[("B", 1)] and set(by[("B", 1)]) == {"a0s0", "a0s1", "a1s0"}
  for s in specs:  # the summary against a loop over the panels
    got = cross_play.metrics(s.workdir)
    own = "a0" if s.arm == "M" else "a1"
    names = [n for n in by[(s.arm, s.seed)] if n != "early"]
    want = {"within": [n for n in names if n.startswith(own)],
            "other": [n for n in names if not n.startswith(own)], "all": names}
    for kind, ns in want.items():
      assert got[f"cross/{kind}/return"] == pytest.approx(
          np.mean([FakeEval.value(s, n) for n in ns])), (s.arm, s.seed, kind)
      assert got[f"cross/{kind}/success"] == 0.5
    assert ("cross/early/return" in got) == (s.workdir == m0)
  m_all = [cross_play.metrics(s.workdir)["cross/all/return"] for s in specs[:2]]
  assert row.arms[0].stats["cross/all/return"].values == pytest.approx(tuple(m_all))
  assert row.arms[0].stats["cross/early/return"].n == 1  # only M/seed0 kept an early step
  assert not os.path.exists(os.path.join(m0, "cross_play_eval.json"))
  # resumable: nothing new -> nothing evaluated; a third seed changes every run's panels
  ev.calls.clear()
  rep.reproduce(pc, "tiny", 2, rdir, runner=fake, eval_runner=ev, echo=said.append)
  assert ev.calls == [] and sum("skip   cross-play" in x for x in said) == 4
  rep.reproduce(pc, "tiny", 3, rdir, runner=fake, eval_runner=ev, echo=said.append)
  assert len(ev.calls) == 6


def test_a_failed_evaluation_is_reported_and_cross_metrics_need_the_flag(toy):
  cdir, rdir = toy
  pc = rep.load("cross", cdir)
  said = []
  rep.reproduce(pc, "tiny", 1, rdir, runner=FakeRun(pc), eval_runner=lambda s, c, o: 3,
                echo=said.append)
  assert sum(x.startswith("FAILED cross-play") for x in said) == 2
  with pytest.raises(ValueError, match=r"Comparison.metrics: .*cross_play=True"):
    Comparison(arms={"M": "", "B": "x"}, method="M", baselines=("B",),
               metrics=("cross/all/return",))


@pytest.fixture(scope="module")
def deal_run(tmp_path_factory):
  """A tiny two-agent (separate weights) DealLite run: checkpoints at steps 1 and 2."""
  from agent_rl.train.run import run
  from tests.agents.tiny import tiny_agents_config
  wd = str(tmp_path_factory.mktemp("deal") / "w")
  run(tiny_agents_config("separate", iterations=2), wd)
  return wd


# CI budget (2026-12-07: 90 s with its run): `train.evaluate` with counterparts on a real run is
# tests/agents/test_run.py::test_counterpart_panels_swap_the_other_agents_weights; the command line
# and the row's summary are the toy tests above.
@pytest.mark.slow
def test_the_evaluate_command_on_a_real_run(deal_run, tmp_path, monkeypatch):
  """subprocess_eval's command line (counterparts as `--config.eval.counterparts.NAME=DIR`
  flags, `--out`) on a real run, against itself: every panel equals the main one."""
  cfg = tmp_path / "deal.py"
  cfg.write_text("from tests.agents.tiny import tiny_agents_config\n\n\n"
                 "def get_config(arg=None):\n  return tiny_agents_config('separate', iterations=2)\n")
  spec = runs.RunSpec("deal", "M", 0, "", str(cfg), deal_run, (("seed", "0"),))
  early = cross_play.earliest_checkpoint(deal_run, 2)
  assert early is not None and early < 2
  cps = {"a1s0": deal_run, "early": f"{deal_run}@{early}"}
  out = str(tmp_path / "ev.json")
  monkeypatch.chdir(ROOT)  # the command runs `python -m agent_rl.train.evaluate` from here
  rc = cross_play.subprocess_eval(spec, cps, out)
  assert rc == 0, open(os.path.join(deal_run, "reproduce.log")).read()[-3000:]
  ev = json.load(open(out))
  for k in ("success", "agent0/return", "agent1/return"):
    assert ev[f"eval/a1s0/{k}"] == ev[f"eval/{k}"], k
  assert "eval/early/agent0/return" in ev
  got = cross_play.summarize(ev, list(cps), own_arm=0, agent=0)
  assert got["cross/other/return"] == ev["eval/agent0/return"]
  assert got["cross/early/return"] == ev["eval/early/agent0/return"]
