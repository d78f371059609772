"""Policy / value / KL / entropy / distillation / SFT losses (shared/ALGORITHMS.md §1.7–§1.11,
§4.9, §4.12).

    from agent_rl import losses
    loss, metrics = losses.get("vanilla")(logprobs, old_logprobs, advantages, mask,
                                          loss_agg_mode="token-mean", clip_ratio_high=0.28)
    losses.names()  # ['clip_cov', 'cispo', 'geo_mean', 'gpg', 'gspo', 'kl_cov', 'reinforce', ...]

Policy losses share one signature (see `losses.base`); importing this package registers them.
"""
from agent_rl.losses import cov, policy, turn_ratio  # noqa: F401  (registration side effects)
from agent_rl.losses.base import (AGG_MODES, LOSSES, Counts, agg_loss, entropy_from_logits,
                                  entropy_loss, get, mask_counts, masked_mean, names, register,
                                  token_logprobs)
from agent_rl.losses.distill import (hindsight_gap_advantages, logits_kl, logits_kl_loss,
                                     reverse_kl_advantage, sampled_kl_loss)
from agent_rl.losses.kl import (KL_ESTIMATORS, actor_loss, kl_loss,
                                kl_penalty)
from agent_rl.losses.sft import sft_loss, sft_loss_from_logits
from agent_rl.losses.turn_ratio import CLIP_NORMS
from agent_rl.losses.value import value_loss
