"""GRPO (or PPO) on ScienceWorld, the real simulator through the host bridge (Wang et al., 2022,
"ScienceWorld: Is your Agent Smarter than a 5th Grader?", arXiv:2203.07540).

ScienceWorld runs in a JVM (its jar ships in the wheel; Java 17), one per worker process,
kept across episodes. Tasks are (task name, variation); splits are ScienceWorld's own
train / dev / test variations. The adapter lists `info["valid"]`'s admissible actions after
each observation, the reward is the change of the task score (0-100, scaled to [0, 1] by the
adapter's delta), success is the task's completion.

  bash launch/install.sh host        # scienceworld (and Java 17)
  python -m agent_rl.train --config=configs/scienceworld.py:tiny --workdir=/tmp/sciworld
  python -m agent_rl.train --config=configs/scienceworld.py:tiny,ppo --workdir=/tmp/sciworld_ppo

Variants: `tiny` (the three "find" tasks with ScienceWorld's `easy` simplifications, 8
variations each, 10 turns), `full` (all 30 tasks, every variation, Qwen2.5-1.5B-sized policy,
40 steps), `ppo` (a shared-trunk critic with GAE instead of GRPO).

No SFT warm start (the adapter's gold paths, `expert()`, are not used by the SFT phase yet);
a tiny policy from scratch is not expected to complete tasks: not measured yet (README).
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
  if "ppo" in args:
    c.model.critic = "shared"
    c.credit.name = "gae"
  else:
    c.credit.name = "grpo"
  c.sft.steps = 0
  c.log.episodes = 0  # host envs: episode rendering runs the compiled rollout
  if c.scale == "tiny":
    c.env.kwargs.tasks = TINY_TASKS
    c.env.kwargs.num_variations, c.env.kwargs.simplifications = 8, "easy"
    c.env.host.workers, c.env.host.obs_tokens = 2, 256
    c.rollout.num_tasks, c.rollout.group_size = 6, 4
    c.rollout.max_turns, c.rollout.max_action_tokens = 10, 24
    c.train.iterations, c.train.minibatch_episodes = 10, 24
    c.train.eval_every, c.train.ckpt_every = 5, 5
    c.eval.num_tasks, c.eval.k = 6, 1
  else:
    c.model.preset = "qwen2.5-1.5b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
    c.env.host.workers, c.env.host.obs_tokens = 32, 2048
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 40, 256
  return c
