"""Which code trained a run (agent_rl/train/provenance.py): the git commit and dirty flag of a
checkout against git's own answers in a scratch repository, nothing outside a checkout or for a
package that is not at its top level, and the commits a run's start-ups report."""
import json
import os
import subprocess

import pytest

from agent_rl.train import provenance

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "commit.gpgsign=false"]


def _git(repo, *args):
  return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True,
                        text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
  r = tmp_path / "checkout"
  r.mkdir()
  _git(r, "init", "-q")
  (r / "a.py").write_text("x = 1\n")
  (r / "sub").mkdir()
  (r / "sub" / "b.py").write_text("y = 2\n")
  _git(r, "add", "a.py", "sub/b.py")
  _git(r, "commit", "-q", "-m", "one")
  return r


def test_commit_and_dirty_flag_match_git(repo):
  head = _git(repo, "rev-parse", "HEAD")
  assert provenance.code_version(str(repo)) == {"commit": head, "dirty": False}
  (repo / "notes.txt").write_text("untracked\n")  # an untracked file is not a code change
  (repo / "runs").mkdir()
  (repo / "runs" / "x.py").write_text("z = 0\n")  # nor a .py file outside the code dirs
  assert provenance.code_version(str(repo)) == {"commit": head, "dirty": False}
  (repo / "configs").mkdir()
  (repo / "configs" / "new_paper.py").write_text("z = 0\n")  # a new config a run may load
  assert provenance.code_version(str(repo)) == {"commit": head, "dirty": True}
  (repo / "configs" / "new_paper.py").unlink()
  (repo / "a.py").write_text("x = 2\n")
  assert provenance.code_version(str(repo)) == {"commit": head, "dirty": True}
  _git(repo, "commit", "-q", "-am", "two")
  assert provenance.code_version(str(repo)) == {"commit": _git(repo, "rev-parse", "HEAD"),
                                                "dirty": False}


def test_no_commit_outside_a_checkout_or_below_its_top(repo, tmp_path):
  plain = tmp_path / "copy"  # a `git archive` copy, a wheel
  plain.mkdir()
  assert provenance.code_version(str(plain)) == {"commit": None, "dirty": None}
  # a package copied inside another repository does not report that repository's commit
  assert provenance.code_version(str(repo / "sub")) == {"commit": None, "dirty": None}


def test_start_ups_append_and_read_back_as_distinct_commits(repo, tmp_path):
  wd = tmp_path / "run"
  wd.mkdir()
  assert provenance.read_commits(str(wd)) == ()
  first = provenance.record_start(str(wd), str(repo))
  provenance.record_start(str(wd), str(repo))  # a resume on the same code
  (repo / "a.py").write_text("x = 3\n")
  provenance.record_start(str(wd), str(repo))
  provenance.record_start(str(wd), str(tmp_path))  # not a checkout
  lines = [json.loads(ln) for ln in open(wd / provenance.CODE_FILE)]
  assert len(lines) == 4 and lines[0] == first
  assert lines[0]["versions"]["python"] and "jax" in lines[0]["versions"]
  short = first["commit"][:10]
  assert provenance.read_commits(str(wd)) == (short, short + "+dirty", "unknown")


def test_the_package_reports_this_checkout():
  """The installed package's root is this repository's top level (CI runs a clean clone)."""
  root = provenance.ROOT
  if not os.path.exists(os.path.join(root, ".git")):
    pytest.skip("not a git checkout (a copy of the tree)")
  head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True)
  if head.returncode != 0:  # e.g. git's safe.directory check on a checkout of another owner
    pytest.skip(f"git cannot read this checkout: {head.stderr.strip()}")
  v = provenance.code_version()
  assert v["commit"] == head.stdout.strip() and isinstance(v["dirty"], bool)
