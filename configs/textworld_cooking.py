"""GRPO on TextWorld-Express CookingWorld, the real package through the host bridge (Jansen &
Cote, 2022, arXiv:2208.01174; CookingWorld is the TextWorld cooking game of the First
TextWorld Problems competition, re-implemented in Scala by TextWorld-Express).

The game runs in worker processes (`config.env.host.workers`, each keeping its JVM), at
`full` the admissible commands are listed after every observation (as verl-agent's ALFWorld
prompt does; `tiny` shows the game text only, below), an action is
`<answer>command</answer>`, the reward is the change of the game's score (a running total in
[0, 1]), success is `won`. Training panels are TWX's train fold seeds,
evaluation its dev fold.

  bash launch/install.sh host        # textworld-express (and Java 17 for its JVM)
  python -m agent_rl.train --config=configs/textworld_cooking.py:tiny --workdir=/tmp/twx_cook
  python -m agent_rl.train --config=configs/textworld_cooking.py:tiny,rloo --workdir=/tmp/twx_rloo
  python -m agent_rl.train --config=configs/textworld_cooking.py:tiny,hindsight --workdir=/tmp/twx_h

Variants: `tiny` (1 room, 1 ingredient, no distractors, no doors; TWX's gold paths are 8-12
commands: look around, take and read the cookbook, take the knife, the fridge, the recipe's
steps, prepare meal, eat meal), `full` (Qwen2.5-1.5B-sized policy, TWX's default
CookingWorld: several rooms, doors, distractors, 50 steps), `rloo` (the RLOO baseline instead
of GRPO), `hindsight` (a TRIAL-style hindsight teacher: the policy with the task's gold path
in its context rescores the sampled tokens and the gap reweights the GRPO advantages;
`config.hindsight`, `env.host.privileged_tokens`).

`tiny` shows the game text only (`env.host.admissible=False`; `full` lists the admissible
commands, as verl-agent's prompts do), warm-starts on the 64 training games' gold paths (60
SFT steps of 16; the host demos of data/host_demos.py, replayed by the host loop: 63 of 64
win), then 20 GRPO iterations; the learner runs on rows cut after their longest filled token
(`train.length_bucket=256`, train/buckets.py: the same loss).
Measured (seed 0, 2026-12-05, alone on the quiet 2-core CPU: **5 min 32 s wall**, peak RSS
4.1 GB; SFT ~1.5 s a step, an RL iteration ~8.5 s: rollout 7 s, update ~1.5 s at 768-1,024
of the 2,654 slots): held-out (dev fold, 16 games x 4) reward -1.20 before SFT, 0.06 after
it, 0.08 after RL (avg@4 0.016, pass@4 0.06, success 0.00); on the training fold the sampled
rollouts win 0.24 in the first 5 iterations and 0.29 in the last 5. The same run beside
another took 10 min 47 s with the same metrics, bit for bit.
Why the list is off at `tiny`: with it the run measured 17 min 55 s (2026-12-04; held-out
reward 0.06 after SFT, 0.12 after RL, rollouts 0.24 -> 0.37) because the list is most of each
observation (233 tokens at the median, p90 311, cut at `obs_tokens` = 192), so rows are
1,700-2,300 filled tokens and the cut gains 1.3-1.7x, where without it observations are 11
tokens at the median (look-around and cookbook turns up to 162), rows ~650 and the cut gains
7.2x (`benchmarks/length_buckets.py`). Both settings reach the same regime (the rendered
held-out episodes of both runs): the policy follows the plan's shape (look around, cookbook,
knife, fridge, prepare meal) but picks the recipe's verb and appliance wrongly (a "grill" step
cooked in the stove, a pork chop "cooked in toaster", a "chop" step skipped) or repeats
"prepare meal" before the ingredient is ready. The config is the recipe for the real
package at scale; at tiny scale it shows the path works end to end and learns on its own
games, not that it generalizes.
`tiny,hindsight` vs `tiny` (GRPO), seeds 0-2, 2026-12-05, one run at a time on the quiet
2-core CPU (8 min 7-30 s a hindsight run, peak RSS 8.0 GB in seed 0: an RL iteration ~16 s, the
teacher pass over rows with the 55-58-token plan in front and the gold paths once an iteration;
GRPO 5 min 37-45 s). The hindsight arm **collapses in every seed, as TRIAL does on MiniShop**
(configs/trial_minishop.py), the opposite of the method's claim: held-out reward after RL
-0.12 +- 0.16 (-0.30 / -0.08 / +0.01) against GRPO's 0.09 +- 0.01 (0.08 / 0.11 / 0.10), from
the same SFT policy per seed (0.06 / 0.07 / 0.16); training rollouts win 0.04 +- 0.03 in the
last 5 iterations (GRPO 0.35 +- 0.06), from 0.25-0.41 in the first 5; held-out success 0.00
in every run, avg@4 0.00 (GRPO 0.005). Seed 0: the gap is negative every iteration (-0.02 to
-0.10 nats a token: the network never read a plan in training) and the per-row weights raise
the gradient norm (0.7-2.4; GRPO's 0.2-0.5). GRPO seed 0 reruns the numbers above to the
digit. The variant is the recipe for a teacher that can read its privileged text (SFT on it
first), which this tiny policy is not.
"""
from agent_rl.train.config import scaled_config

VARIANTS = dict(rloo=False, hindsight=False)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "host:textworld_express"
  c.env.kwargs.game = "cookingworld"
  c.env.host.admissible = True
  c.env.host.split, c.env.host.eval_split = "train", "dev"
  c.credit.name = "rloo" if "rloo" in args else "grpo"
  if "hindsight" in args:  # TRIAL-style: the policy reading the task's gold path rescores
    c.hindsight.mode = "weight"  # (train/hindsight.py; the host text: TWX's gold path)
  # The learner's rows cut after the longest filled row (train/buckets.py): observations
  # rarely fill their obs_tokens and the cut is the same loss.
  c.train.length_bucket = 256
  if c.scale == "tiny":
    # The game text only (docstring): the list was most of each row, and the learner's cost.
    c.env.host.admissible = False
    c.env.kwargs.params = ("numLocations=1,numIngredients=1,numDistractorItems=0,"
                           "includeDoors=0,limitInventorySize=0")
    c.env.kwargs.num_tasks = 64
    c.env.host.workers, c.env.host.obs_tokens = 2, 192
    c.rollout.num_tasks, c.rollout.group_size = 8, 4
    # TWX's gold paths are 8-12 commands here (look around, take and read the cookbook, take
    # the knife, open and close the fridge, ..., prepare meal, eat meal): 12 turns fit them.
    c.rollout.max_turns, c.rollout.max_action_tokens = 12, 16
    # Whole episodes of 600-700 filled tokens (of 2,654 slots): an SFT step of 16 ~1.5 s,
    # an RL iteration ~16 s, most of it the rollout (docstring).
    c.sft.steps, c.sft.batch_size, c.sft.num_demos = 60, 16, 64
    c.train.iterations, c.train.minibatch_episodes = 20, 32
    c.eval.num_tasks = 16
  else:
    c.model.preset = "qwen2.5-1.5b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
    c.env.kwargs.num_tasks = None
    c.env.host.workers, c.env.host.obs_tokens = 16, 1024
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 50, 256
  return c
