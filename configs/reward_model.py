"""Reward models on Sokoban: an outcome RM (Bradley-Terry on ranked rollouts; Ouyang et al.
2022, arXiv:2203.02155) or a process RM (per-turn BCE on the env's box-on-target milestones;
Lightman et al. 2023, arXiv:2305.20050; Wang et al. 2024, arXiv:2312.08935), trained as a run:

  python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=runs/sokoban_tiny
  python -m agent_rl.reward.train --config=configs/reward_model.py:tiny --workdir=runs/rm \
      --config.rm.policy_run=runs/sokoban_tiny --config.model.init_from=runs/sokoban_tiny
  python -m agent_rl.reward.train --config=configs/reward_model.py:tiny,process --workdir=runs/prm \
      --config.rm.policy_run=runs/sokoban_tiny --config.model.init_from=runs/sokoban_tiny
  # offline pairs instead of rollouts: one {"prompt", "chosen", "rejected"} object a line
  python -m agent_rl.reward.train --config=configs/reward_model.py:tiny --workdir=runs/rm_pairs \
      --config.rm.source=pairs --config.rm.pairs_path=pairs.jsonl

Pairs: rollouts of the policy run (temperature 1, 16 tasks x 8 per batch, 6 training batches
and 2 held-out batches on other task seeds), every two members of a group whose env returns
differ form a pair. The RM shares the policy's tokenizer and architecture and starts from
its decoder (`model.init_from`); the head starts fresh. Without `rm.policy_run` the RM's
own initial decoder generates the rollouts (a random policy: few pairs, mostly format).
Then, in RL: `--config.reward.model=runs/rm --config.reward.shapers=reward_model`
(`agent_rl.reward.use`).

Variants: `tiny` (default; the RL tiny model's shape, 6x6 one-box Sokoban, 5 turns),
`process` (a PRM on Sokoban's milestones: per-step accuracy / AUC are reported), `dpo` /
`kto` (offline preference baselines: the policy itself trained on the same pairs with the
registered `dpo` / `kto` loss term against its frozen initial copy):
  python -m agent_rl.reward.offline --config=configs/reward_model.py:tiny,dpo --workdir=runs/dpo \
      --config.rm.policy_run=runs/sokoban_tiny --config.model.init_from=runs/sokoban_tiny
Expected (tiny): see README "Reward models" for the measured held-out numbers.
"""
from agent_rl.train.config import scaled_config

VARIANTS = dict(process=False, dpo=False, kto=False)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "sokoban"
  c.env.kwargs.dim_room = (6, 6)
  c.env.kwargs.num_boxes = 1
  c.env.kwargs.max_steps = 10
  c.rm.kind = "process" if "process" in args else "outcome"
  for kind in ("dpo", "kto"):  # offline preference baselines on the same pairs (reward.offline)
    if kind in args:
      c.rm.kind, c.loss.terms = kind, kind
      c.loss.term_kwargs[kind], c.loss.term_kwargs[f"{kind}_beta"] = 1.0, 0.1
  c.rm.steps, c.rm.batch_size, c.rm.lr, c.rm.eval_every = 300, 32, 3e-4, 100
  c.rm.rollout_batches, c.rm.held_out_batches = 6, 2
  c.sft.steps, c.train.iterations = 0, 0  # (RL fields unused by the RM run)
  return c
