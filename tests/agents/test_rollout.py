"""Multi-agent episodes: the acting agent follows the env (schedules, next_agent), each row is
sampled under its agent's weights (the learner's routed log-probs equal the rollout's), and the
host bridge gives the compiled loop's batch."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl import envs, models
from agent_rl.agents import params as P
from agent_rl.agents.routing import make_apply, rollout_policy
from agent_rl.models.lora import LoraConfig
from agent_rl.rollout.bridge import HostRollout, JaxHostEnv
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.tokenizers import ByteTokenizer
from agent_rl.train.learner import prepare
from agent_rl.credit import Credit
from agent_rl.train.policy import ActorCritic

TOK = ByteTokenizer()
SHORT = "Play."  # a short instruction: byte-level prompts are long
SAMPLER = SamplerConfig(temperature=1.0, max_tokens=6, stop_tokens=())
CFG = EpisodeConfig(sampler=SAMPLER, max_turns=4, group_size=2, history="windowed",
                    window_turns=1)


def _tasks(env, n):
  return jax.vmap(env.sample_task)(jax.random.split(jax.random.key(3), n))


# CI budget (2026-12-07: 24 s): a schedule and the per-task offset run in one case, ((), True).
@pytest.mark.parametrize("schedule, offset", [pytest.param((), False, marks=pytest.mark.slow),
                                              pytest.param((0, 1, 0), False,
                                                           marks=pytest.mark.slow),
                                              ((), True)])
def test_roles_env_schedules_the_acting_agent(schedule, offset):
  env = envs.make("roles", tokenizer=TOK, base="sokoban", roles=("left", "right", "third"),
                  schedule=schedule, offset_by_task=offset, base_kwargs={"max_steps": 50})
  pol, params, _ = _policy("shared", 3)
  batch, _ = make_rollout(pol, env, CFG, chat_pieces(TOK, SHORT))(
      params["lm"], _tasks(env, 4), jax.random.key(0))
  sched = schedule or (0, 1, 2)
  ag = np.asarray(batch.agent_id)
  for i in range(ag.shape[0]):
    start = int(np.flatnonzero([ag[i, 0] == s for s in sched])[0]) if offset else 0
    want = [sched[(start + t) % len(sched)] for t in range(ag.shape[1])]
    assert list(ag[i]) == want, (i, list(ag[i]), want)
  if offset:  # staggered: episodes start at different roles
    assert len(set(ag[:, 0])) > 1
  # every observation starts with the acting role's line
  seg = batch.segment_len
  text = TOK.decode([int(x) for x in np.asarray(batch.tokens[0, :seg]) if x != TOK.pad_id])
  assert f"You are the {env.roles[ag[0, 0]]}." in text


def test_roles_env_rejects_a_schedule_naming_an_unknown_role():
  with pytest.raises(ValueError, match=r"roles.schedule: agents \[2\] name no role"):
    envs.make("roles", tokenizer=TOK, base="sokoban", roles=("a", "b"), schedule=(0, 2))


def _policy(mode, k):
  lora = LoraConfig(rank=4, targets=("q", "v", "up")) if mode == "lora" else None
  cfg = models.get_preset("tiny", vocab_size=TOK.vocab_size, hidden=32, num_layers=1,
                          num_heads=2, num_kv_heads=1, head_dim=16, intermediate=64, lora=lora)
  make = lambda seed: ActorCritic(cfg, "none", logprob_chunk=0, rngs=nnx.Rngs(seed))
  graphdef, params = nnx.split(P.stacked_factory(make, mode, k, 0)())
  if mode == "lora":
    params = jax.tree_util.tree_map_with_path(
        lambda p, x: x + 0.3 * jax.random.normal(jax.random.key(len(str(p))), x.shape)
        if P.is_adapter(p) else x, params)
  lm_gd = nnx.split(nnx.merge(graphdef, params).lm)[0] if mode != "separate" else nnx.split(
      make(0).lm)[0]
  return rollout_policy(mode, cfg, lm_gd, k), params, graphdef


# separate: -m slow (2026-12-05 budget cut); the same rows-to-agent routing as lora, which stays.
@pytest.mark.parametrize("mode", ["lora", pytest.param("separate", marks=pytest.mark.slow)])
def test_rollout_logprobs_are_each_rows_agent_under_the_learner(mode):
  env = envs.make("deal_lite", tokenizer=TOK, max_turns=4)
  pol, params, ac_gd = _policy(mode, 2)
  batch, _ = make_rollout(pol, env, CFG, chat_pieces(TOK, SHORT))(
      params["lm"], _tasks(env, 3), jax.random.key(1))
  ag = np.asarray(batch.agent_id)
  valid = np.asarray(batch.valid)
  assert (ag[valid] == 0).any() and (ag[valid] == 1).any()  # both bargainers acted
  zero = jnp.zeros(batch.valid.shape, jnp.float32)
  mb = prepare(batch, Credit(turn=zero, returns=zero))
  stats = make_apply(mode, ac_gd)(params, mb.tokens, mb.position, mb.attention_mask,
                                            agent=mb.agent)
  m = np.asarray(mb.loss_mask) > 0
  assert m.sum() > 20
  np.testing.assert_allclose(np.asarray(stats.logprobs)[m], np.asarray(mb.old_logprobs)[m],
                             atol=1e-4)
  # routed to the wrong agent, the log-probs differ: the test can fail
  wrong = make_apply(mode, ac_gd)(params, mb.tokens, mb.position, mb.attention_mask,
                                            agent=1 - mb.agent)
  assert np.max(np.abs(np.asarray(wrong.logprobs)[m] - np.asarray(mb.old_logprobs)[m])) > 1e-2


def test_host_bridge_gives_the_compiled_multi_agent_batch():
  env = envs.make("deal_lite", tokenizer=TOK, max_turns=4)
  pol, params, _ = _policy("lora", 2)
  pieces = chat_pieces(TOK, SHORT)
  tasks, key = _tasks(env, 2), jax.random.key(5)
  ref, _ = make_rollout(pol, env, CFG, pieces)(params["lm"], tasks, key)
  got, _ = HostRollout(pol, JaxHostEnv(env), CFG, pieces)(params["lm"], tasks, key)
  for name in ("tokens", "loss_mask", "agent_id", "valid", "done", "reward"):
    np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(ref, name)),
                                  err_msg=name)
  np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(ref.logprobs), atol=1e-5)
  assert (np.asarray(ref.agent_id)[np.asarray(ref.valid)] == 1).any()
