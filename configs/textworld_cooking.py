"""GRPO on TextWorld-Express CookingWorld, the real package through the host bridge (Jansen &
Cote, 2022, arXiv:2208.01174; CookingWorld is the TextWorld cooking game of the First
TextWorld Problems competition, re-implemented in Scala by TextWorld-Express).

The game runs in worker processes (`config.env.host.workers`, each keeping its JVM), the
admissible commands are listed after every observation (as verl-agent's ALFWorld prompt
does), an action is `<answer>command</answer>`, the reward is the change of the game's score
(a running total in [0, 1]), success is `won`. Training panels are TWX's train fold seeds,
evaluation its dev fold.

  bash launch/install.sh host        # textworld-express (and Java 17 for its JVM)
  python -m agent_rl.train --config=configs/textworld_cooking.py:tiny --workdir=/tmp/twx_cook
  python -m agent_rl.train --config=configs/textworld_cooking.py:tiny,rloo --workdir=/tmp/twx_rloo

Variants: `tiny` (1 room, 1 ingredient, no distractors, no doors: the recipe is read, the
ingredient taken, prepared and eaten in ~5-8 commands), `full` (Qwen2.5-1.5B-sized policy,
TWX's default CookingWorld: several rooms, doors, distractors, 50 steps), `rloo` (the RLOO
baseline instead of GRPO).

No SFT warm start: host games have no solver demos in the run yet (TWX has gold paths, used by
the adapter's `expert()`, not by the SFT phase). A tiny policy from scratch rarely finishes a
recipe, so expect success near 0 at `tiny` unless measured otherwise; the config is the recipe
for the real package at scale. Not measured yet (README, "Not yet").
"""
from agent_rl.train.config import scaled_config

VARIANTS = dict(rloo=False)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "host:textworld_express"
  c.env.kwargs.game = "cookingworld"
  c.env.host.admissible = True
  c.env.host.split, c.env.host.eval_split = "train", "dev"
  c.credit.name = "rloo" if "rloo" in args else "grpo"
  c.sft.steps = 0
  c.log.episodes = 0  # host envs: episode rendering runs the compiled rollout
  if c.scale == "tiny":
    c.env.kwargs.params = ("numLocations=1,numIngredients=1,numDistractorItems=0,"
                           "includeDoors=0,limitInventorySize=0")
    c.env.kwargs.num_tasks = 64
    c.env.host.workers, c.env.host.obs_tokens = 2, 192
    c.rollout.num_tasks, c.rollout.group_size = 8, 4
    c.rollout.max_turns, c.rollout.max_action_tokens = 8, 16
    c.train.minibatch_episodes = 32
    c.eval.num_tasks = 16
  else:
    c.model.preset = "qwen2.5-1.5b"
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
    c.env.kwargs.num_tasks = None
    c.env.host.workers, c.env.host.obs_tokens = 16, 1024
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_turns, c.rollout.max_action_tokens = 50, 256
  return c
