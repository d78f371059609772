"""Plain NumPy loop references for the outcome / token-level credit kernels.

Written from the equations in shared/ALGORITHMS.md (§0, §1.1-§1.8, §1.12, §3), one row and one
group at a time, in float64 — deliberately not from agent_rl's kernels. Groups are Python
dicts keyed by uid, the way the reference implementations are written.
"""
from collections import defaultdict

import numpy as np


def _groups(index):
  g = defaultdict(list)
  for i, u in enumerate(index):
    g[int(u)].append(i)
  return g


def masked_whiten(x, m):
  x = np.asarray(x, np.float64)
  m = np.asarray(m, np.float64)
  n = m.sum()
  if n <= 1:
    raise ValueError("mask sum <= 1")
  mu = (m * x).sum() / (n + 1e-8)
  v = (m * (x - mu) ** 2).sum() / (n + 1e-8) * n / (n - 1)
  return (x - mu) / np.sqrt(v + 1e-8)


def grpo(scores, index, eps=1e-6, norm=True):
  out = np.zeros(len(scores))
  for members in _groups(index).values():
    s = np.array([scores[i] for i in members], np.float64)
    if len(members) == 1:
      mu, sd = 0.0, 1.0
    else:
      mu, sd = s.mean(), s.std(ddof=1)
    for i in members:
      out[i] = (scores[i] - mu) / (sd + eps) if norm else scores[i] - mu
  return out


def grpo_vectorized(scores, index, eps=1e-6, norm=True, var_floor=1e-6):
  out = np.zeros(len(scores))
  for members in _groups(index).values():
    s = np.array([scores[i] for i in members], np.float64)
    if len(members) == 1:
      mu, sd = 0.0, 1.0
    else:
      mu, sd = s.mean(), np.sqrt(max(s.var(ddof=1), var_floor))
    for i in members:
      out[i] = (scores[i] - mu) / (sd + eps) if norm else scores[i] - mu
  return out


def grpo_passk(scores, index, eps=1e-6, norm=True):
  out = np.zeros(len(scores))
  for members in _groups(index).values():
    if len(members) < 2:
      raise ValueError("pass@k needs >= 2 samples per group")
    s = [scores[i] for i in members]
    best = max(range(len(s)), key=lambda k: (s[k], -k))  # first index among ties
    second = max(s[k] for k in range(len(s)) if k != best)
    a = s[best] - second
    if norm:
      a = a / (np.std(s, ddof=1) + eps)
    out[members[best]] = a
  return out


def rloo(scores, index, singleton_raw=True):
  out = np.zeros(len(scores))
  for members in _groups(index).values():
    n = len(members)
    for i in members:
      if n == 1:
        out[i] = scores[i] if singleton_raw else 0.0
      else:
        others = [scores[j] for j in members if j != i]
        out[i] = scores[i] - sum(others) / len(others)
  return out


def group_centered(scores, index):
  out = np.zeros(len(scores))
  for members in _groups(index).values():
    mu = 0.0 if len(members) == 1 else np.mean([scores[i] for i in members])
    for i in members:
      out[i] = scores[i] - mu
  return out


def reinforce_pp_baseline(r, m, index):
  a = group_centered(r.sum(-1), index)
  tok = a[:, None] * m
  return masked_whiten(tok, m) * m


def opo(scores, lengths, index):
  out = np.zeros(len(scores))
  for members in _groups(index).values():
    if len(members) == 1:
      b = 0.0
    else:
      b = sum(lengths[i] * scores[i] for i in members) / sum(lengths[i] for i in members)
    for i in members:
      out[i] = scores[i] - b
  return out


def gpg(scores, index, f_norm=1.0):
  alpha = len(scores) / max(sum(1 for s in scores if s != 0), 1)
  return alpha * group_centered(scores, index) / f_norm


def remax(r, b, m):
  B, L = r.shape
  ret = np.zeros((B, L))
  for i in range(B):
    acc = 0.0
    for t in reversed(range(L)):
      acc += r[i, t] * m[i, t]
      ret[i, t] = acc
  return ret - b[:, None] * m, ret


def gae(r, v, m, gamma=1.0, lam=1.0):
  B, L = r.shape
  adv = np.zeros((B, L))
  for i in range(B):
    nv, g = 0.0, 0.0
    for t in reversed(range(L)):
      if m[i, t]:
        delta = r[i, t] + gamma * nv - v[i, t]
        g = delta + gamma * lam * g
        nv = v[i, t]
      adv[i, t] = g
  return masked_whiten(adv, m), adv + v


def reinforce_pp(r, m, gamma=1.0, reset=True):
  B, L = r.shape
  ret = np.zeros((B, L))
  for i in range(B):
    run = 0.0
    for t in reversed(range(L)):
      if reset:
        run = r[i, t] + gamma * run
        ret[i, t] = run
        run = run * m[i, t]
      elif m[i, t]:
        run = r[i, t] + gamma * run
        ret[i, t] = run
  return masked_whiten(ret, m) * m, ret


def bilevel_gae(r, v, m, gamma=1.0, lam=1.0, gh=0.95, ends=None):
  B, L = r.shape
  adv = np.zeros((B, L))
  ret = np.zeros((B, L))
  for i in range(B):
    e = [t for t in range(L) if (r[i, t] != 0 if ends is None else ends[i, t])]
    rt = r[i].astype(np.float64).copy()
    g = 0.0
    for k in reversed(range(len(e))):
      nv = v[i, e[k + 1]] if k + 1 < len(e) else 0.0
      g = rt[e[k]] + gh * nv - v[i, e[k]] + gh * lam * g
      adv[i, e[k]] = g
    for p in e:
      ret[i, p] = adv[i, p] + v[i, p]
      rt[p] = adv[i, p] + v[i, p]
    pos = [t for t in range(L) if m[i, t]]
    g = 0.0
    for k in reversed(range(len(pos))):
      p = pos[k]
      if p in e:
        nv, g = 0.0, 0.0
      else:
        nv = v[i, pos[k + 1]] if k + 1 < len(pos) else 0.0
      g = rt[p] + gamma * nv - v[i, p] + gamma * lam * g
      adv[i, p] = g
      ret[i, p] = g + v[i, p]
  return masked_whiten(adv, m), ret


def turn_rewards_on_tokens(reward, valid, loss_mask, turn_index):
  """Each valid turn's reward on the last loss-mask token with that turn index."""
  N, T = reward.shape
  out = np.zeros(loss_mask.shape)
  for i in range(N):
    for t in range(T):
      if not valid[i, t]:
        continue
      toks = [l for l in range(loss_mask.shape[1]) if turn_index[i, l] == t and loss_mask[i, l] > 0]
      if toks:
        out[i, toks[-1]] = reward[i, t]
  return out


def overlong(length, l_max, l_buf, p):
  return min(-(length - (l_max - l_buf)) / l_buf * p, 0.0)


def kl_value(lp, ref, kind):
  d = lp - ref
  if kind in ("kl", "k1"):
    return d
  if kind == "abs":
    return abs(d)
  if kind in ("mse", "k2"):
    return 0.5 * d * d
  u = min(max(-d, -20.0), 20.0)
  return min(max(np.exp(u) - u - 1.0, -10.0), 10.0)


def adaptive_beta(beta, kl, n, target=0.1, horizon=10000):
  return beta * (1 + min(max(kl / target - 1, -0.2), 0.2) * n / horizon)
