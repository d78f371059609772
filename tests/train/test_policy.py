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


@pytest.mark.parametrize("critic", ["shared", "separate"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_value_stats_are_the_critic_alone(critic, dropout):
  """The critic-only update's forward (`make_apply(values_only=True)`): the same values and the
  same critic gradients as the full forward (LoRA dropout masks included), no policy log-probs
  or entropy, a zero gradient on the policy LM (a shared trunk is stop-gradiented: the held
  actor discards it), and fewer FLOPs (XLA's cost analysis of the compiled gradient)."""
  from agent_rl.models.lora import LoraConfig
  from agent_rl.agents.params import path_names
  cfg = CFG.replace(lora=LoraConfig(rank=2, targets=("q", "v"), dropout=dropout)) \
      if dropout else CFG
  model = ActorCritic(cfg, critic, logprob_chunk=6, rngs=nnx.Rngs(1))
  graphdef, params = nnx.split(model)
  w = jnp.asarray(RNG.normal(size=TOK.shape), jnp.float32)
  key = jax.random.key(3)

  def value_loss(values_only):  # the value term, and the entropy metric the objective logs
    apply = make_apply(graphdef, values_only)

    def loss(p):
      stats = apply(p, TOK, POS, VALID, dropout_key=key)
      return jnp.sum(w * stats.values), {} if stats.entropy is None else {
          "loss/entropy": jnp.mean(stats.entropy)}
    return loss

  full = make_apply(graphdef)(params, TOK, POS, VALID, dropout_key=key)
  only = jax.jit(make_apply(graphdef, True))(params, TOK, POS, VALID, dropout_key=key)
  assert only.logprobs is None and only.entropy is None
  np.testing.assert_allclose(only.values, full.values, rtol=1e-5, atol=1e-6)  # jit vs eager
  g_full = jax.grad(value_loss(False), has_aux=True)(params)[0]
  g_only = jax.grad(value_loss(True), has_aux=True)(params)[0]

  def check(path, a, b):
    if path_names(path)[:1] == ["lm"]:
      assert not np.any(np.asarray(b)), path  # the policy LM: no gradient at all
    else:
      np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5, err_msg=str(path))
  jax.tree_util.tree_map_with_path(check, g_full, g_only)
  lm_full = [np.abs(np.asarray(x)).max() for x in jax.tree.leaves(g_full["lm"])]
  assert max(lm_full) > 0 if critic == "shared" else max(lm_full) == 0  # what is saved

  def flops(values_only):
    grad = jax.value_and_grad(value_loss(values_only), has_aux=True)
    cost = jax.jit(grad).lower(params).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return cost["flops"]
  assert flops(True) < 0.8 * flops(False)
  with pytest.raises(ValueError, match="critic"):
    ActorCritic(CFG, "none", rngs=nnx.Rngs(0)).value_stats(TOK, POS, VALID)
