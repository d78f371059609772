"""`make_apply` returns the policy's TokenStats from hidden states: equal to log-softmax of
the materialized logits (`ActorCritic.__call__`), whatever the chunk; critic values as the
value head on the right trunk."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import ModelConfig
from agent_rl.models.logprobs import shifted_logprobs
from agent_rl.train.policy import ActorCritic, TokenStats, make_apply

CFG = ModelConfig(vocab_size=37, hidden=16, num_layers=1, num_heads=2, num_kv_heads=1,
                  head_dim=8, intermediate=32)
RNG = np.random.default_rng(0)
TOK = jnp.asarray(RNG.integers(0, 37, (2, 11)), jnp.int32)
POS = jnp.broadcast_to(jnp.arange(11, dtype=jnp.int32), (2, 11))
VALID = jnp.asarray(RNG.random((2, 11)) < 0.9).at[:, 0].set(True)


@pytest.mark.parametrize("critic", ["none", "shared", "separate"])
def test_token_stats_match_materialized_logits(critic):
  model = ActorCritic(CFG, critic, logprob_chunk=6, rngs=nnx.Rngs(1))
  graphdef, params = nnx.split(model)
  stats = jax.jit(make_apply(graphdef))(params, TOK, POS, VALID)
  assert isinstance(stats, TokenStats)
  logits, values = jax.jit(lambda p: nnx.merge(graphdef, p)(TOK, POS, VALID))(params)
  lp, ent = shifted_logprobs(logits, TOK)
  np.testing.assert_allclose(stats.logprobs, lp, atol=1e-5)
  np.testing.assert_allclose(stats.entropy, ent, atol=1e-5)
  if critic == "none":
    assert stats.values is None and values is None
    with pytest.raises(ValueError, match="critic"):
      model.values(TOK, POS, VALID)
  else:
    np.testing.assert_allclose(stats.values, values, atol=1e-6)
    np.testing.assert_allclose(model.values(TOK, POS, VALID), values, atol=1e-5)
  # The materialized baseline (chunk 0) is the same function.
  g0, p0 = nnx.split(ActorCritic(CFG, critic, logprob_chunk=0, rngs=nnx.Rngs(1)))
  np.testing.assert_allclose(jax.jit(make_apply(g0))(p0, TOK, POS, VALID).logprobs,
                             stats.logprobs, atol=1e-5)


def test_logprob_chunk_is_validated():
  with pytest.raises(ValueError, match="logprob_chunk"):
    ActorCritic(CFG, logprob_chunk=-1, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="critic"):
    ActorCritic(CFG, "both", rngs=nnx.Rngs(0))
