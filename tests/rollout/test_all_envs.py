"""Every registered env yields a valid EpisodeBatch through the compiled loop, in both
history modes, and the stored behaviour log-probs match a training forward."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl import envs, models
from agent_rl.envs.tasks import sample_tasks
from agent_rl.rollout import EpisodeConfig, Policy, SamplerConfig, chat_pieces, make_rollout
from agent_rl.tokenizers import ByteTokenizer
from agent_rl.models.logprobs import shifted_logprobs

ENV_KW = {"sokoban": dict(max_steps=3), "frozenlake": dict(max_steps=3), "bandit": {},
          "countdown": dict(max_numbers=3), "minishop": dict(max_steps=3, num_products=60),
          "texthouse": dict(max_steps=3), "calc_math": dict(max_digits=2, max_turns=3),
          "ledger_stream": dict(num_chunks=2, num_questions=1, chunk_events=2),
          "kb_search_qa": dict(num_entities=60, num_questions=8, max_turns=3), "textlab": dict(max_steps=3, repeat_goal=True, list_actions=True),
          # Multi-agent worlds (issue 21). With -m slow: `roles` wraps any env (its own tests:
          # tests/agents/test_rollout.py); calc_math_verify is calc_math's loop with long
          # byte-level observations (~100 s each layout; tests/envs/calc_math/test_roles.py).
          "deal_lite": dict(max_turns=3), "calc_math_verify": dict(max_digits=2, max_turns=3),
          "roles": dict(base="countdown", base_kwargs={"max_numbers": 3}),
          # Hera's router over Sokoban; with -m slow (its turns vs the base env:
          # tests/envs/test_route.py; compiled and trained: tests/agents/test_hera.py).
          "route": dict(base="sokoban", base_kwargs={"max_steps": 3})}
SLOW_ENVS = {"textlab", "roles", "calc_math_verify", "route"}


def test_every_registered_env_is_covered():
  assert set(envs.ENVS.names()) == set(ENV_KW)


# The windowed layout is env-agnostic (rollout/history.py); CI runs it on three worlds with short,
# long and page-sized observations, the rest with -m slow (2026-12-05 budget cut: ~15-23 s each).
WINDOWED_IN_CI = {"sokoban", "minishop"}  # texthouse-windowed: 2026-12-07 budget cut (16 s)


def _case(name, history):
  slow = name in SLOW_ENVS or (history == "windowed" and name not in WINDOWED_IN_CI)
  return pytest.param(name, history, marks=pytest.mark.slow if slow else (),
                      id=f"{name}-{history}")


# textlab is texthouse with chained stages (~100 s for both layouts): -m slow.
@pytest.mark.parametrize("name,history", [_case(n, h) for h in ("concatenated", "windowed")
                                          for n in sorted(ENV_KW)])
def test_rollout_batch_is_valid(name, history):
  tok = ByteTokenizer()
  env = envs.make(name, tokenizer=tok, **ENV_KW[name])
  cfg = models.get_preset("tiny", vocab_size=tok.vocab_size, hidden=32, num_layers=1,
                          num_heads=2, num_kv_heads=1, head_dim=16, intermediate=64)
  graphdef, params = nnx.split(models.Transformer(cfg, rngs=nnx.Rngs(0)))
  end = tok.special("<|im_end|>")
  ecfg = EpisodeConfig(sampler=SamplerConfig(max_tokens=6, stop_tokens=(end,)), max_turns=2,
                       group_size=2, history=history, window_turns=1)
  # A short instruction keeps the byte-level prompt small.
  pieces = chat_pieces(tok, "Play.")
  tasks = sample_tasks(env, [0, 1])
  batch, m = make_rollout(Policy.from_model(cfg, graphdef), env, ecfg, pieces)(
      params, tasks, jax.random.key(0))
  n, t = batch.reward.shape
  assert (n, t) == (4, 2)
  np.testing.assert_array_equal(batch.group_id, [0, 0, 1, 1])
  assert bool(jnp.all(batch.valid[:, 0]))  # every episode plays its first turn
  lm, ti = np.asarray(batch.loss_mask), np.asarray(batch.turn_index)
  assert np.all((lm > 0) <= (ti >= 0))  # generated tokens belong to a turn
  # reward terms (and any other info key) ride along as turn-level extras, 0 when padded
  assert {f"reward_terms/{k}" for k in env.reward_names} <= set(batch.extras)
  if hasattr(env, "max_steps") or hasattr(env, "max_turns"):
    assert "truncated" in batch.extras
  pad = ~np.asarray(batch.valid)
  for k, v in batch.extras.items():
    assert v.shape == (n, t) and not np.asarray(v)[pad].any(), k
  terms = sum(np.asarray(batch.extras[f"reward_terms/{k}"]) * w
              for k, w in zip(env.reward_names, env.reward_weights))
  np.testing.assert_allclose(terms, np.asarray(batch.reward), atol=1e-5)
  for i in range(n):  # tokens exist exactly for the turns that were played
    assert set(np.unique(ti[i][lm[i] > 0])) == set(np.flatnonzero(np.asarray(batch.valid[i])))
  # Behaviour log-probs == training forward on the stored tokens (temperature 1).
  tokens, pos, attn = batch.tokens, batch.position, batch.attention_mask
  if batch.segment_len:
    tokens, pos, attn = (x.reshape(-1, batch.segment_len) for x in (tokens, pos, attn))
  logits, _ = models.forward(graphdef, params, tokens, pos, attn)
  lp, _ = shifted_logprobs(logits, tokens)
  np.testing.assert_allclose(np.asarray(lp).reshape(lm.shape) * lm, np.asarray(batch.logprobs) * lm,
                             atol=1e-5)
