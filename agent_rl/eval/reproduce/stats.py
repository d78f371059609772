"""Interval statistics over seeds: a 95% Student-t interval per arm and Welch's interval for a
difference of two arms (unequal variances, Welch-Satterthwaite degrees of freedom; Welch 1947,
"The generalization of Student's problem when several different population variances are
involved"). With 3 seeds an interval is wide (t_{0.975, 2} = 4.30): that is the honest width.

    s = arm_stats([0.70, 0.75, 0.72])            # n, mean, std (ddof 1), ci95
    d = welch_diff([0.8, 0.9, 0.85], [0.7, 0.75, 0.72])   # method - baseline
    agreement(d, paper_sign=+1)                   # "yes" / "yes (n.s.)" / "no (n.s.)" / "no"

Only the t quantile and CDF come from scipy (a JAX dependency, so always installed); the
arithmetic is here and tested against `scipy.stats.ttest_ind(equal_var=False)`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from scipy import stats as _st

LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class ArmStats:
  """One arm's final metric over seeds: n, mean, std (ddof 1; None for n < 2), the 95%
  t-interval [lo, hi] (None for n < 2) and the per-seed values."""
  n: int
  mean: Optional[float]
  std: Optional[float]
  ci95: Optional[tuple[float, float]]
  values: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Diff:
  """method - baseline: the difference of means, Welch's 95% interval, its degrees of freedom,
  the two-sided p-value of Welch's t-test (None where the spread is zero or n < 2)."""
  diff: Optional[float]
  ci95: Optional[tuple[float, float]]
  df: Optional[float]
  p: Optional[float]


def _mean_var(x: Sequence[float]) -> tuple[int, float, float]:
  n = len(x)
  m = math.fsum(x) / n
  v = math.fsum((xi - m) ** 2 for xi in x) / (n - 1) if n > 1 else float("nan")
  return n, m, v


def t_quantile(df: float, level: float = LEVEL) -> float:
  """The two-sided `level` quantile of Student's t with `df` degrees of freedom."""
  return float(_st.t.ppf(0.5 + level / 2, df))


def arm_stats(values: Sequence[float]) -> ArmStats:
  vals = tuple(float(v) for v in values)
  if not vals:
    return ArmStats(0, None, None, None, ())
  n, m, v = _mean_var(vals)
  if n < 2:
    return ArmStats(n, m, None, None, vals)
  sd = math.sqrt(v)
  h = t_quantile(n - 1) * sd / math.sqrt(n)
  return ArmStats(n, m, sd, (m - h, m + h), vals)


def welch_diff(method: Sequence[float], baseline: Sequence[float]) -> Diff:
  """Welch: se^2 = s1^2/n1 + s2^2/n2, df = se^4 / ((s1^2/n1)^2/(n1-1) + (s2^2/n2)^2/(n2-1))."""
  if not method or not baseline:
    return Diff(None, None, None, None)
  n1, m1, v1 = _mean_var([float(x) for x in method])
  n2, m2, v2 = _mean_var([float(x) for x in baseline])
  d = m1 - m2
  if n1 < 2 or n2 < 2:
    return Diff(d, None, None, None)
  a, b = v1 / n1, v2 / n2
  se2 = a + b
  if se2 == 0.0:  # every seed of both arms identical: no spread to build an interval from
    return Diff(d, (d, d), None, None)
  df = se2 ** 2 / (a ** 2 / (n1 - 1) + b ** 2 / (n2 - 1))
  se = math.sqrt(se2)
  h = t_quantile(df) * se
  p = float(2 * _st.t.sf(abs(d) / se, df))
  return Diff(d, (d - h, d + h), df, p)


def agreement(d: Diff, paper_sign: int) -> str:
  """Whether our method - baseline goes the paper's way: "yes" (interval excludes 0 on the
  paper's side), "yes (n.s.)" (same sign, interval spans 0), "no (n.s.)", "no", "tie" (equal
  means), "no paper direction" (paper_sign 0) or "n/a" (no runs)."""
  if d.diff is None:
    return "n/a"
  if paper_sign == 0:
    return "no paper direction"
  if d.diff == 0:
    return "tie"
  same = d.diff * paper_sign > 0
  if d.ci95 is None:
    return "yes (n.s.)" if same else "no (n.s.)"
  lo, hi = d.ci95
  significant = lo > 0 or hi < 0
  return ("yes" if same else "no") + ("" if significant else " (n.s.)")
