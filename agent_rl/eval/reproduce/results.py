"""A row's results from its run workdirs: per-arm statistics, method - baseline differences
beside the paper's, written as RESULTS_DIR/<paper>.json, <paper>.md and <paper>.png; and the
table of every row (`write_table`).

A run's value of a metric is its last logged value: the evaluation at the run's final step
(train/phases.py evaluates at the last iteration). Unfinished runs are listed, not averaged.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Optional, Sequence

from etils import epath

from agent_rl.eval.reproduce import cross_play, priors, stats
from agent_rl.eval.reproduce.comparison import PaperConfig
from agent_rl.eval.reproduce.runs import (TIME_FILE, Recorded, RunSpec, build_config, final_step,
                                          no_record, status)
from agent_rl.metrics.sinks import read_jsonl
from agent_rl.train.provenance import read_commits


@dataclasses.dataclass(frozen=True)
class RunResult:
  """One arm x seed: finished or not, its final value, its value when the SFT warm start ended
  (RL's own gain is final - after_sft; empty without SFT) and curve (step, value) per metric."""
  seed: int
  workdir: str
  finished: bool
  final: dict
  after_sft: dict
  sft_steps: int
  curves: dict
  seconds: Optional[float]
  config: Optional[dict] = None  # the run's config.json (the record's check, record.lookup)
  recorded: bool = False  # read from the committed <paper>.json: the workdir is not here
  code: tuple = ()  # the commits its start-ups ran (train/provenance.py); () before 2026-12-07


@dataclasses.dataclass(frozen=True)
class ArmResult:
  arm: str
  variant: str
  runs: tuple[RunResult, ...]
  stats: dict  # metric -> stats.ArmStats over the finished runs
  after_sft: dict  # metric -> stats.ArmStats at the end of SFT, over the same runs


@dataclasses.dataclass(frozen=True)
class PairResult:
  """method - baseline on one metric: ours (Welch) and the paper's."""
  baseline: str
  metric: str
  ours: stats.Diff
  paper_method: Optional[float]
  paper_baseline: Optional[float]
  paper_diff: Optional[float]
  paper_sign: int  # the paper's direction: from its numbers, else the declared claim (0: none)
  agrees: str


@dataclasses.dataclass(frozen=True)
class RowResult:
  paper: str
  config: str
  setting: str
  scale: str
  seeds: int
  overrides: tuple
  method: str
  baselines: tuple
  metrics: tuple
  paper_source: str
  paper_verified: bool
  paper_numbers: dict  # arm -> metric -> the paper's number
  arms: tuple[ArmResult, ...]
  pairs: tuple[PairResult, ...]
  missing: tuple[str, ...]  # workdirs of runs not finished
  wall_seconds: float  # the harness's wall time in the finished runs, summed over resumes
  priors: tuple = ()  # per prior run: {workdir, command, seen: [{step, final}]} (priors.py)


def read_run(pc: PaperConfig, spec: RunSpec, metrics: Sequence[str],
             recorded: Recorded = no_record) -> RunResult:
  c = build_config(pc, spec.arg, spec.overrides)
  state, _ = status(c, spec.workdir)
  rec = recorded(c, spec) if state == "new" else None
  if rec is not None:  # the committed record's values (record.py)
    fields = {f.name for f in dataclasses.fields(RunResult)}
    return RunResult(**{**{k: v for k, v in rec.items() if k in fields}, "recorded": True})
  wd = epath.Path(spec.workdir)
  recs = read_jsonl(wd / "metrics.jsonl") if (wd / "metrics.jsonl").exists() else []
  curves = {m: [(r["step"], r[m]) for r in recs if m in r] for m in metrics}
  final = {m: pts[-1][1] for m, pts in curves.items() if pts and pts[-1][0] == final_step(c)}
  for m, v in cross_play.metrics(spec.workdir).items():  # the final checkpoint's cross-play
    if m in metrics:
      curves[m], final[m] = [(final_step(c), v)], v
  sft = int(c.sft.steps)
  after_sft = {m: [v for step, v in pts if step == sft][-1] for m, pts in curves.items()
               if sft and any(step == sft for step, _ in pts)}
  tpath = wd / TIME_FILE
  secs = json.loads(tpath.read_text())["seconds"] if tpath.exists() else None
  cpath = wd / "config.json"
  config = json.loads(cpath.read_text()) if cpath.exists() else None
  return RunResult(spec.seed, spec.workdir, state == "done", final, after_sft, sft, curves, secs,
                   config, code=read_commits(spec.workdir))


def collect(pc: PaperConfig, specs: Sequence[RunSpec], scale: str, seeds: int,
            user_overrides: Sequence[tuple[str, str]] = (),
            recorded: Recorded = no_record, recorded_priors: Sequence[dict] = ()) -> RowResult:
  """The row from `specs`' workdirs, or from the record (`recorded`, record.lookup) where a
  workdir is not here; its prior runs' final evaluations from their workdirs and the record
  (`recorded_priors`, priors.observations)."""
  comp = pc.comparison
  runs = {a: [] for a in comp.arms if any(s.arm == a for s in specs)}
  for s in specs:
    runs[s.arm].append(read_run(pc, s, comp.metrics, recorded))
  arms = []
  for a, rs in runs.items():
    done = [r for r in rs if r.finished]
    arms.append(ArmResult(a, comp.arms[a], tuple(rs), {
        m: stats.arm_stats([r.final[m] for r in done if m in r.final]) for m in comp.metrics}, {
        m: stats.arm_stats([r.after_sft[m] for r in done if m in r.after_sft])
        for m in comp.metrics}))
  by = {a.arm: a for a in arms}
  pairs = []
  for b in comp.baselines:
    if b not in by or comp.method not in by:
      continue
    for m in comp.metrics:
      d = stats.welch_diff(by[comp.method].stats[m].values, by[b].stats[m].values)
      sign, pdiff = comp.paper_direction(b, m)
      pairs.append(PairResult(b, m, d, comp.paper_number(comp.method, m),
                              comp.paper_number(b, m), pdiff, sign, stats.agreement(d, sign)))
  missing = tuple(r.workdir for a in arms for r in a.runs if not r.finished)
  wall = sum(r.seconds or 0.0 for a in arms for r in a.runs if r.finished)
  return RowResult(pc.name, os.path.relpath(pc.path), comp.setting, scale, seeds,
                   tuple(user_overrides), comp.method, comp.baselines, comp.metrics,
                   comp.paper_source, comp.paper_verified,
                   {a: dict(n) for a, n in comp.paper.items()}, tuple(arms), tuple(pairs),
                   missing, wall,
                   priors.observations(comp, os.path.dirname(pc.path), recorded_priors))


def to_json(row: RowResult) -> dict:
  return dataclasses.asdict(row)


# -- markdown ----------------------------------------------------------------------------------

def _f(x: Optional[float], signed: bool = False) -> str:
  return "—" if x is None else (f"{x:+.3f}" if signed else f"{x:.3f}")


def _paper_diff(diff: Optional[float], sign: int) -> str:
  if diff is not None:
    return f"{diff:+.3f}"
  return {1: "claimed > 0", -1: "claimed < 0", 0: "none stated"}[sign]


def _ci(ci, signed: bool = False) -> str:
  return "—" if ci is None else f"[{_f(ci[0], signed)}, {_f(ci[1], signed)}]"


def row_markdown(row: RowResult) -> str:
  ver = "" if row.paper_verified else " (recalled, not verified against the paper)"
  lines = [f"# {row.paper}: {row.method} vs {', '.join(row.baselines)}", "",
           f"- setting: {row.setting or '—'}; config `{row.config}`, scale `{row.scale}`, "
           f"{row.seeds} seeds (config.seed = 0..{row.seeds - 1})",
           f"- paper numbers: {row.paper_source or '—'}{ver}"]
  if row.overrides:
    lines.append("- overrides: " + " ".join(f"`{k}={v}`" for k, v in row.overrides))
  lines.append(f"- wall time of the finished runs (summed): {row.wall_seconds / 3600:.2f} h")
  codes = collections.Counter(", ".join(r.code) or "no code.jsonl"
                              for a in row.arms for r in a.runs if r.finished)
  if codes:
    lines.append("- code of the finished runs (git commit of each start-up, "
                 "train/provenance.py): " + "; ".join(
                     f"`{c}` ({n} run{'s' * (n > 1)})" for c, n in sorted(codes.items())))
  for p in row.priors:
    seen = "; another build of it: ".join(
        f"step {o['step']}, " + ", ".join(f"{k} {v:.3f}" for k, v in o["final"].items())
        for o in p["seen"]) or "not built where this row was written"
    note = f" (not read here: {p['note']})" if p.get("note") else ""
    lines.append(f"- started from `{p['workdir']}` (`{p['command']}`): {seen}{note}")
  recorded = [r for a in row.arms for r in a.runs if r.recorded]
  if recorded:
    unkept = sum(r.config is None for r in recorded)
    lines.append(f"- {len(recorded)} runs read from this row's committed record (their workdirs "
                 "were not in the results dir when it was written)"
                 + (f"; {unkept} of them recorded before configs were kept, so not checked "
                    "field by field (recorded, config not kept)" if unkept else ""))
  for m in row.metrics:
    lines += ["", f"## Final `{m}` per arm (mean, std and 95% t-interval over seeds)", "",
              "| arm | variant | n | mean | std | 95% CI | paper | per seed | after SFT "
              "| RL gain |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for a in row.arms:
      s, paper = a.stats[m], row.paper_numbers.get(a.arm, {}).get(m)
      warm = a.after_sft[m]
      gain = None if warm.mean is None or s.mean is None else s.mean - warm.mean
      lines.append(f"| {a.arm} | `{a.variant or '(default)'}` | {s.n} | {_f(s.mean)} | "
                   f"{_f(s.std)} | {_ci(s.ci95)} | {_f(paper)} | "
                   f"{', '.join(f'{v:.3f}' for v in s.values) or '—'} | {_f(warm.mean)} | "
                   f"{_f(gain, True)} |")
  lines += ["", "\"after SFT\": the mean at the end of the SFT warm start; \"RL gain\": final "
            "minus that (what RL itself added).",
            "", f"## {row.method} − baseline (Welch 95% interval)", "",
            "| metric | baseline | ours: diff | 95% CI | df | p | paper's diff "
            "| direction agrees? |",
            "|---|---|---|---|---|---|---|---|"]
  for p in row.pairs:
    pd = _paper_diff(p.paper_diff, p.paper_sign)
    lines.append(f"| `{p.metric}` | {p.baseline} | {_f(p.ours.diff, True)} | "
                 f"{_ci(p.ours.ci95, True)} | {'—' if p.ours.df is None else f'{p.ours.df:.1f}'}"
                 f" | {'—' if p.ours.p is None else f'{p.ours.p:.3f}'} | {pd} | {p.agrees} |")
  lines += ["", "\"yes\": the interval excludes 0 on the paper's side; \"(n.s.)\": same or "
            "opposite sign but the interval spans 0.", "", f"![{row.paper}]({row.paper}.png)"]
  if row.missing:
    lines += ["", "## Runs not finished (not averaged)", ""] + [f"- `{w}`" for w in row.missing]
  return "\n".join(lines) + "\n"


# -- plot ----------------------------------------------------------------------------------------

def row_plot(row: RowResult) -> bytes:
  """Learning curves of the primary metric per arm (mean over seeds, band ±1 std) and bars of
  its final value with 95% intervals (seeds as dots, the paper's numbers as crosses)."""
  import io

  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  m = row.metrics[0]
  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8))
  for i, a in enumerate(row.arms):
    col = f"C{i}"
    per_step: dict = {}
    for r in a.runs:
      for step, v in r.curves.get(m, []):
        per_step.setdefault(step, []).append(v)
    if per_step:
      xs = sorted(per_step)
      mu = np.array([np.mean(per_step[x]) for x in xs])
      sd = np.array([np.std(per_step[x], ddof=1) if len(per_step[x]) > 1 else 0.0 for x in xs])
      ax0.plot(xs, mu, color=col, marker="o", ms=3, label=a.arm)
      ax0.fill_between(xs, mu - sd, mu + sd, color=col, alpha=0.2)
    s = a.stats[m]
    if s.mean is not None:
      err = None if s.ci95 is None else [[s.mean - s.ci95[0]], [s.ci95[1] - s.mean]]
      ax1.bar(i, s.mean, color=col, alpha=0.7, yerr=err, capsize=4)
      ax1.scatter([i] * len(s.values), s.values, color="k", s=10, zorder=3)
    paper = row.paper_numbers.get(a.arm, {}).get(m)
    if paper is not None:
      label = "paper" + ("" if row.paper_verified else " (unverified)")
      ax1.scatter([i], [paper], marker="x", color="r", s=40, zorder=4,
                  label=label if not ax1.get_legend_handles_labels()[0] else None)
  sft = max((r.sft_steps for a in row.arms for r in a.runs), default=0)
  if sft:  # left of it the SFT warm start, right of it RL
    ax0.axvline(sft, color="gray", ls="--", lw=1)
    ax0.text(sft, ax0.get_ylim()[1], " RL starts", va="top", fontsize=8, color="gray")
  ax0.set(title=f"{row.paper}: {m} (mean over seeds, band ±1 std)",
          xlabel="global step (SFT updates, then RL iterations)")
  ax1.set(title=f"final {m} (95% t-interval)", xticks=range(len(row.arms)),
          xticklabels=[a.arm for a in row.arms])
  for ax in (ax0, ax1):
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=100)
  plt.close(fig)
  return buf.getvalue()


def write_row(row: RowResult, results_dir: str) -> tuple[str, str, str]:
  """Writes <paper>.json, .md and .png into results_dir (local or gs://); returns their paths."""
  d = epath.Path(results_dir)
  d.mkdir(parents=True, exist_ok=True)
  (d / f"{row.paper}.json").write_text(json.dumps(to_json(row), indent=1, sort_keys=True))
  (d / f"{row.paper}.md").write_text(row_markdown(row))
  (d / f"{row.paper}.png").write_bytes(row_plot(row))
  return tuple(os.fspath(d / f"{row.paper}.{e}") for e in ("json", "md", "png"))


# -- the table of every row -------------------------------------------------------------------

def table_markdown(rows: Sequence[dict]) -> str:
  """One line per (paper, baseline, metric) of the <paper>.json dicts `rows`."""
  lines = ["| paper | setting | baseline | method | metric | our diff [95% CI] | paper's diff | "
           "direction agrees? |", "|---|---|---|---|---|---|---|---|"]
  for r in sorted(rows, key=lambda r: r["paper"]):
    # seeds of the arms that ran (a row lists every arm; one not run yet has n = 0 and its
    # pairs read "—")
    seeds = [a["stats"][r["metrics"][0]]["n"] for a in r["arms"]]
    setting = (f"{r['setting'] or '—'}, {r['scale']}, "
               f"{min((n for n in seeds if n), default=0)} seeds")
    for p in r["pairs"]:
      o = p["ours"]
      ours = "—" if o["diff"] is None else f"{o['diff']:+.3f} {_ci(o['ci95'], True)}"
      paper = _paper_diff(p["paper_diff"], p["paper_sign"])
      if not r["paper_verified"] and p["paper_diff"] is not None:
        paper += " (unverified)"
      lines.append(f"| {r['paper']} | {setting} | {p['baseline']} | {r['method']} | "
                   f"`{p['metric']}` | {ours} | {paper} | {p['agrees']} |")
  return "\n".join(lines) + "\n"


def write_table(results_dir: str) -> tuple[str, str]:
  """Reads every results_dir/<paper>.json; writes results_dir/TABLE.md; returns (path, text)."""
  d = epath.Path(results_dir)
  rows = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.exists() else []
  text = table_markdown(rows)
  d.mkdir(parents=True, exist_ok=True)
  (d / "TABLE.md").write_text(text)
  return os.fspath(d / "TABLE.md"), text
