"""A phase's own lr schedule (SFT: `sft.warmup_steps`, `sft.schedule`; a reward-model run:
`rm.warmup_steps`, `rm.schedule`): the lr each update applies,
read off AdamW's steps, against the warm-up + cosine formula of Hugging Face's
`get_cosine_schedule_with_warmup` (what verl's SFT trainer calls) written as a plain loop."""
import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agent_rl.train.config import base_config, validate
from agent_rl.train.optim import phase_lr, phase_optimizer, sft_lr, sft_optimizer


def _hf_cosine_with_warmup(lr: float, warm: int, total: int, step: int) -> float:
  """transformers.get_cosine_schedule_with_warmup's lambda (num_cycles 0.5) times lr."""
  if step < warm:
    return lr * step / max(1, warm)
  progress = (step - warm) / max(1, total - warm)
  return lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def _applied_lrs(opt: optax.GradientTransformation, steps: int) -> list[float]:
  """|update| of each step on a constant gradient 0.5: Adam's bias-corrected moments are then
  exactly g and g^2, so the update is lr_t * g / (|g| + eps) = lr_t (to 2e-8)."""
  params = {"w": jnp.zeros(())}
  state, out = opt.init(params), []
  for _ in range(steps):
    upd, state = opt.update({"w": jnp.asarray(0.5)}, state, params)
    out.append(float(-upd["w"]))
  return out


def _sft_cfg(**sft):
  c = base_config()
  c.optim.total_steps = 1000  # the RL schedule's horizon must not reach SFT's
  c.optim.warmup_steps = 7
  for k, v in sft.items():
    c.sft[k] = v
  validate(c)
  return c


@pytest.mark.parametrize("schedule,warm", [("cosine", 3), ("cosine", 0), ("constant", 4),
                                           ("constant", 0)])
def test_sft_updates_follow_their_own_warmup_and_schedule(schedule, warm):
  c = _sft_cfg(steps=12, lr=2e-3, warmup_steps=warm, schedule=schedule)
  want = [(_hf_cosine_with_warmup(2e-3, warm, 12, t) if schedule == "cosine" else
           2e-3 * min(1.0, t / warm) if warm else 2e-3) for t in range(12)]
  np.testing.assert_allclose(_applied_lrs(sft_optimizer(c), 12), want, rtol=1e-5, atol=1e-9)
  # what the run logs as sft/lr beside step t's loss (steps are 1-based there)
  np.testing.assert_allclose([sft_lr(c)(t + 1) for t in range(12)], want, rtol=1e-5, atol=1e-10)  # float32 schedule


def test_grad_accum_counts_updates_not_steps():
  c = _sft_cfg(steps=12, lr=1e-3, warmup_steps=2, schedule="cosine")
  c.optim.grad_accum = 3  # 4 updates over the 12 steps: warm-up 2 of them, cosine over 2
  want = [_hf_cosine_with_warmup(1e-3, 2, 4, u) for u in range(4)]
  got = _applied_lrs(sft_optimizer(c), 12)
  np.testing.assert_allclose(got[2::3], want, rtol=1e-5, atol=1e-9)  # each 3rd step applies
  assert got[0::3] == got[1::3] == [0.0] * 4
  np.testing.assert_allclose([sft_lr(c)(s) for s in (1, 3, 4, 12)],
                             [want[0], want[0], want[1], want[3]], rtol=1e-5, atol=1e-10)  # float32 schedule


def test_warmup_must_leave_steps_to_train():
  c = base_config()
  c.sft.steps, c.sft.warmup_steps = 10, 10
  with pytest.raises(ValueError, match=r"sft\.warmup_steps"):
    validate(c)


@pytest.mark.parametrize("schedule,warm", [("cosine", 2), ("constant", 3)])
def test_reward_model_updates_follow_their_own_schedule(schedule, warm):
  """A reward-model run (reward/train.py, reward/offline.py) trains at rm.lr on rm's own
  warm-up and schedule over rm.steps; the RL optimizer's warm-up and horizon (optim.*) do not
  reach it."""
  c = base_config()
  c.optim.total_steps, c.optim.warmup_steps, c.optim.schedule = 1000, 7, "cosine"
  c.rm.steps, c.rm.lr, c.rm.warmup_steps, c.rm.schedule = 10, 3e-4, warm, schedule
  validate(c)
  want = [(_hf_cosine_with_warmup(3e-4, warm, 10, t) if schedule == "cosine" else
           3e-4 * min(1.0, t / warm)) for t in range(10)]
  np.testing.assert_allclose(_applied_lrs(phase_optimizer(c, "rm"), 10), want, rtol=1e-5,
                             atol=1e-9)
  np.testing.assert_allclose([phase_lr(c, "rm")(t + 1) for t in range(10)], want, rtol=1e-5,
                             atol=1e-10)  # float32 schedule
