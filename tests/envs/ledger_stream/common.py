"""Shared env configuration and jitted helpers of the LedgerStream tests (one compile each)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text
from agent_rl.envs.ledger_stream import LedgerStream
from conftest import CharTokenizer

TOK = CharTokenizer()
A_LEN = 128
SMALL = dict(num_accounts=3, num_names=8, num_slots=3, num_chunks=3, chunk_events=2,
             num_questions=3, raw_window=1, max_ops=4, max_arg_bytes=112, max_bytes=160)


@functools.lru_cache(maxsize=4)
def make_env(**overrides) -> LedgerStream:
  return LedgerStream(tokenizer=TOK, **{**SMALL, **overrides})


def turns(strs, a_len=A_LEN) -> Text:
  toks = np.zeros((len(strs), a_len), np.int32)
  lens = np.zeros((len(strs),), np.int32)
  for i, s in enumerate(strs):
    ids = TOK.encode(s)[:a_len]
    toks[i, :len(ids)] = ids
    lens[i] = len(ids)
  return Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))


@functools.partial(jax.jit, static_argnums=0)
def vsample(env, keys):
  return jax.vmap(env.sample_task)(keys)


@functools.partial(jax.jit, static_argnums=0)
def vreset(env, tasks):
  n = tasks.events.shape[0]
  return jax.vmap(env.reset)(jax.random.split(jax.random.key(0), n), tasks)


@functools.partial(jax.jit, static_argnums=0)
def vstep(env, state, act):
  return jax.vmap(env.step)(state, act)


def sample(env, seed, n):
  return vsample(env, jax.random.split(jax.random.key(seed), n))


def row(tree, i):
  return jax.tree.map(lambda x: np.asarray(x[i]), tree)


def decode(obs, i) -> str:
  return TOK.decode(np.asarray(obs.tokens[i])[:int(obs.length[i])])
