"""agent_rl.objective: what the learner optimizes, assembled from registered parts.

- `terms`: the loss is a configured list of registered terms (`config.loss.terms`): policy
  loss, entropy, KL to the reference, value, distillation, SFT auxiliary, and the sampler
  importance correction. `build_objective(config)` sums the active ones.
- `shapers`: registered reward transforms applied to the EpisodeBatch before credit
  (`config.reward.shapers`): KL-in-reward with a fixed or adaptive controller, DAPO's
  overlong penalty, reward-term weights.
"""
from agent_rl.objective.minibatch import Minibatch
from agent_rl.objective.shapers import SHAPERS, apply_shapers, register_shaper
from agent_rl.objective.terms import TERMS, Term, TermInputs, build_objective, register_term
from agent_rl.objective import preference_terms, rm_shaper  # noqa: F401,E402  (dpo, kto; reward_model)

__all__ = ["Minibatch", "TERMS", "Term", "TermInputs", "build_objective", "register_term",
           "SHAPERS", "apply_shapers", "register_shaper"]
