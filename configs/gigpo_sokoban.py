"""GiGPO vs GRPO on Sokoban (Feng et al., 2025, "Group-in-Group Policy Optimization for LLM
Agent Training", arXiv:2505.10978; ALGORITHMS.md §2).

GiGPO adds a step-level advantage from anchor-state groups (turns of the G episodes of a
task that start in the same state) to GRPO's episode-level advantage: A = A^E + w * A^S,
gamma = 0.95, mean_norm, invalid-action penalty 0.1.

  python -m agent_rl.train --config=configs/gigpo_sokoban.py:tiny --workdir=/tmp/gigpo
  python -m agent_rl.train --config=configs/gigpo_sokoban.py:tiny,grpo --workdir=/tmp/grpo

Expected: tiny (2-core CPU, ~10 min) — both learn from the SFT warm start; GiGPO's
advantage is denser (non-zero step credit where groups revisit states). full — the paper
reports GiGPO > GRPO on Sokoban / ALFWorld / WebShop with Qwen2.5-1.5B/7B; not reproduced
here (no accelerator).
"""
from agent_rl.train.config import scaled_config

VARIANTS = dict(grpo=False)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "sokoban"
  c.env.kwargs.dim_room = (6, 6)
  c.env.kwargs.num_boxes = 1
  c.env.kwargs.max_steps = 10
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = 0.2
  c.loss.kwargs.clip_ratio_high = 0.28
  if "grpo" in args:
    c.credit.name = "grpo"
  else:
    c.credit.name = "gigpo"
    c.credit.kwargs.gamma = 0.95
    c.credit.kwargs.step_weight = 1.0
    c.credit.kwargs.norm = "mean_norm"
  if c.scale == "full":
    c.model.preset = "qwen2.5-1.5b"
  return c
