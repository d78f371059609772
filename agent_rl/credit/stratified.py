"""UMA task-stratified GRPO: memory turns and each question's QA turns normalised apart.

Paper: UMA, unified memory agent (ictnlp/unified-memory-agent, verl agent loop and
ray_trainer); spec in shared/ALGORITHMS.md §4.2.
"""
from __future__ import annotations

import jax.numpy as jnp

from agent_rl.credit.base import Credit, register
from agent_rl.credit.needs import Needs, extra
from agent_rl.credit.gigpo import normalize, row_groups
from agent_rl.credit.segments import dense_ids


@register("uma", needs=Needs(extras=("question_index",)))
def uma(batch, *, norm_by_std: bool = True, eps: float = 1e-6) -> Credit:
  """UMA turn advantages (ALGORITHMS.md §4.2).

  Inputs: reward, valid `[N, T]`, group_id `[N]`, and the extra
  `batch.extras["question_index"]` `[N, T]` i32: 0 on memory-chunk turns (`is_final = 0`),
  q in 1..Q on the QA turn of question q.
  - QA turn score: its own reward (the question's outcome).
  - Memory turn score: mean reward of the episode's QA turns (0 if it has none) plus the
    turn's own reward (its tool reward).
  - Groups (group_id, question_index): all memory turns of all rollouts of a task form one
    group (every turn counted), each question index one QA group across rollouts; GRPO
    (Bessel std, eps 1e-6; norm_by_std=False drops the std) within each.
  Singleton group: A = raw score (verl's GRPO); zero-variance groups give 0; padding 0.
  The KL-in-reward term of the recipe is the trainer's, not this kernel's.
  """
  n, t = batch.valid.shape
  valid = batch.valid
  q = extra(batch, "question_index", "uma").astype(jnp.int32)
  qa = valid & (q > 0)
  r = jnp.where(valid, batch.reward, 0.0)
  qa_mean = jnp.sum(jnp.where(qa, r, 0.0), 1, keepdims=True) / jnp.maximum(jnp.sum(qa, 1, keepdims=True), 1)
  score = jnp.where(qa, r, qa_mean + r)
  key, _ = dense_ids((row_groups(batch.group_id, t).reshape(-1), q.reshape(-1)), valid.reshape(-1))
  norm = "mean_std_norm" if norm_by_std else "mean_norm"
  a = normalize(score, key.reshape(n, t), n * t, valid, norm=norm, eps=eps, singleton="raw")
  adv = jnp.where(valid, a, 0.0)
  return Credit(turn=adv, returns=adv)
