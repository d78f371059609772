"""Shared env configuration and jitted helpers of the LedgerStream tests (one compile each)."""
import functools

import jax
import numpy as np

from agent_rl.envs.base import Text
from agent_rl.envs.ledger_stream import LedgerStream
import batched
from batched import vstep
from conftest import CharTokenizer

TOK = CharTokenizer()
A_LEN = 128
SMALL = dict(num_accounts=3, num_names=8, num_slots=3, num_chunks=3, chunk_events=2,
             num_questions=3, raw_window=1, max_ops=4, max_arg_bytes=112, max_bytes=160)


@functools.lru_cache(maxsize=4)
def make_env(**overrides) -> LedgerStream:
  return LedgerStream(tokenizer=TOK, **{**SMALL, **overrides})


def turns(strs, a_len=A_LEN) -> Text:
  return batched.texts(TOK, strs, a_len)


@functools.partial(jax.jit, static_argnums=0)
def vsample(env, keys):
  return jax.vmap(env.sample_task)(keys)


@functools.partial(jax.jit, static_argnums=0)
def vreset(env, tasks):
  n = tasks.events.shape[0]
  return jax.vmap(env.reset)(jax.random.split(jax.random.key(0), n), tasks)


def sample(env, seed, n):
  return vsample(env, jax.random.split(jax.random.key(seed), n))


def row(tree, i):
  return jax.tree.map(lambda x: np.asarray(x[i]), tree)


def decode(obs, i) -> str:
  return TOK.decode(np.asarray(obs.tokens[i])[:int(obs.length[i])])
