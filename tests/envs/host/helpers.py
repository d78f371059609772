"""Helpers shared by the host-env tests (a module of its own: the test modules are imported
by pytest under their own names, so one test module importing another runs it twice)."""
import hashlib

import numpy as np
from flax import nnx

from agent_rl.envs.host.pool import GamePool
from agent_rl.envs.host.text_env import TextHostEnv
from agent_rl.envs.host.toy import KeyRoomGame
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.tokenizers import ByteTokenizer
from agent_rl.tokenizers.chat import stop_ids

TOK = ByteTokenizer()
EXACT = ("tokens", "loss_mask", "turn_index", "position", "attention_mask", "valid", "done",
         "success", "valid_action", "state_hash", "next_hash", "group_id", "episode_key",
         "reward", "fatal")
A = 48  # action tokens


def _actions(texts):
  tok = np.full((len(texts), A), TOK.pad_id, np.int32)
  length = np.zeros((len(texts),), np.int32)
  for i, t in enumerate(texts):
    ids = TOK.encode(t)[:A]
    tok[i, :len(ids)], length[i] = ids, len(ids)
  return tok, length


def _h(data: bytes) -> int:
  return int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "little")


def _policy():
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  cfg = get_preset("tiny", vocab_size=TOK.vocab_size, hidden=32, num_layers=1, num_heads=2,
                   num_kv_heads=1, head_dim=16, intermediate=64)
  graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
  return Policy.from_model(cfg, graphdef), params


def _cfg(history="concatenated", turns=3, group=2):
  return EpisodeConfig(sampler=SamplerConfig(temperature=1.0, max_tokens=6,
                                             stop_tokens=stop_ids(TOK)),
                       max_turns=turns, group_size=group, history=history, window_turns=1)


def _env(game=KeyRoomGame, n=6, workers=0, fmt="raw"):
  return TextHostEnv(GamePool(game, n, workers=workers), TOK, obs_len=24, action_format=fmt,
                     extras=("steps",))


def _same(a, b):
  for name in EXACT:
    assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name
  # log-probs: the same sampled tokens, scored in a half-size batch (XLA's CPU reductions
  # may order a matmul differently at another batch size): equal to float32 rounding.
  for name in ("logprobs", "sample_logprobs"):
    np.testing.assert_allclose(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)),
                               atol=1e-5, err_msg=name)
  assert a.extras.keys() == b.extras.keys()
  for k in a.extras:
    assert np.array_equal(np.asarray(a.extras[k]), np.asarray(b.extras[k])), k


def plain_and_overlapped(cfg, plain_env, env, key, n_tasks=4):
  """`((batch, metrics), (batch, metrics))`: the plain host loop on `plain_env` and the
  overlapped one on `env`, tasks 0..n_tasks-1, the same key and tiny policy."""
  from agent_rl.rollout.bridge import HostRollout
  from agent_rl.rollout.layout import chat_pieces
  from agent_rl.rollout.overlap import OverlapRollout
  pol, params = _policy()
  pieces = chat_pieces(TOK, env.instruction, "sys")
  tasks = np.arange(n_tasks, dtype=np.int32)
  return (HostRollout(pol, plain_env, cfg, pieces)(params, tasks, key),
          OverlapRollout(pol, env, cfg, pieces)(params, tasks, key))
