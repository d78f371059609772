"""Plain-Python references for the turn-aware credit kernels, written from the equations in
shared/ALGORITHMS.md §2, §4.1–§4.8, §4.13–§4.15 (verl-agent style: one row per valid turn,
dicts keyed by uid / state, float64). Independent of agent_rl.credit's code.

Also: `random_walk_batch`, random walks on a small grid so anchor states repeat.
"""
from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

EPS = 1e-6


# ---------------------------------------------------------------- test data

def random_walk_batch(rng, group_sizes, max_turns, *, grid=3, p_invalid=0.2, p_flag=0.2,
                      copy_group=None, num_agents=2):
  """Grid random walks: state (x, y), hash x*grid+y+1, goal at the far corner (+10, done,
  success), a step cost of -0.1 w.p. 0.3, invalid actions (state kept) w.p. p_invalid,
  random episode lengths (padding). `copy_group` = index of a group whose episodes are all
  copies of its first one (a zero-variance group)."""
  n = int(sum(group_sizes))
  t = max_turns
  f = {k: np.zeros((n, t), dt) for k, dt in [
      ("reward", np.float32), ("valid", bool), ("done", bool), ("success", bool),
      ("valid_action", bool), ("state_hash", np.uint32), ("next_hash", np.uint32),
      ("milestone", bool), ("fatal", bool), ("agent_id", np.int32)]}
  gid = np.repeat(np.arange(len(group_sizes)), group_sizes).astype(np.int32)
  moves = [(0, 1), (1, 0), (0, -1), (-1, 0)]
  for i in range(n):
    length = int(rng.integers(1, t + 1))
    x, y = 0, 0
    for k in range(length):
      f["valid"][i, k] = True
      f["state_hash"][i, k] = x * grid + y + 1
      f["agent_id"][i, k] = k % num_agents if num_agents > 1 else 0
      ok = rng.random() >= p_invalid
      f["valid_action"][i, k] = ok
      if ok:
        dx, dy = moves[int(rng.integers(4))]
        x, y = min(max(x + dx, 0), grid - 1), min(max(y + dy, 0), grid - 1)
      f["next_hash"][i, k] = x * grid + y + 1
      f["milestone"][i, k] = rng.random() < p_flag
      f["fatal"][i, k] = rng.random() < 0.45
      r = -0.1 if rng.random() < 0.3 else 0.0
      if (x, y) == (grid - 1, grid - 1):
        f["reward"][i, k] = 10.0
        f["success"][i, k] = True
        f["done"][i, k] = True
        break
      f["reward"][i, k] = r
    last = np.flatnonzero(f["valid"][i])[-1]
    f["done"][i, last] = True
  if copy_group is not None:
    rows = np.flatnonzero(gid == copy_group)
    for k in f:
      f[k][rows] = f[k][rows[0]]
  return f, gid


def rows_of(valid):
  return [(i, t) for i in range(valid.shape[0]) for t in range(valid.shape[1]) if valid[i, t]]


# ---------------------------------------------------------------- shared pieces

def _stats(vals, singleton_raw):
  """(mean, std) of a list with verl's singleton conventions; std is Bessel (torch.std)."""
  if len(vals) == 1:
    return (0.0 if singleton_raw else float(vals[0])), 1.0
  return float(np.mean(vals)), float(np.std(vals, ddof=1))


def _norm(x, mean, std, use_std):
  return (x - mean) / (std + EPS) if use_std else x - mean


def episode_adv(f, gid, *, mode, cross_steps, penalty, key=None):
  """GiGPO episode_norm_reward over rows; `key(i, t)` overrides the uid."""
  valid = f["valid"]
  key = key or (lambda i, t: gid[i])
  ret = {i: sum(float(f["reward"][i, t]) for t in range(valid.shape[1]) if valid[i, t])
         for i in range(valid.shape[0])}
  score = {(i, t): ret[i] - penalty * (not f["valid_action"][i, t]) for (i, t) in rows_of(valid)}
  id2score, seen = defaultdict(list), set()
  for (i, t) in rows_of(valid):
    if i in seen:
      continue
    id2score[key(i, t)].append(score[(i, t)])
    if not cross_steps:
      seen.add(i)
  st = {k: _stats(v, True) for k, v in id2score.items()}
  out = np.zeros(valid.shape)
  for (i, t) in rows_of(valid):
    m, s = st[key(i, t)]
    out[i, t] = _norm(score[(i, t)], m, s, mode == "mean_std_norm")
  return out


def step_adv(f, gid, values, *, mode, key=None):
  """GiGPO step_norm_reward: clusters by (uid, state_hash) (or `key`), singleton -> 0."""
  valid = f["valid"]
  key = key or (lambda i, t: (gid[i], int(f["state_hash"][i, t])))
  clusters = defaultdict(list)
  for (i, t) in rows_of(valid):
    clusters[key(i, t)].append(values[i, t])
  st = {k: _stats(v, False) for k, v in clusters.items()}
  out = np.zeros(valid.shape)
  for (i, t) in rows_of(valid):
    m, s = st[key(i, t)]
    out[i, t] = _norm(values[i, t], m, s, mode == "mean_std_norm")
  return out


def invalid(f):
  return (f["valid"] & ~f["valid_action"]).astype(np.float64)


# ---------------------------------------------------------------- §2 GiGPO

def gigpo(f, gid, *, gamma=0.95, w=1.0, mode="mean_norm", cross_steps=True, penalty=0.1):
  valid = f["valid"]
  a_e = episode_adv(f, gid, mode=mode, cross_steps=cross_steps, penalty=penalty)
  g = np.zeros(valid.shape)
  for i in range(valid.shape[0]):
    run = 0.0
    for t in reversed(range(valid.shape[1])):
      if valid[i, t]:
        run = float(f["reward"][i, t]) + gamma * run
        g[i, t] = run
  g -= penalty * invalid(f)
  return (a_e + w * step_adv(f, gid, g, mode=mode)) * valid


# ---------------------------------------------------------------- graph helpers

def group_edges(f, gid):
  """{group: [(i, t, src, dst)]} of valid turns."""
  out = defaultdict(list)
  for (i, t) in rows_of(f["valid"]):
    out[gid[i]].append((i, t, int(f["state_hash"][i, t]), int(f["next_hash"][i, t])))
  return out


# ---------------------------------------------------------------- §4.4 RewardFlow

def rewardflow(f, gid, *, gamma=0.9, w=1.0, mode="mean_norm", penalty=0.1):
  valid = f["valid"]
  step_r = np.zeros(valid.shape)
  for g, edges in group_edges(f, gid).items():
    r = {}
    for (i, t, s, d) in edges:  # r(s): max reward received on arriving at s
      r[d] = max(r.get(d, -np.inf), float(f["reward"][i, t]))
    for (i, t, s, d) in edges:  # never arrived at (initial states): 0
      r.setdefault(s, 0.0)
    succ = defaultdict(set)
    for (i, t, s, d) in edges:
      if s != d:
        succ[s].add(d)
    v = dict(r)
    for _ in range(1000):
      new = {s: max([v[s]] + [gamma * v[d] for d in succ[s]]) for s in v}
      if new == v:
        break
      v = new
    for (i, t, s, d) in edges:
      step_r[i, t] = v[d] - v[s]
  step_r -= penalty * invalid(f)
  a_e = episode_adv(f, gid, mode=mode, cross_steps=True, penalty=penalty)
  return (a_e + w * step_adv(f, gid, step_r, mode=mode)) * valid


# ---------------------------------------------------------------- §4.5 GraphGPO

def graphgpo(f, gid, *, gamma=0.1, scale=10.0, normalize_distance=False, mode="mean_std_norm",
             penalty=0.1):
  valid = f["valid"]
  ret = np.zeros(valid.shape)
  for g, edges in group_edges(f, gid).items():
    pred = defaultdict(set)
    dst_of = {}
    for (i, t, s, d) in edges:
      d = "SUCCESS" if f["success"][i, t] else d
      dst_of[(i, t)] = d
      pred[d].add(s)
    dist = {"SUCCESS": 0}
    q = deque(["SUCCESS"])
    while q:  # reverse BFS = Dijkstra with unit costs
      u = q.popleft()
      for p in pred[u]:
        if p not in dist:
          dist[p] = dist[u] + 1
          q.append(p)
    nodes = {s for (_, _, s, _) in edges} | set(dst_of.values())
    finite = [dist[x] for x in nodes if x in dist]
    far = (max(finite) if finite else 0) + 1
    dd = lambda x: dist.get(x, far)
    for (i, t, s, _) in edges:
      e = dd(dst_of[(i, t)]) - dd(s) + 1 if normalize_distance else dd(dst_of[(i, t)])
      ret[i, t] = scale * gamma ** e
  a_e = episode_adv(f, gid, mode=mode, cross_steps=True, penalty=penalty)
  return (a_e + step_adv(f, gid, ret, mode=mode)) * valid


# ---------------------------------------------------------------- §4.6 Gated-BEPO

def gated_bepo(f, gid, *, gamma=0.95, lam=0.95, mode="mean_norm", penalty=0.1):
  valid = f["valid"]
  n, tt = valid.shape
  vs, vd = np.zeros(valid.shape), np.zeros(valid.shape)
  gate = np.zeros(valid.shape, bool)
  for g, edges in group_edges(f, gid).items():
    out = defaultdict(list)
    for (i, t, s, d) in edges:
      out[s].append((float(f["reward"][i, t]), d, bool(f["done"][i, t])))
    v = defaultdict(float)
    for _ in range(20000):
      new = defaultdict(float)
      for s, lst in out.items():
        new[s] = sum(r + gamma * (0.0 if dn else v[d]) for (r, d, dn) in lst) / len(lst)
      diff = max(abs(new[k] - v[k]) for k in set(new) | set(v))
      v = new
      if diff < 1e-12:
        break
    for (i, t, s, d) in edges:
      vs[i, t], vd[i, t] = v[s], v[d]
      gate[i, t] = len({dd for (_, dd, _) in out[s]}) >= 2
  a_b = np.zeros(valid.shape)
  for i in range(n):
    run = 0.0
    for t in reversed(range(tt)):
      if valid[i, t]:
        delta = f["reward"][i, t] + gamma * (not f["done"][i, t]) * vd[i, t] - vs[i, t]
        run = delta + gamma * lam * run
        a_b[i, t] = run
  a_e = episode_adv(f, gid, mode=mode, cross_steps=True, penalty=penalty)
  return np.where(gate, a_e + a_b, a_e) * valid


# ---------------------------------------------------------------- §4.3 BEACON (flag variant)

def beacon(f, gid, *, gamma_m=0.99, w=1.0, mode="mean_norm", penalty=0.1):
  valid = f["valid"]
  rew = np.zeros(valid.shape)
  seg = {}
  for i in range(valid.shape[0]):
    steps = [t for t in range(valid.shape[1]) if valid[i, t]]
    flags = [k for k, t in enumerate(steps) if f["milestone"][i, t]]
    start = 0
    for m in flags:
      for k in range(start, m + 1):
        rew[i, steps[k]] = gamma_m ** (m - k) * 10.0
      start = m + 1
    for k, t in enumerate(steps):
      seg[(i, t)] = sum(1 for j in steps[:k] if f["milestone"][i, j])
  rew -= penalty * invalid(f)
  a_e = episode_adv(f, gid, mode=mode, cross_steps=True, penalty=penalty)
  a_s = step_adv(f, gid, rew, mode=mode, key=lambda i, t: (gid[i], seg[(i, t)]))
  return (a_e + w * a_s) * valid


# ---------------------------------------------------------------- §4.1 Dr. MAS, §4.15 per-agent

def _grpo_rows(keyed_scores, use_std):
  """{key: [scores]} -> {key: (mean, std)} with verl's GRPO singleton rule."""
  return {k: _stats(v, True) for k, v in keyed_scores.items()}


def drmas(f, gid, *, group_by_agent=True, use_std=True):
  valid = f["valid"]
  ret = {i: float(np.sum(f["reward"][i][valid[i]])) for i in range(valid.shape[0])}
  out = np.zeros(valid.shape)
  if group_by_agent:
    d = defaultdict(list)
    for (i, t) in rows_of(valid):
      d[(gid[i], int(f["agent_id"][i, t]))].append(ret[i])
    st = _grpo_rows(d, use_std)
    for (i, t) in rows_of(valid):
      m, s = st[(gid[i], int(f["agent_id"][i, t]))]
      out[i, t] = _norm(ret[i], m, s, use_std)
  else:
    d = defaultdict(list)
    for i in range(valid.shape[0]):
      if valid[i].any():
        d[gid[i]].append(ret[i])
    st = _grpo_rows(d, use_std)
    for (i, t) in rows_of(valid):
      m, s = st[gid[i]]
      out[i, t] = _norm(ret[i], m, s, use_std)
  return out


def per_agent(f, gid, *, use_std=True):
  valid = f["valid"]
  r = defaultdict(float)
  for (i, t) in rows_of(valid):
    r[(i, int(f["agent_id"][i, t]))] += float(f["reward"][i, t])
  d = defaultdict(list)
  for (i, k), v in r.items():
    d[(gid[i], k)].append(v)
  st = _grpo_rows(d, use_std)
  out = np.zeros(valid.shape)
  for (i, t) in rows_of(valid):
    k = int(f["agent_id"][i, t])
    m, s = st[(gid[i], k)]
    out[i, t] = _norm(r[(i, k)], m, s, use_std)
  return out


# ---------------------------------------------------------------- §4.2 UMA

def uma(f, gid, q, *, use_std=True):
  valid = f["valid"]
  score = {}
  for i in range(valid.shape[0]):
    qa = [float(f["reward"][i, t]) for t in range(valid.shape[1]) if valid[i, t] and q[i, t] > 0]
    qa_mean = sum(qa) / len(qa) if qa else 0.0
    for t in range(valid.shape[1]):
      if valid[i, t]:
        score[(i, t)] = float(f["reward"][i, t]) + (qa_mean if q[i, t] == 0 else 0.0)
  d = defaultdict(list)
  for (i, t) in rows_of(valid):
    d[f"{gid[i]}_{q[i, t]}"].append(score[(i, t)])
  st = _grpo_rows(d, use_std)
  out = np.zeros(valid.shape)
  for (i, t) in rows_of(valid):
    m, s = st[f"{gid[i]}_{q[i, t]}"]
    out[i, t] = _norm(score[(i, t)], m, s, use_std)
  return out


# ---------------------------------------------------------------- §4.7 PiCA (GRPO variant)

def pica(f, gid, prm, *, gamma=1.0, b=0.5, scale=0.6, out_scale=1.5, joint=False, use_std=True):
  valid = f["valid"]
  n = valid.shape[0]
  val, kind = {}, {}
  for i in range(n):
    steps = [t for t in range(valid.shape[1]) if valid[i, t]]
    if not steps:
      continue
    for k, t in enumerate(steps[:-1]):
      pen = 0.0 if k < 3 else 0.3 * 1.5 ** (k - 2)
      val[(i, t)] = (1 + scale) * (1 - float(prm[i, t]) - b - pen)
      kind[(i, t)] = "ig"
    val[(i, steps[-1])] = out_scale * float(np.sum(f["reward"][i][valid[i]]))
    kind[(i, steps[-1])] = "f1"
  def stats(keys):
    d = defaultdict(list)
    for k in keys:
      d[gid[k[0]]].append(val[k])
    res = {}
    for g, v in d.items():
      m = float(np.mean(v))
      s = 1.0 if len(v) <= 1 else float(np.sqrt(np.var(v) + 1e-8))
      res[g] = (m, s)
    return res
  hat = {}
  sets = [list(val)] if joint else [[k for k in val if kind[k] == "f1"], [k for k in val if kind[k] == "ig"]]
  for keys in sets:
    st = stats(keys)
    for k in keys:
      m, s = st[gid[k[0]]]
      hat[k] = _norm(val[k], m, s, use_std)
  out = np.zeros(valid.shape)
  for i in range(n):
    steps = [t for t in range(valid.shape[1]) if valid[i, t]]
    if not steps:
      continue
    o = hat[(i, steps[-1])]
    out[i, steps[-1]] = o
    run = 0.0
    for t in reversed(steps[:-1]):
      run = hat[(i, t)] + gamma * run
      out[i, t] = run + o
  return out


# ---------------------------------------------------------------- §4.8 fatal-aware

def fatal_aware(f, gid, *, estimator="rloo", k=3, abnormal=None, use_std=True):
  valid = f["valid"]
  n, tt = valid.shape
  fidx, s = [], []
  for i in range(n):
    run, fi = 0, None
    for t in range(tt):
      if not valid[i, t]:
        continue
      run = run + 1 if f["fatal"][i, t] else 0
      if run >= k and fi is None:
        fi = t - k + 1
    fidx.append(fi)
    s.append(0.0 if fi == 0 else float(np.sum(f["reward"][i][valid[i]])))
  d = defaultdict(list)
  for i in range(n):
    if valid[i].any():
      d[gid[i]].append(s[i])
  adv = np.zeros(n)
  for i in range(n):
    v = d[gid[i]]
    if estimator == "rloo":
      adv[i] = s[i] if len(v) == 1 else s[i] - (sum(v) - s[i]) / (len(v) - 1)
    else:
      m, sd = _stats(v, True)
      adv[i] = _norm(s[i], m, sd, use_std)
    flagged = fidx[i] is not None or (abnormal is not None and abnormal[i])
    if flagged:
      adv[i] = max(adv[i], 0.0)
  mask = np.zeros(valid.shape)
  for i in range(n):
    cut = tt if fidx[i] is None else fidx[i]
    mask[i, :cut] = valid[i, :cut]
  return adv[:, None] * valid, mask


# ---------------------------------------------------------------- §4.13 SkillC, §4.14 Skill-R1

def skillc(f, gid, injected, lam, *, use_std=True):
  valid = f["valid"]
  n = valid.shape[0]
  s = [float(np.sum(f["reward"][i][valid[i]])) for i in range(n)]
  succ = [bool((f["success"][i] & valid[i]).any()) for i in range(n)]
  members = defaultdict(list)
  for i in range(n):
    if valid[i].any():
      members[gid[i]].append(i)
  adv = np.zeros(n)
  for g, idx in members.items():
    m, sd = _stats([s[i] for i in idx], True)
    inj = [i for i in idx if injected[i]]
    free = [i for i in idx if not injected[i]]
    c = (np.mean([succ[i] for i in inj]) - np.mean([succ[i] for i in free])) if inj and free else 0.0
    for i in idx:
      adv[i] = _norm(s[i], m, sd, use_std) + lam * (not injected[i] and succ[i]) * max(0.0, c)
  return adv[:, None] * valid


def skill_r1(f, gid, generation, *, beta=1.0, parent=None, rollout_rewards=None, use_std=True):
  valid = f["valid"]
  n = valid.shape[0]
  if rollout_rewards is None:
    rbar = [float(np.sum(f["reward"][i][valid[i]])) for i in range(n)]
  else:
    rbar = [float(np.mean(rollout_rewards[i])) for i in range(n)]
  groups = defaultdict(list)
  for i in range(n):
    if valid[i].any():
      groups[(gid[i], int(generation[i]))].append(i)
  adv = np.zeros(n)
  for (g, gen), idx in groups.items():
    m, sd = _stats([rbar[i] for i in idx], True)
    for i in idx:
      if parent is not None:
        inter = rbar[i] - rbar[parent[i]] if parent[i] >= 0 else 0.0
      else:
        prev = groups.get((g, gen - 1), [])
        inter = rbar[i] - np.mean([rbar[j] for j in prev]) if prev else 0.0
      adv[i] = _norm(rbar[i], m, sd, use_std) + beta * inter
  return adv[:, None] * valid
