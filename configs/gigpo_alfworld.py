"""GiGPO vs GRPO on ALFWorld, the real engine through the host bridge (Feng et al., 2025,
"Group-in-Group Policy Optimization for LLM Agent Training", arXiv:2505.10978; ALGORITHMS.md
§2; ALFWorld: Shridhar et al., 2021, arXiv:2010.03768).

GiGPO's step groups need equal states across the G rollouts of a task: the ALFWorld adapter
keys states by a digest of the engine's state facts (agent_rl/envs/host/alfworld.py), so
`info["state_hash"]` is the true state, not the text. The admissible commands are listed
after each observation, as in verl-agent's ALFWorld prompt; an action is
`<answer>command</answer>`; reward is the score change (1 on success), success is `won`.

  bash launch/install.sh host        # alfworld (builds fast-downward), textworld
  python -m agent_rl.train --config=configs/gigpo_alfworld.py:tiny --workdir=/tmp/gigpo_alf
  python -m agent_rl.train --config=configs/gigpo_alfworld.py:tiny,grpo --workdir=/tmp/grpo_alf
  # the real games: alfworld-download on a machine with network, then
  ALFWORLD_DATA=~/alfworld python -m agent_rl.train --config=configs/gigpo_alfworld.py:full \
      --config.model.init_from=/path/to/Qwen2.5-1.5B-Instruct --workdir=...

Variants: `tiny` (games our generator writes from ALFWorld's own PDDL domain and grammar,
`generated=True`: one game per family per split, solved by ALFWorld's planner; 8 turns),
`full` (the user's ALFWORLD_DATA: train / valid_seen / valid_unseen; the paper's shape:
Qwen2.5-1.5B-Instruct, 16 tasks x group 8, 50 steps), `grpo` (the baseline), `rloo`, `ppo`.

Paper numbers [G: recalled from the GiGPO paper's ALFWorld table and not re-checked here]:
Qwen2.5-1.5B-Instruct, ALFWorld "All" success: GRPO ~73%, GiGPO ~86% [G]. Expected
direction: GiGPO > GRPO. No SFT warm start (host games have no solver demos in the run yet),
so at `tiny` a policy from scratch rarely solves a game: not measured yet (README, "Not yet").
"""
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import full_policy, gigpo_or_baseline

VARIANTS = dict(grpo=False, rloo=False, ppo=False)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "host:alfworld"
  c.env.host.admissible = True
  c.env.host.split = "train"
  c.env.host.eval_split = "valid_unseen"
  gigpo_or_baseline(c, args)
  c.sft.steps = 0
  c.log.episodes = 0  # host envs: episode rendering runs the compiled rollout
  c.rollout.history = "windowed"  # verl-agent's history_length 2
  c.rollout.window_turns = 2
  c.rollout.window_tokens = 0  # 0: what the prompt, the window and a turn need
  if c.scale == "tiny":
    c.env.kwargs.generated, c.env.kwargs.games_per_family = True, 1
    c.env.host.workers, c.env.host.obs_tokens = 2, 256
    c.rollout.num_tasks, c.rollout.group_size = 6, 4
    c.rollout.max_turns, c.rollout.max_action_tokens = 8, 24
    c.train.iterations, c.train.minibatch_episodes = 10, 24
    c.train.eval_every, c.train.ckpt_every = 5, 5
    c.eval.num_tasks, c.eval.k = 6, 1
  else:
    full_policy(c)
    c.env.host.workers, c.env.host.obs_tokens = 32, 2048
    c.rollout.max_turns, c.rollout.max_action_tokens = 50, 256
    c.rollout.window_tokens = 4096
  return c
