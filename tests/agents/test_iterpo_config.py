"""configs/iterpo_deal.py validates at start-up in every variant, before anything compiles:
the IterPO arm has its critic (the Q-function) and token-level Q targets on the real
DealLite env, the baseline is critic-free GRPO, and IterPO without a critic is refused naming
the field. The shrunk 2-iteration run of both arms is in
tests/train/test_configs.py."""
import importlib.util
import os

import pytest

from agent_rl import credit, envs
from agent_rl.train.config import validate
from tests.train.test_configs import CONFIGS, load

PATH = os.path.join(os.path.dirname(CONFIGS[0]), "iterpo_deal.py")


def _char_tokenizer():
  spec = importlib.util.spec_from_file_location(
      "envs_conftest_for_iterpo_config",
      os.path.join(os.path.dirname(__file__), "..", "envs", "conftest.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.CharTokenizer()


@pytest.mark.parametrize("arg", ["tiny", "tiny,grpo", "tiny,shared", "full"])
def test_every_variant_validates(arg):
  c = load(PATH, arg)
  validate(c)
  assert c.env.name == "deal_lite" and c.rollout.history == "windowed" and c.agents.mode == "shared"
  if "grpo" in arg:
    assert (c.credit.name, c.model.critic) == ("grpo", "none")
  else:
    assert c.credit.name == "iterpo"
    assert c.model.critic == ("shared" if "shared" in arg else "separate")
  env = envs.make(c.env.name, tokenizer=_char_tokenizer(), **dict(c.env.kwargs))
  needs = credit.check_inputs(c.credit.name, dict(c.credit.kwargs), env=env, env_name=c.env.name,
                              critic=c.model.critic != "none")
  assert needs.critic == (c.credit.name == "iterpo")


def test_comparison_arms_are_the_variants():
  spec = importlib.util.spec_from_file_location("iterpo_deal_cfg", PATH)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  comp = mod.COMPARISON
  assert comp.method == "IterPO fit first"
  q_policy = "IterPO fit first (Q from policy)"
  assert comp.baselines == ("multi-turn GRPO", "IterPO split", "IterPO", q_policy)
  assert dict(comp.claims) == {"IterPO split": 0, "IterPO": 0, q_policy: 0}  # ours, not the paper's
  cfg = lambda arm: mod.get_config("tiny," + comp.arms[arm])
  assert cfg("multi-turn GRPO").credit.name == "grpo"
  # fit first = the lagged arm plus the pre-fit; split = the lagged arm plus its two optimizers
  first, split, lagged = cfg("IterPO fit first"), cfg("IterPO split"), cfg("IterPO")
  assert (first.train.critic_prefit, split.train.critic_prefit, lagged.train.critic_prefit) == (4, 0, 0)
  assert split.optim.actor_critic_split and not lagged.optim.actor_critic_split
  for c in (first, split):
    assert c.credit.name == lagged.credit.name == "iterpo" and c.model.critic == "separate"
  # Q's decoder: random at tiny as the rows were measured, the SFT policy's copy in q_policy
  inits = [c.model.critic_init for c in (first, split, lagged, cfg(q_policy))]
  assert inits == ["random"] * 3 + ["policy"] and cfg(q_policy).train.critic_prefit == 4
  assert not comp.paper and not comp.paper_verified   # no numbers reachable: direction only


def test_iterpo_without_a_critic_is_refused_naming_the_field():
  c = load(PATH, "tiny")
  c.model.critic = "none"
  env = envs.make("deal_lite", tokenizer=_char_tokenizer())
  with pytest.raises(ValueError, match=r"'iterpo' needs a critic.*config.model.critic"):
    credit.check_inputs(c.credit.name, dict(c.credit.kwargs), env=env, env_name="deal_lite",
                        critic=False)
