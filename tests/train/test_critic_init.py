"""A separate critic's decoder as RL starts (`model.critic_init`): "policy" copies the policy LM
RL starts from (after SFT or `model.init_from`; verl's critic.model.path is the actor's), with
the critic's own shardings and its own buffers; "random" keeps the seed's init. The value head
starts fresh either way."""
import jax
import pytest

from agent_rl.parallel.placement import make_placement
from agent_rl.train import phases
from agent_rl.train.config import validate
from agent_rl.train.run import build_run
from agent_rl.train.state import init_params
from tests.train.tiny import same_tree, tiny_config


def test_policy_init_copies_the_policy_rl_starts_from(tmp_path):
  c = tiny_config(credit="gae", critic="separate")
  c.model.num_heads, c.model.num_kv_heads = 4, 2  # kv heads split over tensor=2
  # Sharded (the one-device run is the random-init test below and every critic test).
  c.mesh.num_devices, c.mesh.fsdp, c.mesh.tensor = 4, 2, 2
  place = make_placement(c.mesh)
  with place.context():
    r = build_run(c, str(tmp_path), place)
    fresh = init_params(r.spec)
    seed_critic = jax.device_get(fresh["critic_lm"])
    head = jax.device_get(fresh["value_head"])
    # What SFT would hand over: a policy LM unlike the seed's init.
    fresh["lm"] = jax.tree.map(lambda x: x * 1.5 + 0.01, fresh["lm"])
    lm = jax.device_get(fresh["lm"])
    prog = phases.initial_progress(r, fresh)  # no SFT steps: straight to start_rl
    p = prog.state.params
    assert same_tree(p["critic_lm"], lm) and not same_tree(seed_critic, lm)
    assert same_tree(p["value_head"], head)  # a fresh value head
    want = jax.tree.leaves(r.spec.abstract_params())  # the jitted step's in_shardings
    got = jax.tree.leaves(p)
    assert [a.sharding for a in got] == [w.sharding for w in want]
    # The first update (which donates the state) trains the two apart: own buffers.
    out = phases.rl_batch(r, prog, 0)
    state, _ = r.rl_update(out.state, place.batch(out.rows), out.key, out.rows.tokens.shape[1])
    assert not same_tree(state.params["critic_lm"], state.params["lm"])
    r.ckpt.close()


def test_random_init_keeps_the_seeds_critic_and_bad_names_are_refused(tmp_path):
  c = tiny_config(credit="gae", critic="separate")
  c.model.critic_init = "random"
  place = make_placement(c.mesh)
  with place.context():
    r = build_run(c, str(tmp_path), place)
    fresh = init_params(r.spec)
    seed_critic = jax.device_get(fresh["critic_lm"])
    p = phases.initial_progress(r, fresh).state.params
    assert same_tree(p["critic_lm"], seed_critic) and not same_tree(p["critic_lm"], p["lm"])
    r.ckpt.close()
  c.model.critic_init = "sft"
  with pytest.raises(ValueError, match="config.model.critic_init: must be policy|random"):
    validate(c)
