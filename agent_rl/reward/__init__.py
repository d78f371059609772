"""agent_rl.reward: learned reward models, trained as runs and used inside the RL loop.

- `model`: `RewardModel` (the policy's decoder + `models.RewardHead`) and the jitted scoring
  pass `score_batch(graphdef, params, batch) -> RewardScores(outcome [N], turns [N, T])`.
- `data`: rollout pairs ranked by env return, PRM step labels, a TFDS pairs dataset.
- `train`: `python -m agent_rl.reward.train --config=configs/reward_model.py:tiny --workdir=DIR`.
- `evals`: held-out pairwise accuracy / calibration, per-step accuracy / AUC.
- `use`: a reward-model run as a reward source of an RL run (shaper `reward_model`).
- `offline`: DPO / KTO of the policy on the same pairs (`python -m agent_rl.reward.offline`).
- `config`: start-up checks of `config.rm` / `config.reward.model*`, `STEP_LABELS`.
Preference losses (Bradley-Terry, PRM BCE, DPO, KTO) live in `agent_rl.losses.preference`.
"""
