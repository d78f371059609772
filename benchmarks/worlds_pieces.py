"""The agentic worlds' parts for benchmarks/worlds.py: breakdown pieces, trained tokenizers
and the plain-Python ports' timing.

Breakdowns are cumulative prefixes of each world's public step functions, each a batched
`(states, actions) -> (states, obs, reward, done, info)` whose outputs depend on what it
computed (so XLA keeps it): `parse`; `parse+dynamics` (TextHouse) or `parse+retrieve` and
`parse+retrieve+transition` (MiniShop); the full step adds rendering, so render = full -
the last prefix. Ports: tests/envs/<world>/reference.py stepped with the same solver plans.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.envs.base import Text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _out(states, tok, n):
  """A piece's step outputs: `tok [n]` int32 as a one-token observation."""
  obs = Text(tokens=tok.astype(jnp.int32)[:, None], length=jnp.ones((n,), jnp.int32))
  return states, obs, jnp.zeros((n,), jnp.float32), jnp.zeros((n,), bool), {}


def texthouse_pieces(env) -> dict:
  def parse(states, actions):
    verb, obj, rec, valid = jax.vmap(env.parse)(actions)
    return _out(states, verb * 7 + obj * 3 + rec + valid, actions.length.shape[0])

  def parse_dynamics(states, actions):
    verb, obj, rec, valid = jax.vmap(env.parse)(actions)
    moved, event, new, success = jax.vmap(env.dynamics)(states, jnp.where(valid, verb, -1), obj, rec)
    return _out(moved, new + success + event.kind, actions.length.shape[0])

  return {"parse": parse, "parse+dynamics": parse_dynamics}


def minishop_pieces(env) -> dict:
  def parse(states, actions):
    act = jax.vmap(env.parse)(actions)
    return _out(states, sum(jnp.sum(jnp.atleast_1d(x).reshape(actions.length.shape[0], -1), 1)
                            for x in jax.tree.leaves(act)), actions.length.shape[0])

  def parse_retrieve(states, actions):
    act = jax.vmap(env.parse)(actions)
    results, n = jax.vmap(env.retrieve)(act.terms)
    return _out(states, jnp.sum(results, 1) + n, actions.length.shape[0])

  def parse_retrieve_transition(states, actions):
    act = jax.vmap(env.parse)(actions)
    results, n = jax.vmap(env.retrieve)(act.terms)
    new, valid, bought = jax.vmap(env.transition)(states, act, results, n)
    return _out(new, valid + bought + new.page, actions.length.shape[0])

  return {"parse": parse, "parse+retrieve": parse_retrieve,
          "parse+retrieve+transition": parse_retrieve_transition}


def trained_tokenizer(name: str, kwargs: dict, vocab_size: int = 1024):
  """A sentencepiece tokenizer trained on the env's corpus, as a tiny run trains one."""
  from agent_rl.tokenizers import Tokenizer
  from agent_rl.tokenizers.train import train_tokenizer
  from agent_rl.train.setup import env_corpus
  path = os.path.join(tempfile.mkdtemp(), "tok.model")
  train_tokenizer(env_corpus(name, kwargs), path, vocab_size, hard_vocab_limit=False)
  return Tokenizer.load(path)


def _rows(tasks, n):
  return [jax.tree.map(lambda x: np.asarray(x)[i], tasks) for i in range(n)]


def port_timing(name: str, env, tasks, plans, *, steps: int = 2000) -> dict:
  """ns/step of the plain-Python port replaying the solver plans (reset when a plan ends)."""
  sys.path.insert(0, os.path.join(ROOT, "tests", "envs"))
  rows = _rows(tasks, len(plans))
  if name in ("texthouse", "textlab"):
    from texthouse.reference import RefHouse
    make = lambda t: RefHouse(t, env.stages, max_steps=env.max_steps)
    start = lambda ref, t: ref.reset_text()
    act = lambda ref, a: ref.step(f"<answer>{a}</answer>".encode())
  elif name == "minishop":
    from minishop.reference import PyMiniShop
    cat = env.catalogue
    goal = lambda t: dict(product=int(t.product), lead=int(t.lead), price_upper=int(t.price_upper),
                          attrs=[cat.attributes[a] for a in t.attrs if a >= 0],
                          options=[cat.values[v] for v in t.options])
    shop = PyMiniShop(cat, max_steps=env.max_steps, page_size=env.page_size,
                      num_results=env.num_results, list_actions=env.list_actions)
    make = lambda t: shop
    start = lambda ref, t: ref.reset(goal(t))
    act = lambda ref, a: ref.step(f"<answer>{a}</answer>")
  else:
    raise KeyError(f"no plain-Python port for {name!r}")
  done, i, k, t0 = 0, 0, 0, time.perf_counter()
  ref = make(rows[0])
  start(ref, rows[0])
  while done < steps:
    p = i % len(plans)
    act(ref, plans[p][k])
    done, k = done + 1, k + 1
    if k == len(plans[p]):
      i, k = i + 1, 0
      ref = make(rows[i % len(plans)])
      start(ref, rows[i % len(plans)])
  sec = time.perf_counter() - t0
  return {"steps_per_s": steps / sec, "ns_per_step": 1e9 * sec / steps}
