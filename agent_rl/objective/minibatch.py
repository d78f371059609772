"""The learner's rows: what one jitted train step reads (built by `train.learner.prepare`)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax


class Minibatch(NamedTuple):
  """Token-level arrays the update needs, all `[B, L]`.

  Token t is predicted by the logits at t-1; `loss_mask[:, t]` marks policy-generated tokens;
  `old_logprobs[:, t]` is the behaviour log-prob of token t under the raw (temperature-1)
  policy; `sample_logprobs` the log-prob under the distribution actually sampled from
  (temperature / top-k / top-p applied), for the sampler importance correction.
  """
  tokens: jax.Array
  position: jax.Array
  attention_mask: jax.Array
  loss_mask: jax.Array
  turn_index: jax.Array
  old_logprobs: jax.Array
  advantages: jax.Array  # [B, L] token level
  returns: Optional[jax.Array] = None  # [B, L] value targets (critic)
  old_values: Optional[jax.Array] = None  # [B, L]
  ref_logprobs: Optional[jax.Array] = None  # [B, L]
  teacher_logprobs: Optional[jax.Array] = None  # [B, L] distillation teacher's, sampled tokens
  sample_logprobs: Optional[jax.Array] = None  # [B, L]
  agent: Optional[jax.Array] = None  # [B] i32: the row's acting agent (several agents' weights)
