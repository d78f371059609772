"""Learning-curve PNG and a markdown summary from a workdir's metrics.jsonl."""
from __future__ import annotations

import os

from agent_rl.train.metrics import read_jsonl

CURVES = (("eval/success", "held-out success (eval)"), ("rollout/success", "train success"),
          ("rollout/reward", "train reward"))


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
  pts = [(r["step"], r[key]) for r in records if key in r]
  return [p[0] for p in pts], [p[1] for p in pts]


def write_report(workdir: str) -> tuple[str, str]:
  """Writes `report.png` and `report.md` into `workdir`; returns their paths."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no metrics log in this workdir")
  recs = read_jsonl(path)
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
    ax.legend(fontsize=8)
  fig.tight_layout()
  png = os.path.join(workdir, "report.png")
  fig.savefig(png, dpi=110)
  plt.close(fig)

  lines = [f"# Run report: {os.path.abspath(workdir)}", ""]
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
  lines += ["", "![learning curve](report.png)", ""]
  md = os.path.join(workdir, "report.md")
  with open(md, "w") as f:
    f.write("\n".join(lines))
  return png, md
