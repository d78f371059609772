"""Start-up errors of multi-agent configs name the field, before anything compiles."""
import pytest

from agent_rl.agents.config import Agents, check_checkpoint, resolve
from agent_rl.train.config import validate
from tests.agents.tiny import tiny_agents_config


@pytest.mark.parametrize("edit, match", [
    (lambda c: setattr(c.agents, "mode", "pooled"), r"config.agents.mode: must be"),
    (lambda c: setattr(c.agents, "num", 1), r"config.agents.num: .*needs >= 2"),
    (lambda c: setattr(c.rollout, "history", "concatenated"), r"config.rollout.history:.*windowed"),
    (lambda c: setattr(c.model.lora, "rank", 0), r"config.model.lora.rank:"),
])
def test_bad_agent_configs_name_the_field(edit, match):
  c = tiny_agents_config("lora")
  edit(c)
  with pytest.raises(ValueError, match=match):
    validate(c)


def test_per_agent_weights_take_a_teacher_and_hindsight(tmp_path):
  """Distillation and hindsight route rows to agents (tests/agents/test_routing.py)."""
  (tmp_path / "config.json").write_text("{}")  # a teacher run directory
  c = tiny_agents_config("lora")
  c.distill.coef, c.distill.teacher = 0.5, str(tmp_path)
  validate(c)
  c.distill.coef, c.hindsight.mode = 0.0, "weight"
  validate(c)


@pytest.mark.parametrize("mode", ["lora", "separate"])
def test_per_agent_weights_take_a_kl_reference_and_a_critic(mode):
  c = tiny_agents_config(mode)
  c.loss.kl_coef, c.model.critic, c.credit.name = 0.1, "shared", "gae"
  validate(c)  # both route rows to agents (agents.routing.route; tests/agents/test_routing.py)


def test_shared_agents_allow_what_per_agent_weights_do_not():
  c = tiny_agents_config("shared")
  c.rollout.history, c.loss.kl_coef, c.model.critic = "concatenated", 0.1, "shared"
  validate(c)


class _Env:
  roles = ("a", "b")


class _Single:
  pass


def test_resolve_checks_the_env_roles():
  c = tiny_agents_config("separate")
  assert resolve(c, _Env()) == Agents("separate", 2)
  c.agents.num = 3
  with pytest.raises(ValueError, match=r"config.agents.num: 3 agents, but env .* has 2 roles"):
    resolve(c, _Env())
  c.agents.num = 0
  with pytest.raises(ValueError, match=r"config.agents.mode: 'separate' needs an env"):
    resolve(c, _Single())
  c.agents.mode, c.agents.num = "shared", 2
  with pytest.raises(ValueError, match=r"has no roles"):
    resolve(c, _Single())


def test_checkpoint_agents_must_match():
  check_checkpoint("", Agents("shared", 2), "d")            # older single-network checkpoint
  check_checkpoint("shared:1", Agents("shared", 1), "d")
  check_checkpoint("lora:2", Agents("lora", 2), "d")
  for have, run in (("lora:2", Agents("lora", 3)), ("shared:2", Agents("separate", 2)),
                    ("separate:2", Agents("shared", 2))):
    with pytest.raises(ValueError, match="checkpoint holds agents"):
      check_checkpoint(have, run, "d")


def test_eval_variant_kwargs_errors_name_the_panel(tmp_path):
  from agent_rl.train.setup import build, eval_variants
  c = tiny_agents_config("separate")
  c.eval.variant_kwargs = {"fair": {"opponent": "fair"}, "bad": {"opponent": "nobody"}}
  setup = build(c, str(tmp_path))
  with pytest.raises(ValueError, match=r"config.eval.variant_kwargs.bad:"):
    eval_variants(c, setup)
  c.eval.variant_kwargs = {"fair": {"opponent": "fair"}}
  (name, env, _), = eval_variants(c, setup)
  assert name == "fair" and env.opponent == "fair"
