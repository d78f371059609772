"""Per-agent weights: the routed rollout policy and learner forward equal agent k's own model
on agent k's rows (lora: gathered adapters in one forward; separate: vmapped copies), and
gradients reach only the agents whose rows the loss reads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl import models
from agent_rl.agents import params as P
from agent_rl.agents.routing import make_apply, rollout_policy
from agent_rl.models.lora import LoraConfig
from agent_rl.rollout.policy import Policy
from agent_rl.train.policy import ActorCritic, make_apply as plain_apply

V, K, B, L = 48, 3, 6, 7


def _cfg(mode, kv_heads=1):
  lora = LoraConfig(rank=4, targets=("q", "v", "o", "up", "down")) if mode == "lora" else None
  return models.get_preset("tiny", vocab_size=V, hidden=32, num_layers=2, num_heads=2,
                           num_kv_heads=kv_heads, head_dim=16, intermediate=64, lora=lora)


def _stacked(mode, critic="none"):
  cfg = _cfg(mode)
  make = lambda seed: ActorCritic(cfg, critic, logprob_chunk=0, rngs=nnx.Rngs(seed))
  model = P.stacked_factory(make, mode, K, 0)()
  graphdef, params = nnx.split(model)
  if mode == "lora":  # LoRA B starts at zero: give every adapter a distinct non-zero delta
    params = jax.tree_util.tree_map_with_path(
        lambda p, x: x + 0.05 * jax.random.normal(jax.random.key(hash(str(p)) % 2**31), x.shape)
        if P.is_adapter(p) else x, params)
  return cfg, graphdef, params


def _inputs():
  rng = np.random.default_rng(0)
  tok = jnp.asarray(rng.integers(1, V, (B, L)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
  valid = jnp.asarray(np.arange(L)[None, :] < rng.integers(3, L + 1, (B, 1)))
  agent = jnp.asarray([0, 2, 1, 1, 0, 2], jnp.int32)
  return tok, pos, valid, agent


@pytest.mark.parametrize("mode", ["lora", "separate"])
def test_learner_rows_equal_each_agents_own_model(mode):
  cfg, graphdef, params = _stacked(mode)
  tok, pos, valid, agent = _inputs()
  got = make_apply(mode, graphdef)(params, tok, pos, valid, agent=agent)
  single_gd = nnx.split(ActorCritic(cfg, "none", logprob_chunk=0, rngs=nnx.Rngs(0)))[0]
  for b in range(B):
    k = int(agent[b])
    want = plain_apply(single_gd)(P.select_agent(mode, params, k), tok[b:b + 1], pos[b:b + 1],
                                  valid[b:b + 1])
    np.testing.assert_allclose(got.logprobs[b], want.logprobs[0], atol=2e-5, rtol=1e-5)
  # the agents really differ (else routing would be untested)
  other = make_apply(mode, graphdef)(params, tok, pos, valid, agent=(agent + 1) % K)
  assert float(jnp.max(jnp.abs(other.logprobs - got.logprobs))) > 1e-3


@pytest.mark.parametrize("mode", ["lora", "separate"])
def test_kl_reference_and_critic_rows_equal_each_agents_own_model(mode):
  """The rollout-time scoring passes of windowed rows (row n * T + t = turn t of episode n,
  acted by agent_id[n, t]): KL reference log-probs and critic values equal agent k's own
  single model on its rows."""
  from agent_rl.rollout.batch import from_turns
  from agent_rl.train import learner
  from agent_rl.train.policy import policy_token_stats
  cfg, graphdef, params = _stacked(mode, critic="shared")
  tok, pos, valid, agent = _inputs()  # B = 6 rows: 2 episodes x 3 turns of L tokens
  n, t = 2, B // 2
  batch = from_turns(np.zeros((n, t)), np.ones((n, t), bool), np.zeros(n, np.int32),
                     tokens_per_turn=L, agent_id=agent.reshape(n, t))
  batch = batch.replace(tokens=tok.reshape(n, t * L), position=pos.reshape(n, t * L),
                        attention_mask=valid.reshape(n, t * L), segment_len=L)
  lm_gd = nnx.split(nnx.merge(graphdef, params).lm)[0]
  ref = np.asarray(learner.reference_logprobs(lm_gd, params["lm"], batch, mode=mode)).reshape(B, L)
  val = np.asarray(learner.critic_values(graphdef, params, batch, mode=mode)).reshape(B, L)
  single = ActorCritic(cfg, "shared", logprob_chunk=0, rngs=nnx.Rngs(0))
  single_gd, single_lm_gd = nnx.split(single)[0], nnx.split(single.lm)[0]
  for b in range(B):
    p_k = P.select_agent(mode, params, int(agent[b]))
    lp, _ = policy_token_stats(single_lm_gd, p_k["lm"], tok[b:b + 1], pos[b:b + 1], valid[b:b + 1])
    np.testing.assert_allclose(ref[b], np.asarray(lp[0] * valid[b]), atol=2e-5, rtol=1e-5)
    v = nnx.merge(single_gd, p_k).values(tok[b:b + 1], pos[b:b + 1], valid[b:b + 1])
    np.testing.assert_allclose(val[b], np.asarray(v[0] * valid[b]), atol=2e-5, rtol=1e-5)
  # A slice is a different GEMM shape: XLA may block the sums differently (CI: 1.7e-6 at 3.41),
  # so the slices match to float32 rounding (rtol), not bit for bit.
  for chunks in (2, 3):  # train.microbatches: the same rows a slice at a time (lax.map)
    np.testing.assert_allclose(np.asarray(learner.reference_logprobs(
        lm_gd, params["lm"], batch, mode=mode, chunks=chunks)).reshape(B, L), ref,
        rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(learner.critic_values(
        graphdef, params, batch, mode=mode, chunks=chunks)).reshape(B, L), val,
        rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="train.microbatches: 4 forward slices do not divide"):
    learner.critic_values(graphdef, params, batch, mode=mode, chunks=4)
  plain = np.asarray(learner.reference_logprobs(lm_gd, P.select_agent(mode, params["lm"], 0,
                                                                      lm_only=True),
                                                batch)).reshape(B, L)
  assert np.abs(plain - ref).max() > 1e-3  # agents differ: the routing is what made it equal


@pytest.mark.parametrize("mode", ["lora", "separate"])
@pytest.mark.parametrize("critic", ["shared", "separate"])
def test_critic_only_forward_routes_like_the_full_one(mode, critic):
  """The critic-only update's forward (values_only: train.critic_warmup / critic_prefit) keeps
  each row under its acting agent's critic: the full forward's values, no log-probs."""
  _, graphdef, params = _stacked(mode, critic=critic)
  tok, pos, valid, agent = _inputs()
  full = make_apply(mode, graphdef)(params, tok, pos, valid, agent=agent)
  only = make_apply(mode, graphdef, values_only=True)(params, tok, pos, valid, agent=agent)
  assert only.logprobs is None and only.entropy is None
  np.testing.assert_allclose(np.asarray(only.values), np.asarray(full.values), atol=1e-6)


@pytest.mark.parametrize("mode", ["lora", "separate"])
def test_hindsight_rows_equal_each_agents_own_model_with_the_prefix(mode):
  """Hindsight rescoring with per-agent weights: each windowed row under its acting agent's
  model, the episode's privileged prefix first (hindsight.row_logprobs of agent k's params)."""
  from agent_rl.envs.base import Text
  from agent_rl.rollout.batch import from_turns
  from agent_rl.train import hindsight
  cfg, graphdef, params = _stacked(mode)
  tok, pos, valid, agent = _inputs()
  n, t = 2, B // 2
  batch = from_turns(np.zeros((n, t)), np.ones((n, t), bool), np.zeros(n, np.int32),
                     tokens_per_turn=L, agent_id=agent.reshape(n, t))
  batch = batch.replace(tokens=tok.reshape(n, t * L), position=pos.reshape(n, t * L),
                        attention_mask=valid.reshape(n, t * L), segment_len=L)
  priv = Text(jnp.asarray(np.random.default_rng(5).integers(1, V, (n, 4)), jnp.int32),
              jnp.asarray([4, 2], jnp.int32))
  lm_gd = nnx.split(nnx.merge(graphdef, params).lm)[0]
  got = np.asarray(hindsight.privileged_logprobs(lm_gd, params["lm"], batch, priv, mode=mode))
  got = got.reshape(B, L)
  single_lm_gd = nnx.split(ActorCritic(cfg, "none", logprob_chunk=0, rngs=nnx.Rngs(0)).lm)[0]
  for b in range(B):
    p_k = P.select_agent(mode, params["lm"], int(agent[b]), lm_only=True)
    e = b // t
    want = hindsight.row_logprobs(single_lm_gd, p_k, tok[b:b + 1], pos[b:b + 1], valid[b:b + 1],
                                  Text(priv.tokens[e:e + 1], priv.length[e:e + 1]))
    np.testing.assert_allclose(got[b], np.asarray(want[0]), atol=2e-5, rtol=1e-5)
  sliced = hindsight.privileged_logprobs(lm_gd, params["lm"], batch, priv, mode=mode, chunks=3)
  np.testing.assert_allclose(np.asarray(sliced).reshape(B, L), got, rtol=1e-5, atol=1e-6)
  plain = np.asarray(hindsight.privileged_logprobs(
      lm_gd, P.select_agent(mode, params["lm"], 0, lm_only=True), batch, priv)).reshape(B, L)
  assert np.abs(plain - got).max() > 1e-3  # agents differ: the routing is what made it equal


def test_teacher_routing_follows_the_teacher_runs_agents():
  from agent_rl.agents.config import Agents, teacher_mode
  run = Agents("lora", 2)
  assert teacher_mode(Agents("shared", 1), run, "t") == "shared"  # one network teaches all
  assert teacher_mode(Agents("shared", 2), run, "t") == "shared"
  assert teacher_mode(Agents("lora", 2), run, "t") == "lora"  # agent k teaches agent k
  with pytest.raises(ValueError, match=r"t: the teacher run holds agents 'separate:2'"):
    teacher_mode(Agents("separate", 2), run, "t")
  with pytest.raises(ValueError, match=r"holds agents 'lora:3'"):
    teacher_mode(Agents("lora", 3), run, "t")


# CI budget: the rollout's routing is checked end to end in CI (tests/agents/test_rollout.py:
# the behaviour log-probs equal the routed learner's, both modes); these unit checks: -m slow.
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lora", "separate"])
def test_rollout_prefill_and_decode_route_rows(mode):
  cfg, graphdef, params = _stacked(mode)
  lm_gd = nnx.split(nnx.merge(graphdef, params).lm)[0] if mode == "lora" else None
  single = nnx.split(ActorCritic(cfg, "none", logprob_chunk=0, rngs=nnx.Rngs(0)).lm)[0]
  lm_gd = lm_gd or single
  tok, pos, valid, agent = _inputs()
  pol = rollout_policy(mode, cfg, lm_gd, K)
  routed = pol.route(params["lm"], agent)
  cache = pol.cache(B, L + 2)
  rows = jnp.full((B,), L - 1, jnp.int32)
  last, _, cache = pol.prefill(pol.graphdef, routed, tok, pos, jnp.ones_like(valid), cache,
                               rows=rows)
  nxt = jnp.argmax(last, -1).astype(jnp.int32)
  step, _, _ = pol.decode_step(pol.graphdef, routed, nxt, jnp.full((B,), L, jnp.int32), cache)
  base = Policy.from_model(cfg, single)
  for b in range(B):
    lm_k = P.select_agent(mode, params, int(agent[b]))["lm"]
    c1 = base.cache(1, L + 2)
    l1, _, c1 = base.prefill(single, lm_k, tok[b:b + 1], pos[b:b + 1],
                             jnp.ones((1, L), bool), c1, rows=rows[b:b + 1])
    np.testing.assert_allclose(last[b], l1[0], atol=2e-5, rtol=1e-5)
    s1, _, _ = base.decode_step(single, lm_k, nxt[b:b + 1], jnp.full((1,), L, jnp.int32), c1)
    np.testing.assert_allclose(step[b], s1[0], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["lora", pytest.param("separate", marks=pytest.mark.slow)])
def test_gradients_reach_only_the_agents_whose_rows_the_loss_reads(mode):
  _, graphdef, params = _stacked(mode)
  tok, pos, valid, agent = _inputs()
  apply = make_apply(mode, graphdef)
  rows = agent != 2  # agent 2's rows carry no loss

  def loss(p):
    lp = apply(p, tok, pos, valid, agent=agent).logprobs
    return jnp.sum(jnp.where(rows[:, None] & valid, lp, 0.0))

  grads = jax.grad(loss)(params)
  norms = P.per_agent_norms(mode, grads, K)
  assert float(norms["grad/norm/agent0"]) > 0 and float(norms["grad/norm/agent1"]) > 0
  assert float(norms["grad/norm/agent2"]) == 0.0


def test_stacked_leaves_keep_names_with_a_replicated_agent_axis():
  _, _, params = _stacked("lora")
  leaves = jax.tree_util.tree_leaves_with_path(params, is_leaf=lambda x: isinstance(x, nnx.Variable))
  adapters = [(p, v) for p, v in leaves if P.is_adapter(p)]
  assert adapters
  for p, v in adapters:
    assert v.get_value().shape[0] == K
    names = v.get_metadata()["out_sharding"]
    assert names[0] is None and len(names) == v.get_value().ndim
  base = [v for p, v in leaves if not P.is_adapter(p)]
  assert all(v.get_metadata()["out_sharding"][0] is not None or v.get_value().ndim == 1
             for v in base)
  # agents start different (own seeds): adapter A of agent 0 != agent 1
  a = [v.get_value() for p, v in adapters if "lora_a" in jax.tree_util.keystr(p)][0]
  assert float(jnp.max(jnp.abs(a[0] - a[1]))) > 1e-3
  assert P.num_agents_in("lora", params) == K


@pytest.mark.parametrize("mode", ["lora", pytest.param("separate", marks=pytest.mark.slow)])
def test_stacked_params_are_born_sharded_and_route_on_a_mesh(mode):
  """8 fake devices, fsdp 2 x tensor 2 x data 2: the agent axis is replicated, the rest sharded
  by the rules, and the routed forward on the mesh equals the one-device forward."""
  from agent_rl.parallel import init_sharded
  from agent_rl.parallel.mesh import make_mesh
  from agent_rl.parallel.rules import DEFAULT_RULES, mesh_rules
  cfg = _cfg(mode, kv_heads=2)
  make = lambda seed: ActorCritic(cfg, "none", logprob_chunk=0, rngs=nnx.Rngs(seed))
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  graphdef, params = init_sharded(P.stacked_factory(make, mode, K, 0), mesh, DEFAULT_RULES)
  specs = {jax.tree_util.keystr(p): x.sharding.spec
           for p, x in jax.tree_util.tree_leaves_with_path(params) if P.is_stacked(mode)(p)}
  assert specs and all(len(s) == 0 or s[0] is None for s in specs.values())
  assert any(any(a is not None for a in s) for s in specs.values())  # sharded past the agent axis
  tok, pos, valid, agent = _inputs()
  with mesh_rules(mesh, DEFAULT_RULES):
    got = jax.jit(make_apply(mode, graphdef))(params, tok, pos, valid, agent=agent)
  host = jax.device_get(params)
  want = make_apply(mode, graphdef)(host, tok, pos, valid, agent=agent)
  np.testing.assert_allclose(got.logprobs, want.logprobs, atol=2e-5)


def test_frozen_agents_leave_the_separate_learner_forward():
  """With agents 1 and 2 frozen, the learner runs agent 0's copy only: agent 0's rows equal the
  full routed forward, and the gradient on the frozen copies is exactly zero."""
  _, graphdef, params = _stacked("separate")
  tok, pos, valid, agent = _inputs()
  full = make_apply("separate", graphdef)(params, tok, pos, valid, agent=agent)
  cut = make_apply("separate", graphdef, frozen=(1, 2))(params, tok, pos, valid, agent=agent)
  rows = np.asarray(agent) == 0
  np.testing.assert_allclose(np.asarray(cut.logprobs)[rows], np.asarray(full.logprobs)[rows],
                             rtol=1e-5, atol=1e-6)
  loss = lambda p: jnp.sum(make_apply("separate", graphdef, frozen=(1, 2))(
      p, tok, pos, valid, agent=agent).logprobs * rows[:, None])
  g = jax.grad(loss)(params)
  for k in (1, 2):
    assert all(float(jnp.max(jnp.abs(x))) == 0.0 for x in P.agent_slice("separate", g, k))
  assert any(float(jnp.max(jnp.abs(x))) > 0 for x in P.agent_slice("separate", g, 0))
  with pytest.raises(ValueError, match="every agent"):
    make_apply("separate", graphdef, frozen=(0, 1, 2))(params, tok, pos, valid, agent=agent)
