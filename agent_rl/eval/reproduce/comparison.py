"""`Comparison`: what a paper config declares about the table row it reproduces.

A paper config (configs/<paper>.py) names its row at module level, next to `get_config`, so the
configs stay the one source of papers (no second registry):

    COMPARISON = Comparison(
        arms={"GiGPO": "", "GRPO": "grpo"},          # arm -> variant string of this config
        method="GiGPO", baselines=("GRPO",),
        metrics=("eval/success",),                    # what the paper reports; first = primary
        paper={"GiGPO": {"eval/success": 0.86}, "GRPO": {"eval/success": 0.73}},
        paper_source="Feng et al. 2025, arXiv:2505.10978, ALFWorld All", paper_verified=False,
        setting="TextHouse (ALFWorld-like)",
        priors=(PriorRun("runs/texthouse_sft300", "gigpo_texthouse",
                         overrides={"train.iterations": "0"}),))   # the run the arms start from

`load_comparisons` imports every configs/*.py and returns its row, or why it has none.
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
import shlex
from types import MappingProxyType
from typing import Mapping, Optional

CONFIGS_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs")


# The entry points a prior run can be (each writes config.json, metrics.jsonl and checkpoints/
# the way the harness reads them); the value is the config field that holds its last step.
PRIOR_MODULES = MappingProxyType({"agent_rl.train": "sft.steps + train.iterations",
                                  "agent_rl.reward.train": "rm.steps"})


@dataclasses.dataclass(frozen=True)
class PriorRun:
  """A run that arms of a row start from (a policy run for `model.init_from`, a teacher for
  `distill.teacher`, a reward model for `reward.model`, a frozen agent of `agents.init`), as
  its recipe: `python -m <module> --config=configs/<config>.py:<arg> --workdir=<workdir>
  --config.key=value ...`. The harness builds it before the first arm whose config names a path
  in `workdir` (reproduce/priors.py), unless a finished run of this recipe is there. The row's
  `--set` / `--iterations` flags do not reach it: they change the arms, not what they start from.
  """
  workdir: str
  config: str
  arg: str = "tiny"
  overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)
  module: str = "agent_rl.train"

  def __post_init__(self):
    def bad(field, msg):
      raise ValueError(f"PriorRun.{field}: {msg}")
    if not isinstance(self.workdir, str) or not self.workdir.strip("/. ") or "://" in self.workdir:
      bad("workdir", f"a local run directory (the harness builds it here), got {self.workdir!r}")
    if not isinstance(self.config, str) or not self.config or "/" in self.config \
        or self.config.endswith(".py"):
      bad("config", f"a config name under configs/ (e.g. 'ragen_sokoban'), got {self.config!r}")
    if self.module not in PRIOR_MODULES:
      bad("module", f"{self.module!r}; one of {', '.join(PRIOR_MODULES)}")
    for k, v in dict(self.overrides).items():
      if not isinstance(k, str) or not isinstance(v, str):
        bad("overrides", f"config key -> value string, got {k!r}: {v!r}")
    object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))

  def args(self, config_file: str = "") -> list[str]:
    """The command's arguments; `config_file` defaults to configs/<config>.py (the
    repository root's relative path, where the harness and the recipes run)."""
    return ([f"--config={config_file or f'configs/{self.config}.py'}:{self.arg}",
             f"--workdir={self.workdir}"]
            + [f"--config.{k}={v}" for k, v in self.overrides.items()])

  def command(self, config_file: str = "") -> str:
    return shlex.join(["python", "-m", self.module, *self.args(config_file)])


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One paper row: a method against baselines, each an arm of the same config.

  arms: arm name -> variant string of the config ("" = the config's default), joined after the
    scale: `get_config(f"{scale},{variant}")`.
  method, baselines: arm names; every difference reported is method - baseline.
  metrics: metric keys of metrics.jsonl (`eval/success`, `eval/avg@4`, ...) the paper reports;
    the first is the primary one (bars, table). Higher is better for every metric.
  paper: arm -> metric -> the paper's number, in our metric's units (a fraction, not %);
    arms or metrics the paper does not give are left out.
  paper_source: where the numbers come from (paper, table, setting).
  paper_verified: False when the numbers were recalled and not checked against the paper (the
    config docstrings' [G]/[R] marks); the reports print them as unverified.
  claims: baseline -> the paper's stated direction where it gives no numbers for the pair:
    +1 (method better; the default), -1, or 0 (the paper states none for this pair); or
    baseline -> {metric: direction} where it differs by metric (Hera: a higher cost-aware
    return than always-cloud at a lower success).
  setting: the environment / split, for the table.
  overrides: `--config.key=value` settings every arm needs (e.g. a run dir to start from).
  priors: the runs those settings name (`PriorRun`: workdir and recipe), built by the harness
    before the first arm that needs one; a run dir the arms name and no prior declares must
    exist before the row runs.
  cross_play: once every run finished, evaluate each run's agent under test against the other
    agents of every other run and of its own earliest checkpoint (`cross_play`); metrics
    `cross/{within,other,early,all}/{return,success}` can then be named in `metrics`.
  """
  arms: Mapping[str, str]
  method: str
  baselines: tuple[str, ...]
  metrics: tuple[str, ...] = ("eval/success",)
  paper: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
  paper_source: str = ""
  paper_verified: bool = False
  claims: Mapping[str, int] = dataclasses.field(default_factory=dict)
  setting: str = ""
  overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)
  cross_play: bool = False
  priors: tuple[PriorRun, ...] = ()

  def __post_init__(self):
    def bad(field, msg):
      raise ValueError(f"Comparison.{field}: {msg}")
    if not self.arms:
      bad("arms", "no arms declared")
    for name, variant in self.arms.items():
      if (not isinstance(name, str) or not name or "/" in name or "," in name
          or name != name.strip()):
        bad("arms", f"arm name {name!r} must be a non-empty string without '/' (a folder name) "
                    "or ',' (reproduce.py --arms is a comma list)")
      if not isinstance(variant, str):
        bad("arms", f"arm {name!r}: variant must be a string, got {variant!r}")
    if self.method not in self.arms:
      bad("method", f"{self.method!r} is not an arm; arms: {', '.join(self.arms)}")
    if not isinstance(self.baselines, tuple) or not self.baselines:
      bad("baselines", f"a non-empty tuple of arm names, got {self.baselines!r}")
    for b in self.baselines:
      if b not in self.arms or b == self.method:
        bad("baselines", f"{b!r} is not an arm other than the method; arms: {', '.join(self.arms)}")
    if not isinstance(self.metrics, tuple) or not self.metrics:
      bad("metrics", f"a non-empty tuple of metric keys, got {self.metrics!r}")
    cross = [m for m in self.metrics if m.startswith("cross/")]
    if cross and not self.cross_play:
      bad("metrics", f"{cross} come from cross-play: set cross_play=True")
    for arm, numbers in self.paper.items():
      if arm not in self.arms:
        bad("paper", f"{arm!r} is not an arm; arms: {', '.join(self.arms)}")
      for m, v in numbers.items():
        if m not in self.metrics:
          bad("paper", f"{arm}: metric {m!r} is not in metrics {self.metrics}")
        if not isinstance(v, (int, float)):
          bad("paper", f"{arm}/{m}: a number, got {v!r}")
    for b, v in self.claims.items():
      signs = dict(v) if isinstance(v, Mapping) else {m: v for m in self.metrics}
      if (b not in self.baselines or not set(signs) <= set(self.metrics)
          or any(x not in (1, 0, -1) for x in signs.values())):
        bad("claims", f"{b!r}: a baseline -> +1 | 0 | -1, or metric -> +1 | 0 | -1 (metrics "
                      f"{self.metrics}), got {v!r}; baselines: {self.baselines}")
    if not isinstance(self.priors, tuple) or not all(isinstance(p, PriorRun) for p in self.priors):
      bad("priors", f"a tuple of PriorRun, got {self.priors!r}")
    dirs = [os.path.normpath(p.workdir) for p in self.priors]
    if len(set(dirs)) < len(dirs):
      bad("priors", f"two priors share a workdir: {sorted(dirs)}")
    # Read-only views: a module-level constant must not be mutated by a caller.
    object.__setattr__(self, "arms", MappingProxyType(dict(self.arms)))
    object.__setattr__(self, "paper", MappingProxyType({a: MappingProxyType(dict(n))
                                                        for a, n in self.paper.items()}))
    object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))
    object.__setattr__(self, "claims", MappingProxyType({
        b: MappingProxyType(dict(v)) if isinstance(v, Mapping) else v
        for b, v in self.claims.items()}))

  @property
  def primary(self) -> str:
    return self.metrics[0]

  def paper_number(self, arm: str, metric: str) -> Optional[float]:
    return self.paper.get(arm, {}).get(metric)

  def paper_direction(self, baseline: str, metric: str) -> tuple[int, Optional[float]]:
    """(sign of the paper's method - baseline, that difference or None): from its numbers
    when it gives both, else the declared claim (+1 unless `claims` says otherwise)."""
    a, b = self.paper_number(self.method, metric), self.paper_number(baseline, metric)
    if a is None or b is None:
      claim = self.claims.get(baseline, 1)
      return (claim.get(metric, 1) if isinstance(claim, Mapping) else claim), None
    if a == b:
      return 0, 0.0
    return (1 if a > b else -1), a - b


@dataclasses.dataclass(frozen=True)
class PaperConfig:
  """A configs/*.py file: its name, module, and its row (None: `reason` says why)."""
  name: str
  path: str
  module: object
  comparison: Optional[Comparison]
  reason: str = ""


def config_path(name: str, configs_dir: str = CONFIGS_DIR) -> str:
  return os.path.normpath(os.path.join(configs_dir, f"{name}.py"))


def import_config(path: str):
  """The module of a config file (configs/<name>.py: `get_config`, maybe `COMPARISON`)."""
  spec = importlib.util.spec_from_file_location(
      f"configs_{os.path.basename(path)[:-3]}", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def load_config(name: str, configs_dir: str = CONFIGS_DIR) -> PaperConfig:
  """Imports configs/<name>.py; its COMPARISON or the reason it has none (ValueError when the
  file does not exist, naming the ones that do)."""
  path = config_path(name, configs_dir)
  if not os.path.exists(path):
    known = ", ".join(paper_names(configs_dir))
    raise ValueError(f"--paper: no config {path}; known: {known}")
  try:
    mod = import_config(path)
  except Exception as e:  # a broken config is a row that cannot run, not a crash of --list
    return PaperConfig(name, path, None, None, f"config does not import: {type(e).__name__}: {e}")
  comp = getattr(mod, "COMPARISON", None)
  if comp is None:
    return PaperConfig(name, path, mod, None, "no comparison declared")
  if not isinstance(comp, Comparison):
    return PaperConfig(name, path, mod, None,
                       f"COMPARISON is a {type(comp).__name__}, not a Comparison")
  return PaperConfig(name, path, mod, comp)


def paper_names(configs_dir: str = CONFIGS_DIR) -> list[str]:
  return sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(configs_dir, "*.py"))
                if not os.path.basename(p).startswith("_"))


def load_comparisons(configs_dir: str = CONFIGS_DIR) -> list[PaperConfig]:
  """Every configs/*.py, in name order."""
  return [load_config(n, configs_dir) for n in paper_names(configs_dir)]
