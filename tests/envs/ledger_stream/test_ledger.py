"""The stream generator and QA against a plain-Python replay (reference.py): every stream is
valid, the final ledger (balances, names, closures) matches, and every question type's
answer matches for every subject."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.envs.ledger_stream import ledger as L
from ledger_stream import reference as R
from ledger_stream.common import make_env, row, sample

N = 48


@functools.partial(jax.jit, static_argnums=0)
def all_answers(env, final):
  """Answers of every question type for every subject id: `[types, P]` of L.Answer."""
  q = lambda t, s: L.answer(final, jnp.stack([t, s]), env.question_types, env.num_names)
  t, s = jnp.meshgrid(jnp.arange(len(env.question_types)), jnp.arange(env.num_names), indexing="ij")
  return jax.vmap(jax.vmap(q))(t.astype(jnp.int32), s.astype(jnp.int32))


@pytest.mark.parametrize("kw", [dict(), pytest.param(
    dict(num_accounts=4, num_names=6, num_chunks=4, chunk_events=4, max_ops=4, num_slots=4),
    marks=pytest.mark.slow)])
def test_streams_replay_and_answers(kw):
  env = make_env(**kw)
  tasks = sample(env, 0, N)
  kinds = set()
  for i in range(N):
    t = row(tasks, i)
    ev = t.events.tolist()
    kinds |= {e[0] for e in ev}
    accts = R.replay(ev, env.num_accounts, unit=env.unit)            # validity asserted inside
    assert ev[0][0] == L.OPEN
    f = t.final
    for k, acc in enumerate(accts):
      assert (f.name[k], f.balance[k], f.status[k], f.first[k]) == (
          acc["name"], acc["balance"], L.LIVE if acc["live"] else L.CLOSED, acc["first"])
    assert all(s == L.UNOPENED for s in f.status[len(accts):])
    answers = jax.tree.map(np.asarray, all_answers(env, jax.tree.map(jnp.asarray, f)))
    for qt, name in enumerate(env.question_types):
      ans = jax.tree.map(lambda x: x[qt], answers)
      for s in range(env.num_names):
        kind, gold = R.answer(accts, name, s)
        if kind == "int":
          assert not ans.is_name[s] and int(ans.value[s]) == gold, (i, name, s)
        else:
          assert ans.is_name[s] and set(np.flatnonzero(ans.accept[s])) == gold, (i, name, s)
    for qt, subj in t.questions.tolist():             # subjects are live accounts' names
      sub = L.QUESTIONS[env.question_types[qt]].subject
      live = [a for a in accts if a["live"]]
      if sub == "name":
        assert subj in {a["name"] for a in live}
      elif sub == "first":
        assert subj in {a["first"] for a in live}
      else:
        assert subj == -1
  assert kinds == set(range(6)), kinds                 # every event type occurs


def test_sampling_is_deterministic():
  env = make_env()
  a, b = sample(env, 3, N), sample(env, 3, N)
  jax.tree.map(np.testing.assert_array_equal, a, b)
  c = sample(env, 4, N)
  assert not np.array_equal(np.asarray(a.events), np.asarray(c.events))
