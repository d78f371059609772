"""GRPO (or PPO) on ScienceWorld, the real simulator through the host bridge (Wang et al., 2022,
"ScienceWorld: Is your Agent Smarter than a 5th Grader?", arXiv:2203.07540).

ScienceWorld runs in a JVM (its jar ships in the wheel; Java 17), one per worker process,
kept across episodes. Tasks are (task name, variation); splits are ScienceWorld's own
train / dev / test variations. The adapter lists `info["valid"]`'s admissible actions after
each observation, the reward is the change of the task score (0-100; `env.host.score_scale`
0.01 makes an episode's return its final score / 100, on the scale of the invalid-action
penalty -0.1), success is the task's completion.

  bash launch/install.sh host        # scienceworld (and Java 17)
  python -m agent_rl.train --config=configs/scienceworld.py:tiny --workdir=/tmp/sciworld
  python -m agent_rl.train --config=configs/scienceworld.py:tiny,ppo --workdir=/tmp/sciworld_ppo

Variants: `tiny` (the three "find" tasks with ScienceWorld's `easy` simplifications, 8
variations each, 12 turns), `full` (all 30 tasks, every variation, Qwen2.5-1.5B-sized policy,
40 steps), `ppo` (a shared-trunk critic with GAE instead of GRPO).

`tiny` warm-starts on gold paths (48 demos drawn from the training variations; 30 SFT steps
of 8 whole episodes; every replay wins), then 10 GRPO iterations in minibatches of 6 episodes. Measured
in part (seed 0, 2026-12-03, beside other runs): held-out (dev variations) return -1.20 before
SFT (invalid actions), -0.02 after it, success 0.00; the RL phase ran ~160 s an iteration here
(12 turns of ~270-token observations, concatenated), so this tiny setting does not meet the
10-minute budget on this CPU and its RL result is not measured yet (README, "Not yet").
Papers report ScienceWorld's mean score over the test variations; the run logs success and
the score-delta return.
"""
from agent_rl.train.config import scaled_config

VARIANTS = dict(ppo=False)
TINY_TASKS = ("find-living-thing", "find-non-living-thing", "find-plant")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "host:scienceworld"
  c.env.host.admissible = True
  c.env.host.split, c.env.host.eval_split = "train", "dev"
  c.env.host.score_scale = 0.01  # the 0-100 score as a reward in [-1, 1]
  if "ppo" in args:
    c.model.critic = "shared"
    c.credit.name = "gae"
  else:
    c.credit.name = "grpo"
  if c.scale == "tiny":
    c.env.kwargs.tasks = TINY_TASKS
    c.env.kwargs.num_variations, c.env.kwargs.simplifications = 8, "easy"
    c.env.host.workers, c.env.host.obs_tokens = 2, 256
    c.rollout.num_tasks, c.rollout.group_size = 6, 4
    # The gold paths of these tasks are 5-12 commands (doors, rooms, focus, move to a box).
    c.rollout.max_turns, c.rollout.max_action_tokens = 12, 24
    # Whole episodes of up to 12 long observations (~3,000 tokens a row): 30 steps of 8.
    c.sft.steps, c.sft.batch_size, c.sft.num_demos = 30, 8, 48
    # Minibatches of 6 whole episodes (4 updates an iteration): 24 rows of ~3,300 tokens
    # reached 11.5 GB and were OOM-killed beside another run on the 24 GiB box.
    c.train.iterations, c.train.minibatch_episodes = 10, 6
    c.train.eval_every, c.train.ckpt_every = 5, 5
    c.eval.num_tasks, c.eval.k = 6, 1
  else:
    c.model.preset = "qwen2.5-1.5b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
    c.env.host.workers, c.env.host.obs_tokens = 32, 2048
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 40, 256
  return c
