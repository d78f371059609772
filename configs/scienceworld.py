"""GRPO (or PPO) on ScienceWorld, the real simulator through the host bridge (Wang et al., 2022,
"ScienceWorld: Is your Agent Smarter than a 5th Grader?", arXiv:2203.07540).

ScienceWorld runs in a JVM (its jar ships in the wheel; Java 17), one per game (two games cannot
share one: envs/host/jvm.py), kept across episodes in the game's worker process. Tasks are (task
name, variation); splits are ScienceWorld's own train / dev / test variations. The adapter lists
`info["valid"]`'s admissible actions after each observation, the reward is the change of the
task score (0-100; `env.host.score_scale` 0.01 makes an episode's return its final score / 100,
on the scale of the invalid-action penalty -0.1), success is the task's completion.

  bash launch/install.sh host        # scienceworld (and Java 17)
  python -m agent_rl.train --config=configs/scienceworld.py:tiny --workdir=/tmp/sciworld
  python -m agent_rl.train --config=configs/scienceworld.py:tiny,ppo --workdir=/tmp/sciworld_ppo

Variants: `tiny` (ScienceWorld's "find a non-living thing" task with its `easy`
simplifications, 32 variations per split, 9 turns), `full` (all 30 tasks, every variation,
Qwen2.5-1.5B-sized policy, 40 steps), `ppo` (a shared-trunk critic with GAE instead of GRPO).

`tiny` warm-starts on gold paths (48 demos drawn from the training variations; 30 SFT steps of
8 whole episodes; every replay wins), then 10 GRPO iterations in minibatches of 6 episodes, the
learner on rows cut after their longest filled token (`train.length_bucket`, train/buckets.py:
updates at 2,048 tokens a row here). Measured (seed 0, 2026-12-05, alone on the quiet 2-core
CPU, the JVMs with deterministic identity hashes and the resets ahead: envs/host/jvm.py,
pool.py): **6 min 41 s wall**, peak RSS 2.6 GB, ~16.3 s an RL iteration (~7.6 s the rollout,
whose reset wait fell from 6.9 s in the first iteration to 0.02-0.08 s); held-out (6 dev
variations, greedy) score-delta return -0.90 before SFT (invalid actions), 0.44 after it, 0.34
after RL, none won; training-panel rollouts' return 0.22 over the first 5 iterations, 0.27 over
the last 5. The same day's run before the hash fix (its JVMs listed some rooms' objects in
another order, so another corpus, tokenizer and game text): 6 min 16 s, 0.37 after SFT, 0.55
after RL, rollouts 0.23 -> 0.30; this row's RL effect on held-out return is not stable at this
size (6 greedy variations). The run of 2026-12-04 without the cut
(10 min 2 s with a mid-run evaluation this config no longer makes, ~28 s an iteration) read
0.63 after SFT (1 of 6 won) and 0.60 after RL, rollouts 0.22 -> 0.36: the cut is the same loss
up to float rounding, which 30 Adam steps and a greedy 6-variation evaluation amplify, and the
training code changed between the two dates too (the difference was not attributed further).
An earlier tiny (three "find" tasks, 12 turns of 256-token observations) ran ~160 s an
iteration on the shared box and did not fit the 10-minute budget.
Papers report ScienceWorld's mean score over the test variations; the run logs success and
the score-delta return.
"""
from agent_rl.train.config import scaled_config

VARIANTS = dict(ppo=False)
TINY_TASKS = ("find-non-living-thing",)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "host:scienceworld"
  c.env.host.admissible = True
  c.env.host.split, c.env.host.eval_split = "train", "dev"
  c.env.host.score_scale = 0.01  # the 0-100 score as a reward in [-1, 1]
  # The learner's rows cut after the longest filled row (train/buckets.py): the same loss.
  c.train.length_bucket = 256
  if "ppo" in args:
    c.model.critic = "shared"
    c.credit.name = "gae"
  else:
    c.credit.name = "grpo"
  if c.scale == "tiny":
    c.env.kwargs.tasks = TINY_TASKS
    c.env.kwargs.num_variations, c.env.kwargs.simplifications = 32, "easy"
    c.env.host.workers, c.env.host.obs_tokens = 2, 192
    c.rollout.num_tasks, c.rollout.group_size = 6, 4
    # The gold paths are 3-11 commands (doors, rooms, look around, focus on it, move it to
    # the box), 39 of the first 40 training variations' within 9.
    c.rollout.max_turns, c.rollout.max_action_tokens = 9, 24
    # Whole episodes of up to 9 observations (~2,000 tokens a row): 30 steps of 8.
    c.sft.steps, c.sft.batch_size, c.sft.num_demos = 30, 8, 48
    # Minibatches of 6 whole episodes (4 updates an iteration): 24 rows of ~3,300 tokens
    # (12 turns of 256) reached 11.5 GB and were OOM-killed beside another run on this box.
    c.train.iterations, c.train.minibatch_episodes = 10, 6
    c.train.eval_every, c.train.ckpt_every = 10, 5   # held-out after SFT and at the end
    c.eval.num_tasks, c.eval.k = 6, 1
  else:
    c.model.preset = "qwen2.5-1.5b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
    c.env.host.workers, c.env.host.obs_tokens = 32, 2048
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 40, 256
  return c
