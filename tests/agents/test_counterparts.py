"""Learned counterparts (agents.counterparts): the splice against a plain loop over agents and
leaves, spec parsing, and the start-up refusals naming the field (the run-level panel is in
tests/agents/test_run.py)."""
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.agents.counterparts import parse, splice
from agent_rl.train.config import validate
from tests.agents.tiny import tiny_agents_config


def _tree(seed):
  r = np.random.default_rng(seed)
  return {"layers": {"0": {"q": jnp.asarray(r.normal(size=(2, 3, 4))),  # base (lora: shared)
                           "q_lora_a": jnp.asarray(r.normal(size=(2, 3, 2))),
                           "q_lora_b": jnp.asarray(r.normal(size=(2, 2, 4)))}},
          "embed": jnp.asarray(r.normal(size=(2, 5)))}


@pytest.mark.parametrize("mode", ["separate", "lora"])
@pytest.mark.parametrize("keep", [0, 1])
def test_splice_equals_a_loop(mode, keep):
  own, other = _tree(0), _tree(1)
  got = splice(mode, own, other, keep)
  for path, mine, theirs, out in (
      (("layers", "0", "q"), own["layers"]["0"]["q"], other["layers"]["0"]["q"], got["layers"]["0"]["q"]),
      (("layers", "0", "q_lora_a"), own["layers"]["0"]["q_lora_a"], other["layers"]["0"]["q_lora_a"],
       got["layers"]["0"]["q_lora_a"]),
      (("layers", "0", "q_lora_b"), own["layers"]["0"]["q_lora_b"], other["layers"]["0"]["q_lora_b"],
       got["layers"]["0"]["q_lora_b"]),
      (("embed",), own["embed"], other["embed"], got["embed"])):
    stacked = mode == "separate" or path[-1].endswith(("_lora_a", "_lora_b"))
    want = np.array(mine)
    if stacked:  # every agent but `keep` from the counterpart
      for k in range(want.shape[0]):
        if k != keep:
          want[k] = np.asarray(theirs)[k]
    np.testing.assert_array_equal(np.asarray(out), want, err_msg=str(path))


def test_parse():
  assert parse("runs/a", "f") == ("runs/a", None)
  assert parse("runs/a@12", "f") == ("runs/a", 12)
  assert parse("gs://b/run@3", "f") == ("gs://b/run", 3)
  for bad in ("", "runs/a@x", "@3", "runs/a@-1"):
    with pytest.raises(ValueError, match="config.f"):
      parse(bad, "f")


def test_start_up_refusals_name_the_field(tmp_path):
  c = tiny_agents_config("shared")
  c.eval.counterparts = {"x": str(tmp_path)}
  with pytest.raises(ValueError, match="eval.counterparts.*agents.mode"):
    validate(c)
  c = tiny_agents_config("lora")
  c.eval.counterparts = {"x": str(tmp_path)}
  with pytest.raises(ValueError, match="eval.counterparts.x.*not an agent_rl run directory"):
    validate(c)
  c.eval.counterparts, c.eval.variant_kwargs = {"fair": str(tmp_path)}, {"fair": {"opponent": "fair"}}
  with pytest.raises(ValueError, match=r"eval.counterparts.*\['fair'\]"):
    validate(c)
  c = tiny_agents_config("lora")
  c.eval.counterpart_agent = -1
  c.eval.counterparts = {"x": str(tmp_path)}
  with pytest.raises(ValueError, match="eval.counterpart_agent"):
    validate(c)


def test_counterparts_survive_a_saved_run_config(tmp_path):
  """`eval.counterparts` holds the user's panel names: a run's saved config reads back with
  them (export, evaluate and `model.init_from` read runs' configs)."""
  from agent_rl.train.pretrained import load_run_config, save_run_config
  c = tiny_agents_config("lora")
  c.eval.counterparts = {"team": "runs/team", "early": "runs/ibrl@10"}
  save_run_config(c, str(tmp_path))
  back = load_run_config(str(tmp_path))
  assert dict(back.eval.counterparts) == {"team": "runs/team", "early": "runs/ibrl@10"}
