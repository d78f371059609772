"""Test fixtures: a tiny policy (the project Transformer at toy size) and a toy JAX env.

`GuessEnv` follows the env contract (agent_rl/envs/base.py) with ragged observations and
episodes of different lengths, so masks, cursors and early stops are all exercised.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.envs.base import Text, fingerprint
from agent_rl.rollout.layout import PromptPieces
from agent_rl.rollout.policy import Policy

VOCAB = 48
STOP = (5, 6, 7)  # stands in for <|im_end|> / eos
PIECES = PromptPieces(first=(2, 10, 11, 12, 13), turn_prefix=(14, 15), header=(16, 17, 18),
                      pad_id=0)


def tiny_policy(seed: int = 0, vocab: int = VOCAB):
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  cfg = get_preset("tiny", vocab_size=vocab, hidden=32, num_layers=1, num_heads=2,
                   num_kv_heads=1, head_dim=16, intermediate=64)
  model = Transformer(cfg, rngs=nnx.Rngs(seed))
  graphdef, params = nnx.split(model)
  # Sharper logits than the init gives, so stop tokens and repeats actually happen.
  params = jax.tree.map(lambda x: x * 2.0 if x.ndim == 2 else x, params)
  return Policy.from_model(cfg, graphdef), params


@dataclasses.dataclass(frozen=True)
class GuessEnv:
  """Guess the secret token. Action = its first token; obs length depends on the last guess.

  reward 1 on success, -0.1 for an empty (invalid) action; done on success or when the
  first token is < 24 ("give up"), so episodes end at different turns.
  """
  obs_len: int = 5
  action_len: int = 6
  instruction: str = "guess the token"

  def sample_task(self, key):
    return {"secret": jax.random.randint(key, (), 24, VOCAB)}

  def _obs(self, secret, last, step):
    n = 1 + (last + step) % self.obs_len
    toks = 19 + (jnp.arange(self.obs_len) + last + secret) % 5
    return Text(jnp.where(jnp.arange(self.obs_len) < n, toks, 0).astype(jnp.int32), n.astype(jnp.int32))

  def reset(self, key, task):
    last = jax.random.randint(key, (), 0, 4)
    state = {"secret": task["secret"], "last": last, "step": jnp.int32(0)}
    return state, self._obs(task["secret"], last, 0)

  def state_hash(self, state):
    return fingerprint(state["secret"], state["last"])

  def step(self, state, action: Text):
    first = action.tokens[0]
    valid = action.length >= 1
    success = valid & (first == state["secret"])
    last = jnp.where(valid, first, state["last"])
    new = {"secret": state["secret"], "last": last, "step": state["step"] + 1}
    reward = success.astype(jnp.float32) - 0.1 * (~valid)
    done = success | (valid & (first < 24))
    info = {"success": success, "valid_action": valid, "state_hash": self.state_hash(new),
            "reward_terms": jnp.stack([success.astype(jnp.float32), -0.1 * (~valid)])}
    return new, self._obs(state["secret"], last, new["step"]), reward, done, info


def tasks(n: int, key=0):
  return jax.vmap(GuessEnv().sample_task)(jax.random.split(jax.random.PRNGKey(key), n))
