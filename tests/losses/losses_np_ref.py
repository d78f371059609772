"""Plain NumPy/Python loop references for the losses, written from shared/ALGORITHMS.md.

Deliberately naive (explicit loops over rows, tokens and turns, float64) and independent of
`agent_rl.losses`; tests compare the jitted kernels against these.
"""
import math

import numpy as np


def clamp(x, lo, hi):
  return float(min(max(x, lo), hi))


def agg(loss, m, mode, num_tokens=None, num_seqs=None, scale=None):
  b, l = loss.shape
  if mode == "token-mean":
    tot, n = 0.0, 0.0
    for i in range(b):
      for t in range(l):
        if m[i, t] != 0:
          tot += m[i, t] * loss[i, t]
          n += m[i, t]
    n = n if num_tokens is None else num_tokens
    return tot / n if n > 0 else 0.0
  if mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
    tot, rows = 0.0, 0
    for i in range(b):
      s, n = 0.0, 0.0
      for t in range(l):
        if m[i, t] != 0:
          s += m[i, t] * loss[i, t]
          n += m[i, t]
      if n > 0:
        rows += 1
      tot += s if mode == "seq-mean-token-sum" else s / (n + 1e-8)
    rows = rows if num_seqs is None else num_seqs
    return tot / rows if rows > 0 else 0.0
  if mode == "seq-mean-token-sum-norm":  # verl 0.9.1: mean over non-empty rows, then / C
    tot = sum(m[i, t] * loss[i, t] for i in range(b) for t in range(l) if m[i, t] != 0)
    rows = sum(1 for i in range(b) if any(m[i, t] != 0 for t in range(l)))
    rows = rows if num_seqs is None else num_seqs
    return tot / rows / (l if scale is None else scale) if rows > 0 else 0.0
  raise ValueError(mode)


def mmean(x, m):
  num = sum(m[idx] * x[idx] for idx in np.ndindex(x.shape) if m[idx] != 0)
  den = sum(m[idx] for idx in np.ndindex(x.shape) if m[idx] != 0)
  return num / den if den > 0 else 0.0


def base_metrics(delta, m):
  """ppo_kl = mean(−Δ); approx_kl = mean(e^Δc − 1 − Δc), Δc = clamp(Δ, ±20)."""
  dc = np.vectorize(lambda d: clamp(d, -20, 20), otypes=[float])(delta)
  return {"ppo_kl": mmean(-delta, m), "approx_kl": mmean(np.exp(dc) - 1 - dc, m)}


def _ones(x, w):
  return np.ones_like(x) if w is None else w


def vanilla(lp, old, adv, m, w=None, lo=0.2, hi=0.2, c=3.0, mode="token-mean", **agg_kw):
  w = _ones(lp, w)
  loss = np.zeros_like(lp)
  cf = np.zeros_like(lp)
  cfl = np.zeros_like(lp)
  delta = np.zeros_like(lp)
  for i, t in np.ndindex(lp.shape):
    d = clamp(lp[i, t] - old[i, t], -20, 20)
    delta[i, t] = d
    r = math.exp(d)
    a = adv[i, t]
    l1 = -a * r
    l2 = -a * clamp(r, 1 - lo, 1 + hi)
    lc = max(l1, l2)
    cf[i, t] = float(l2 > l1)
    ell = lc
    if c is not None and a < 0:
      ell = min(-a * c, lc)
      cfl[i, t] = float(lc > -a * c)
    loss[i, t] = ell * w[i, t]
  met = dict(base_metrics(delta, m), clipfrac=mmean(cf, m), clipfrac_lower=mmean(cfl, m))
  return agg(loss, m, mode, **agg_kw), met


def gspo(lp, old, adv, m, w=None, lo=0.2, hi=0.2, num_seqs=None):
  w = _ones(lp, w)
  b, l = lp.shape
  loss = np.zeros_like(lp)
  cf = np.zeros_like(lp)
  for i in range(b):
    n = sum(m[i, t] for t in range(l))
    seq = sum(m[i, t] * (lp[i, t] - old[i, t]) for t in range(l)) / max(n, 1)
    s = math.exp(min(seq, 10.0))
    for t in range(l):
      l1 = -adv[i, t] * s
      l2 = -adv[i, t] * clamp(s, 1 - lo, 1 + hi)
      loss[i, t] = max(l1, l2) * w[i, t]
      cf[i, t] = float(l2 > l1)
  met = dict(base_metrics(lp - old, m), clipfrac=mmean(cf, m), clipfrac_lower=0.0)
  return agg(loss, m, "seq-mean-token-mean", num_seqs=num_seqs), met


def gspo_grad(lp, old, adv, m, w=None, lo=0.2, hi=0.2):
  """Analytic d loss / d logprobs: s carries the per-token gradient s·∂logπ_t (value stopped)."""
  w = _ones(lp, w)
  b, l = lp.shape
  g = np.zeros_like(lp)
  rows = sum(1 for i in range(b) if sum(m[i]) > 0)
  for i in range(b):
    n = sum(m[i, t] for t in range(l))
    seq = sum(m[i, t] * (lp[i, t] - old[i, t]) for t in range(l)) / max(n, 1)
    s = math.exp(min(seq, 10.0))
    for t in range(l):
      l1 = -adv[i, t] * s
      l2 = -adv[i, t] * clamp(s, 1 - lo, 1 + hi)
      active = seq <= 10.0 and not (l2 > l1)
      g[i, t] = (m[i, t] * w[i, t] / (n + 1e-8) / max(rows, 1)) * (-adv[i, t] * s if active else 0)
  return g


def sapo(lp, old, adv, m, w=None, tau_pos=1.0, tau_neg=1.05):
  w = _ones(lp, w)
  loss = np.zeros_like(lp)
  delta = np.zeros_like(lp)
  for i, t in np.ndindex(lp.shape):
    d = clamp(lp[i, t] - old[i, t], -20, 20)
    delta[i, t] = d
    tau = tau_pos if adv[i, t] > 0 else tau_neg
    f = 1.0 / (1.0 + math.exp(-tau * (math.exp(d) - 1))) * 4.0 / tau
    loss[i, t] = -f * adv[i, t] * w[i, t]
  met = dict(base_metrics(delta, m), clipfrac=0.0, clipfrac_lower=0.0)
  return agg(loss, m, "seq-mean-token-mean"), met


def cispo(lp, old, adv, m, w=None, lo=0.2, hi=0.2, mode="token-mean"):
  """Returns (loss, metrics, analytic gradient wrt logprobs for mode=token-mean)."""
  w = _ones(lp, w)
  loss = np.zeros_like(lp)
  grad = np.zeros_like(lp)
  cf = np.zeros_like(lp)
  delta = np.zeros_like(lp)
  n = sum(m[idx] for idx in np.ndindex(lp.shape))
  for i, t in np.ndindex(lp.shape):
    d = clamp(lp[i, t] - old[i, t], -20, 20)
    delta[i, t] = d
    r = math.exp(d)
    cr = clamp(r, 1 - lo, 1 + hi)
    cf[i, t] = float(cr != r)
    loss[i, t] = -cr * adv[i, t] * lp[i, t] * w[i, t]
    grad[i, t] = -cr * adv[i, t] * w[i, t] * m[i, t] / n if n > 0 else 0.0
  met = dict(base_metrics(delta, m), clipfrac=mmean(cf, m), clipfrac_lower=0.0)
  return agg(loss, m, mode), met, grad


def geo_mean(lp, old, adv, m, w=None, lo=0.4, hi=0.4):
  b, l = lp.shape
  total = 0.0
  cf = np.zeros_like(lp)
  cfl = np.zeros_like(lp)
  for i in range(b):
    n = sum(m[i, t] for t in range(l)) + 1e-8
    num, abar, logw = 0.0, 0.0, 0.0
    for t in range(l):
      d = lp[i, t] - old[i, t]
      dc = clamp(d, -lo, hi)
      sgn = float(np.sign(adv[i, t]))
      dstar = sgn * min(sgn * d, sgn * dc)
      num += m[i, t] * dstar
      abar += m[i, t] * adv[i, t]
      if w is not None:
        logw += m[i, t] * math.log(w[i, t] + 1e-10)
      cf[i, t] = float(d != dc and adv[i, t] > 0)
      cfl[i, t] = float(d != dc and adv[i, t] < 0)
    seq_loss = -(abar / n) * math.exp(num / n)
    if w is not None:
      seq_loss *= math.exp(logw / n)
    total += seq_loss
  met = dict(base_metrics(lp - old, m), clipfrac=mmean(cf, m), clipfrac_lower=mmean(cfl, m))
  return total / b, met


def gpg(lp, old, adv, m, w=None, mode="token-mean"):
  w = _ones(lp, w)
  loss = -adv * lp * w
  met = dict(base_metrics(lp - old, m), clipfrac=0.0, clipfrac_lower=0.0)
  return agg(loss, m, mode), met


def reinforce(lp, old, adv, m, w=None, turn_index=None):
  """Mean over (row, turn) items (or rows) of −mean_token(w·A·logπ)."""
  w = _ones(lp, w)
  items = {}
  for i, t in np.ndindex(lp.shape):
    if m[i, t] == 0:
      continue
    if turn_index is not None and turn_index[i, t] < 0:
      continue
    key = (i,) if turn_index is None else (i, int(turn_index[i, t]))
    s, n = items.get(key, (0.0, 0.0))
    items[key] = (s + m[i, t] * (-adv[i, t] * lp[i, t] * w[i, t]), n + m[i, t])
  vals = [s / n for s, n in items.values()]
  met = dict(base_metrics(lp - old, m), clipfrac=0.0, clipfrac_lower=0.0)
  return (sum(vals) / len(vals) if vals else 0.0), met


def cov(lp, adv, m):
  abar = mmean(adv, m)
  lbar = mmean(lp, m)
  return (adv - abar) * (lp - lbar)


def clip_cov_candidates(lp, old, adv, m, lo=0.2, hi=0.2, lb=1.0, ub=5.0):
  c = cov(lp, adv, m)
  out = np.zeros(lp.shape, bool)
  for i, t in np.ndindex(lp.shape):
    r = math.exp(lp[i, t] - old[i, t])
    clipped = (-adv[i, t] * clamp(r, 1 - lo, 1 + hi)) > (-adv[i, t] * r)
    out[i, t] = m[i, t] > 0 and not clipped and lb < c[i, t] < ub
  return out


def clip_cov(lp, old, adv, m, selected, w=None, lo=0.2, hi=0.2, mode="token-mean"):
  """Loss given the set of zeroed tokens."""
  w = _ones(lp, w)
  loss = np.zeros_like(lp)
  for i, t in np.ndindex(lp.shape):
    r = math.exp(lp[i, t] - old[i, t])
    ell = max(-adv[i, t] * r, -adv[i, t] * clamp(r, 1 - lo, 1 + hi))
    loss[i, t] = (0.0 if selected[i, t] else ell) * w[i, t]
  met = dict(base_metrics(lp - old, m), clipfrac=mmean(selected.astype(float), m),
             clipfrac_lower=0.0)
  return agg(loss, m, mode), met


def kl_cov(lp, old, adv, m, ratio=2e-4, coef=0.1, w=None, mode="token-mean"):
  """Returns (loss, metrics, selected mask)."""
  w = _ones(lp, w)
  valid = [idx for idx in np.ndindex(lp.shape) if m[idx] > 0]
  sel = np.zeros(lp.shape, bool)
  if valid:
    a = np.array([adv[idx] for idx in valid])
    p = np.array([lp[idx] for idx in valid])
    c = (a - a.mean()) * (p - p.mean())
    k = max(1, int(len(valid) * ratio))
    for j in sorted(range(len(valid)), key=lambda j: -c[j])[:k]:
      sel[valid[j]] = True
  loss = np.zeros_like(lp)
  for i, t in np.ndindex(lp.shape):
    d = lp[i, t] - old[i, t]
    loss[i, t] = (-adv[i, t] * math.exp(d) + (coef * abs(d) if sel[i, t] else 0.0)) * w[i, t]
  met = dict(base_metrics(lp - old, m), clipfrac=0.0, clipfrac_lower=0.0,
             ppo_kl_abs=mmean(np.abs(lp - old), m), cov_selected=float(sel.sum()))
  return agg(loss, m, mode), met, sel


def sorl(lp, old, adv, m, turn_index, w=None, lo=0.2, hi=0.2, c=None, norm="unclipped",
         threshold=0.2):
  w = _ones(lp, w)
  turns = {}
  for i, t in np.ndindex(lp.shape):
    if m[i, t] != 0 and turn_index[i, t] >= 0:
      turns.setdefault((i, int(turn_index[i, t])), []).append(t)
  total, n_clip, n_low = 0.0, 0, 0
  for (i, _), ts in turns.items():
    n = sum(m[i, t] for t in ts)
    dbar = sum(m[i, t] * (lp[i, t] - old[i, t]) for t in ts) / n
    abar = sum(m[i, t] * adv[i, t] for t in ts) / n
    wbar = sum(m[i, t] * w[i, t] for t in ts) / n
    rho = math.exp(clamp(dbar, -20, 20))
    l1 = -abar * rho
    l2 = -abar * clamp(rho, 1 - lo, 1 + hi)
    ell = max(l1, l2)
    n_clip += l2 > l1
    if c is not None and abar < 0:
      n_low += ell > -abar * c
      ell = min(ell, -abar * c)
    total += wbar * ell
  n_t = len(turns)
  frac = n_clip / max(n_t, 1)
  trig = frac > threshold
  plain = total / max(n_t, 1)
  if norm == "none" or not trig:
    loss = plain
  elif norm == "unclipped":
    loss = total / max(n_t - n_clip, 1)
  else:
    loss = plain * (n_t - n_clip) / max(n_t, 1)
  met = dict(base_metrics(lp - old, m), clipfrac=frac, clipfrac_lower=n_low / max(n_t, 1),
             num_turns=float(n_t), norm_triggered=float(trig),
             norm_factor=(loss / plain) if plain != 0 else None)
  return loss, met


def kl_estimate(lp, ref, kind):
  d = lp - ref
  if kind in ("k1", "kl"):
    return d
  if kind == "abs":
    return abs(d)
  if kind in ("k2", "mse"):
    return 0.5 * d * d
  u = clamp(-d, -20, 20)
  return clamp(math.exp(u) - u - 1, -10, 10)


def log_softmax(z):
  z = np.asarray(z, np.float64)
  mx = z.max()
  return z - (mx + math.log(sum(math.exp(v - mx) for v in z)))


def entropy(z):
  lp = log_softmax(z)
  return -sum(math.exp(a) * a for a in lp)
