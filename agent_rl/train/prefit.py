"""Fit the critic on the batch before its credit (`train.critic_prefit`).

The default reads the critic at rollout time, as verl does: the values that enter the credit
(GAE's V, IterPO's Q) come from the critic as the earlier iterations fitted it, and this
batch's returns train it in the same update that moves the policy. IterPO (Jiang et al. 2025,
arXiv 2511.21638) alternates the two instead: fit Q on the logged trajectories of the current
policy, then improve the policy against that Q. With `critic_prefit = n` each iteration does,
after the rollout and its reward shaping and before the credit the update uses:

    repeat n times:
      rows   = credit(batch)             # the value term's targets (IterPO: Monte-Carlo
                                         # return-to-go; GAE: A + V under the current values)
      state  = critic_update(state, rows) # the value term alone, train.epochs x minibatches;
                                         # the actor's optimizer holds (train/optim.py)
      batch.values = critic(state, batch) # re-scored with the fitted critic

then the credit and the update as usual. The policy LM does not move here (a shared critic's
value head trains, its trunk is the actor's), so the rollout's log-probs stay the update's old
log-probs. Each pass draws its minibatch order from `fold_in(update key, pass + 1)`: a function
of (seed, iteration), so a resumed run repeats it bit for bit.
"""
from __future__ import annotations

import time
from typing import Any

import jax

from agent_rl.train import buckets, learner


def prefit_passes(c) -> int:
  """`train.critic_prefit` (0 in configs saved before it existed)."""
  return int(c.train.get("critic_prefit", 0))


def fit_critic_first(run: Any, state: Any, batch: Any, key: jax.Array,
                     score_kw: dict) -> tuple[Any, Any, dict]:
  """(state with the critic fitted on `batch`, `batch` with its values re-scored, the last
  pass's update metrics as `prefit/<key>`, e.g. `prefit/loss/value`, and `time/prefit_s`);
  `state` and `batch` unchanged when the field is 0. `state` is donated: use the returned one.

  run: phases.Run (its `critic_update`, `credit_fn`, placement); batch: the shaped
  EpisodeBatch of this iteration; key: the iteration's update key; score_kw: the scoring
  passes' row cut (`chunks`, `length`) as the rollout-time critic pass used it.
  """
  n = prefit_passes(run.c)
  if not n:
    return state, batch, {}
  t0 = time.perf_counter()
  run.ckpt.wait()  # the update donates `state`, which the last async save may still read
  for j in range(n):
    rows, full = buckets.cut(learner.prepare_jit(batch, run.credit_fn(batch)), run.length_bucket)
    state, metrics = run.critic_update(state, run.spec.place.batch(rows),
                                       jax.random.fold_in(key, j + 1), full)
    batch = batch.replace(values=learner.critic_values(
        run.spec.graphdef, state.params, batch, mode=run.setup.agents.mode, **score_kw))
  jax.block_until_ready(state)  # its time, a share of time/rollout_s
  return state, batch, {**{f"prefit/{k}": v for k, v in metrics.items()},
                        "time/prefit_s": time.perf_counter() - t0}
