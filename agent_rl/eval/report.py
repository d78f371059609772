"""Learning-curve PNG and a markdown summary from a workdir's metrics.jsonl (and the sampled
episodes of episodes.jsonl, before and after training). The workdir may be `gs://...`."""
from __future__ import annotations

import io
import os

from etils import epath

from agent_rl.metrics.sinks import EPISODES_FILE, METRICS_FILE, read_jsonl
from agent_rl.train.provenance import code_line

CURVES = (("eval/success", "held-out success (eval)"), ("rollout/success", "train success"),
          ("rollout/reward", "train reward"))


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
  pts = [(r["step"], r[key]) for r in records if key in r]
  return [p[0] for p in pts], [p[1] for p in pts]


def _plot(recs: list[dict]) -> bytes:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
  for key, label in CURVES:
    xs, ys = _series(recs, key)
    if xs:
      ax = axes[0] if "success" in key else axes[1]
      ax.plot(xs, ys, marker="o" if key.startswith("eval") else None, ms=3, label=label)
  rl_start = min((r["step"] for r in recs if "rollout/success" in r), default=None)
  for ax, t in zip(axes, ("success rate", "reward")):
    if rl_start is not None and rl_start > 1:  # an SFT warm start came first
      ax.axvline(rl_start - 1, color="gray", ls="--", lw=1)
      ax.text(rl_start - 1, ax.get_ylim()[1], " RL starts", va="top", fontsize=8, color="gray")
    ax.set_xlabel("step (SFT updates, then RL iterations)")
    ax.set_title(t)
    ax.grid(alpha=.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.tight_layout()
  buf = io.BytesIO()  # through bytes: savefig cannot write to gs:// itself
  fig.savefig(buf, format="png", dpi=110)
  plt.close(fig)
  return buf.getvalue()


def episode_sections(records: list[dict]) -> list[str]:
  """Markdown for the episodes logged at the first and at the last step of episodes.jsonl
  (`{"step", "tag", "index", "text"}` records): what the agent did before and after."""
  if not records:
    return []
  steps = sorted({r["step"] for r in records})
  picks = [("before training", steps[0])] + ([("after training", steps[-1])]
                                             if steps[-1] != steps[0] else [])
  out = ["## Sampled episodes", ""]
  for title, step in picks:
    recs = sorted((r for r in records if r["step"] == step), key=lambda r: (r["tag"], r["index"]))
    tags = ", ".join(sorted({r["tag"] for r in recs}))
    out += [f"### {title} (step {step}, {tags})", ""]
    for r in recs:
      out += ["```text", r["text"], "```", ""]
  return out


def write_report(workdir) -> tuple[str, str]:
  """Writes `report.png` and `report.md` into `workdir`; returns their paths."""
  wd = epath.Path(workdir)
  path = wd / METRICS_FILE
  if not path.exists():
    raise FileNotFoundError(f"{path}: no metrics log in this workdir")
  recs = read_jsonl(path)
  png = wd / "report.png"
  png.write_bytes(_plot(recs))

  name = os.fspath(wd) if "://" in os.fspath(wd) else os.path.abspath(wd)
  lines = [f"# Run report: {name}", ""]
  xs, ys = _series(recs, "eval/success")
  if xs:
    lines += [f"- held-out success: {ys[0]:.3f} at step {xs[0]} -> {ys[-1]:.3f} at step {xs[-1]} "
              f"(best {max(ys):.3f})",
              "- held-out success by step: " + ", ".join(f"{x}: {y:.3f}" for x, y in zip(xs, ys))]
    rl_start = min((r["step"] for r in recs if "rollout/success" in r), default=None)
    if rl_start is not None and rl_start > 1:
      warm = [y for x, y in zip(xs, ys) if x == rl_start - 1]
      if warm:
        lines.append(f"- SFT warm start (step {rl_start - 1}): {warm[-1]:.3f}; after RL: {ys[-1]:.3f}")
  for key in ("rollout/success", "rollout/reward", "loss/total", "time/iteration_s"):
    xs, ys = _series(recs, key)
    if xs:
      lines.append(f"- {key}: first {ys[0]:.4g}, last {ys[-1]:.4g} ({len(xs)} points)")
  code = code_line(workdir)
  if code:
    lines.append(f"- {code}")
  lines += ["", "![learning curve](report.png)", ""]
  ep = wd / EPISODES_FILE
  if ep.exists():
    lines += episode_sections(read_jsonl(ep))
  md = wd / "report.md"
  md.write_text("\n".join(lines))
  return os.fspath(png), os.fspath(md)
