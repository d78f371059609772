"""verl 0.9.1's `agg_loss` (verl/trainer/ppo/core_algos.py), re-written in torch from shared
ALGORITHMS.md §1.10 with verl's argument names, as the parity reference for
`agent_rl.losses.agg_loss`. verl is not installed here and no code is copied from it.

Each data-parallel rank calls it on its *local* rows with the *global* counts
(`batch_num_tokens`, `global_batch_size`) and `dp_size`; the gradients (so the losses) are then
averaged over ranks.
"""
import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # verl_F.masked_sum
  return (values * mask).sum()


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str, dp_size: int = 1,
             batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None) -> torch.Tensor:
  if loss_agg_mode == "token-mean":
    if batch_num_tokens is None:
      batch_num_tokens = loss_mask.sum()
    return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
  if loss_agg_mode == "seq-mean-token-sum":
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)
    seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()
    if global_batch_size is None:
      global_batch_size = seq_mask.sum()
    return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
  if loss_agg_mode == "seq-mean-token-mean":
    seq_tokens = torch.sum(loss_mask, dim=-1)
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_tokens + 1e-8)
    seq_mask = (seq_tokens > 0).float()
    if global_batch_size is None:
      global_batch_size = seq_mask.sum()
    return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
  if loss_agg_mode == "seq-mean-token-sum-norm":
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)
    seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()
    if global_batch_size is None:
      global_batch_size = seq_mask.sum()
    if loss_scale_factor is None:
      loss_scale_factor = loss_mask.shape[-1]
    return masked_sum(seq_losses, seq_mask) / global_batch_size / loss_scale_factor * dp_size
  raise ValueError(f"invalid loss_agg_mode: {loss_agg_mode}")
