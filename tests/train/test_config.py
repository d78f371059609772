"""Config validation: every bad field fails at start-up with the field's name."""
import pytest

from agent_rl.train.config import base_config, validate


def _cfg(**over):
  c = base_config()
  for path, v in over.items():
    node = c
    *parents, leaf = path.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = v
  return c


def test_base_config_is_valid():
  validate(base_config())


@pytest.mark.parametrize("field,value,needle", [
    ("model.preset", "gpt-9", "model.preset"),
    ("env.name", "chess", "env.name"),
    ("credit.name", "magic", "credit.name"),
    ("loss.name", "nope", "loss.name"),
    ("loss.agg_mode", "token-sum", "loss.agg_mode"),
    ("rollout.history", "both", "rollout.history"),
    ("rollout.top_p", 0.0, "rollout.top_p"),
    ("rollout.group_size", 0, "rollout.group_size"),
    ("train.minibatch_episodes", 7, "train.minibatch_episodes"),
    ("optim.lr", 0.0, "optim.lr"),
    ("optim.schedule", "linear", "optim.schedule"),
    ("model.critic", "twin", "model.critic"),
    ("model.dtype", "fp8", "model.dtype"),
    ("model.param_dtype", "float64", "model.param_dtype"),
])
def test_bad_values_name_the_field(field, value, needle):
  with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
    validate(_cfg(**{field: value}))


def test_wrong_type_override_fails_with_field_name():
  c = base_config()
  with pytest.raises(TypeError, match="lr"):
    c.optim.lr = "fast"


def test_model_dtype_overrides_reach_the_model_config():
  from agent_rl.train.setup import model_config
  c = _cfg(**{"model.dtype": "bfloat16", "model.param_dtype": "float32"})
  validate(c)
  m = model_config(c, vocab_size=64)
  assert (m.dtype, m.param_dtype) == ("bfloat16", "float32")
  assert model_config(base_config(), vocab_size=64).dtype == "float32"
