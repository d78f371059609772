"""Shared test helpers for the ALFWorld tests: one set of generated games per pytest session.

Both test files build `ALFWorldGame(generated=True, cache_dir=<session base temp>/alfgen)`; the
adapter caches generated games on disk by (seed, settings), so the second file reuses the
first one's games instead of generating (and planning) them again.
"""
from __future__ import annotations

import os

GAMES_PER_FAMILY = 1
NUM_OBJECTS = 6


def alfworld_game(tmp_path_factory, **kwargs):
  from agent_rl.envs.host.alfworld import ALFWorldGame
  cache = tmp_path_factory.getbasetemp() / "alfgen"
  return ALFWorldGame(generated=True, games_per_family=GAMES_PER_FAMILY, num_objects=NUM_OBJECTS,
                      seed=0, cache_dir=str(cache), **kwargs)


def alfred_tw_config(data_root: str, max_steps: int = 50) -> dict:
  """The parts of ALFWorld's base_config.yaml that `AlfredTWEnv` reads, pointed at
  `data_root` (ALFWorld's own layout: json_2.1.1/{train,valid_seen,valid_unseen})."""
  from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH
  split = lambda s: os.path.join(data_root, "json_2.1.1", s)
  return {
      "env": {"goal_desc_human_anns_prob": 0.0, "task_types": [1, 2, 3, 4, 5, 6],
              "domain_randomization": False, "expert_type": "planner"},
      "dataset": {"data_path": split("train"), "eval_id_data_path": split("valid_seen"),
                  "eval_ood_data_path": split("valid_unseen"), "num_train_games": -1,
                  "num_eval_games": -1},
      "logic": {"domain": ALFRED_PDDL_PATH, "grammar": ALFRED_TWL2_PATH},
      "general": {"training_method": "dqn"},
      "rl": {"training": {"max_nb_steps_per_episode": max_steps}},
  }
