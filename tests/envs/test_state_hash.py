"""`env.state_hash(state)` is the fingerprint `info["state_hash"]` reports, so the rollout can
hash initial states consistently with later ones (GiGPO anchors, graph credit)."""
import jax
import jax.numpy as jnp
import pytest

from agent_rl import envs
from agent_rl.envs.base import Text
from agent_rl.tokenizers import ByteTokenizer


@pytest.mark.parametrize("name", ["sokoban", "frozenlake"])
def test_noop_step_keeps_the_state_hash(name):
  tok = ByteTokenizer()
  env = envs.make(name, tokenizer=tok)
  task = env.sample_task(jax.random.key(3))
  state, _ = env.reset(jax.random.key(0), task)
  bad = tok.encode("no answer here")  # malformed: an invalid no-op action
  action = Text(tokens=jnp.asarray(bad + [0] * (32 - len(bad)), jnp.int32), length=jnp.int32(len(bad)))
  new, _, _, _, info = env.step(state, action)
  assert not bool(info["valid_action"])
  assert int(info["state_hash"]) == int(env.state_hash(state)) == int(env.state_hash(new))
