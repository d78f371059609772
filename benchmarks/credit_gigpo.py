"""GiGPO advantages: our jitted turn-level kernel vs verl-agent's per-group dict approach.

Batch: 128 groups x 16 episodes x 50 turns (102,400 step rows) of random walks on a small
grid (anchor states repeat within groups), sparse success reward, 10% invalid actions.

- ours: `agent_rl.credit.gigpo` jitted, turn-level advantages `[2048, 50]` (the loss
  broadcasts them to tokens inside its own jit); also timed with the `[2048, 50*512]` token
  array materialised (same element count as verl-agent's `[102400, 512]`).
- peer: a faithful Python re-implementation of verl-agent's `gigpo/core_gigpo.py`
  (`episode_norm_reward`, `build_step_group` with `to_hashable` anchors and uuid cluster ids,
  `step_norm_reward`, the [B, 512] token broadcast), on NumPy (verl-agent is not on PyPI).

Median of several runs; compile time reported separately. Writes
benchmarks/results/credit_gigpo.json.

    python benchmarks/credit_gigpo.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import uuid
from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.credit import gigpo as gg
from agent_rl.credit.base import turn_to_token
from agent_rl.rollout.batch import from_turns

GROUPS, G, T, RESP = 128, 16, 50, 512
GRID = 4


def make_walks(seed: int = 0):
  """Turn arrays `[N, T]` of grid random walks; every group starts in its own corner state."""
  rng = np.random.default_rng(seed)
  n = GROUPS * G
  pos = np.zeros((n, 2), np.int64)
  state = np.zeros((n, T), np.uint32)
  nxt = np.zeros((n, T), np.uint32)
  valid_action = rng.random((n, T)) >= 0.1
  moves = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]])
  for t in range(T):
    state[:, t] = pos[:, 0] * GRID + pos[:, 1] + 1
    step = moves[rng.integers(0, 4, n)] * valid_action[:, t, None]
    pos = np.clip(pos + step, 0, GRID - 1)
    nxt[:, t] = pos[:, 0] * GRID + pos[:, 1] + 1
  reward = np.zeros((n, T), np.float32)
  reward[:, -1] = 10.0 * (rng.random(n) < 0.4)  # sparse outcome reward
  valid = np.ones((n, T), bool)
  gid = np.repeat(np.arange(GROUPS), G).astype(np.int32)
  return dict(reward=reward, valid=valid, valid_action=valid_action, state_hash=state,
              next_hash=nxt, group_id=gid)


# ------------------------------------------------------------ verl-agent re-implementation

def to_hashable(x):
  if isinstance(x, (int, float, str, bool)):
    return x
  if isinstance(x, (np.integer, np.floating)):
    return x.item()
  if isinstance(x, np.ndarray):
    return tuple(x.flatten())
  if isinstance(x, (list, tuple)):
    return tuple(to_hashable(e) for e in x)
  if isinstance(x, dict):
    return tuple(sorted((k, to_hashable(v)) for k, v in x.items()))
  raise TypeError(f"Unsupported type: {type(x)}")


def episode_norm_reward(token_level_rewards, response_mask, index, traj_index, epsilon=1e-6,
                        remove_std=True, compute_mean_std_cross_steps=True):
  response_length = token_level_rewards.shape[-1]
  scores = token_level_rewards.sum(axis=-1)
  id2score, id2mean, id2std, seen_pairs = defaultdict(list), {}, {}, set()
  bsz = scores.shape[0]
  for i in range(bsz):
    if (index[i], traj_index[i]) in seen_pairs:
      continue
    id2score[index[i]].append(scores[i])
    if not compute_mean_std_cross_steps:
      seen_pairs.add((index[i], traj_index[i]))
  for idx in id2score:
    if len(id2score[idx]) == 1:
      id2mean[idx], id2std[idx] = 0.0, 1.0
    else:
      id2mean[idx] = np.mean(np.array(id2score[idx]))
      id2std[idx] = np.std(np.array([id2score[idx]]), ddof=1)
  for i in range(bsz):
    if remove_std:
      scores[i] = scores[i] - id2mean[index[i]]
    else:
      scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
  return np.tile(scores[:, None], [1, response_length]) * response_mask


def build_step_group(anchor_obs, index):
  step_group_uids = np.empty(len(anchor_obs), dtype=object)
  for idx in np.unique(index):
    locs = np.where(index == idx)[0]
    obs_group = anchor_obs[locs]
    clusters = defaultdict(list)
    for i, obs in enumerate(obs_group):
      clusters[to_hashable(obs)].append(locs[i])
    for _, original_indices in clusters.items():
      uid = str(uuid.uuid4())
      for original_idx in original_indices:
        step_group_uids[original_idx] = uid
  return step_group_uids


def step_norm_reward(step_rewards, response_mask, index, epsilon=1e-6, remove_std=True):
  response_length = response_mask.shape[-1]
  scores = step_rewards.copy()
  id2score, id2mean, id2std = defaultdict(list), {}, {}
  bsz = scores.shape[0]
  for i in range(bsz):
    id2score[index[i]].append(scores[i])
  for idx in id2score:
    if len(id2score[idx]) == 1:
      id2mean[idx], id2std[idx] = id2score[idx][0], 1.0
    else:
      id2mean[idx] = np.mean(np.array(id2score[idx]))
      id2std[idx] = np.std(np.array([id2score[idx]]), ddof=1)
  for i in range(bsz):
    if remove_std:
      scores[i] = scores[i] - id2mean[index[i]]
    else:
      scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
  return np.tile(scores[:, None], [1, response_length]) * response_mask


def compute_gigpo_outcome_advantage(token_level_rewards, step_rewards, response_mask, anchor_obs,
                                    index, traj_index, epsilon=1e-6, step_advantage_w=1.0,
                                    mode="mean_norm"):
  remove_std = mode == "mean_norm"
  episode_adv = episode_norm_reward(token_level_rewards, response_mask, index, traj_index, epsilon, remove_std)
  groups = build_step_group(anchor_obs, index)
  step_adv = step_norm_reward(step_rewards, response_mask, groups, epsilon, remove_std)
  scores = episode_adv + step_advantage_w * step_adv
  return scores, scores


def verl_rows(w, rng):
  """verl-agent's row layout: one row per (trajectory, step), anchor obs = grid position array,
  uid / traj_uid strings, penalised last-token scores, penalised discounted step returns."""
  n = GROUPS * G
  b = n * T
  index = np.array([f"uid-{g}" for g in w["group_id"] for _ in range(T)], dtype=object)
  traj = np.array([f"traj-{i}" for i in range(n) for _ in range(T)], dtype=object)
  s = w["state_hash"].reshape(-1).astype(np.int64) - 1
  anchor_obs = np.empty(b, dtype=object)
  for r in range(b):
    anchor_obs[r] = np.array([s[r] // GRID, s[r] % GRID])
  resp_len = rng.integers(32, RESP + 1, b)
  mask = (np.arange(RESP)[None, :] < resp_len[:, None]).astype(np.float32)
  invalid = (~w["valid_action"]).reshape(-1).astype(np.float32)
  tlr = np.zeros((b, RESP), np.float32)
  ep_ret = np.repeat(w["reward"].sum(1), T)
  tlr[np.arange(b), resp_len - 1] = ep_ret - 0.1 * invalid
  g = np.zeros((n, T), np.float32)
  run = np.zeros(n, np.float32)
  for t in reversed(range(T)):
    run = w["reward"][:, t] + 0.95 * run
    g[:, t] = run
  step_rewards = g.reshape(-1) - 0.1 * invalid
  return dict(token_level_rewards=tlr, step_rewards=step_rewards, response_mask=mask,
              anchor_obs=anchor_obs, index=index, traj_index=traj)


def timeit(fn, repeats):
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return float(np.median(times)), times


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "credit_gigpo.json"))
  args = ap.parse_args()
  w = make_walks(0)
  batch = from_turns(w["reward"], w["valid"], w["group_id"], valid_action=w["valid_action"],
                     state_hash=w["state_hash"], next_hash=w["next_hash"])

  kernel = jax.jit(lambda b: gg.gigpo(b).turn)
  t0 = time.perf_counter()
  compiled = kernel.lower(batch).compile()
  compile_s = time.perf_counter() - t0
  ours = np.asarray(compiled(batch))
  ours_s, ours_all = timeit(lambda: compiled(batch).block_until_ready(), max(args.repeats, 20))

  # Materialising tokens: [2048, 50 * 512] (turn t owns tokens [512 t, 512 (t + 1))).
  turn_index = jnp.broadcast_to(jnp.repeat(jnp.arange(T, dtype=jnp.int32), RESP), (GROUPS * G, T * RESP))
  loss_mask = jnp.ones((GROUPS * G, T * RESP), jnp.float32)
  tok_kernel = jax.jit(lambda b, ti, lm: turn_to_token(gg.gigpo(b).turn, ti, lm))
  t0 = time.perf_counter()
  tok_compiled = tok_kernel.lower(batch, turn_index, loss_mask).compile()
  tok_compile_s = time.perf_counter() - t0
  tok_s, _ = timeit(lambda: tok_compiled(batch, turn_index, loss_mask).block_until_ready(), args.repeats)

  rows = verl_rows(w, np.random.default_rng(1))
  peer_out = compute_gigpo_outcome_advantage(**rows)[0]
  peer_s, peer_all = timeit(lambda: compute_gigpo_outcome_advantage(**rows), args.repeats)
  # Parity: the row advantage of verl-agent = ours at that (episode, turn).
  last_tok = rows["response_mask"].sum(1).astype(int) - 1
  peer_rows = peer_out[np.arange(peer_out.shape[0]), last_tok].reshape(GROUPS * G, T)
  max_diff = float(np.max(np.abs(peer_rows - ours)))
  del peer_out

  res = dict(
      benchmark="credit_gigpo", batch=dict(groups=GROUPS, group_size=G, turns=T, rows=GROUPS * G * T,
                                           response_tokens=RESP, grid=GRID),
      device=str(jax.devices()[0]), platform=platform.platform(), cpu_count=os.cpu_count(),
      ours_turn_level_s=ours_s, ours_turn_level_runs_s=ours_all, ours_compile_s=compile_s,
      ours_with_token_broadcast_s=tok_s, ours_token_compile_s=tok_compile_s,
      verl_agent_reimpl_s=peer_s, verl_agent_reimpl_runs_s=peer_all,
      speedup_turn_level=peer_s / ours_s, speedup_with_token_broadcast=peer_s / tok_s,
      max_abs_diff_vs_reimpl=max_diff,
      note="median wall time; compile excluded and reported separately; machine shared with other jobs",
  )
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as fh:
    json.dump(res, fh, indent=2)
  print(json.dumps({k: v for k, v in res.items() if not k.endswith("runs_s")}, indent=2))


if __name__ == "__main__":
  main()
