"""The shared max-steps rule (envs.base.step_limit) against a plain-Python statement of it,
and the envs that count steps use it (truncated only when the budget ends a live episode)."""
import jax
import jax.numpy as jnp
import numpy as np

from agent_rl import envs
from agent_rl.envs.base import step_limit
from agent_rl.tokenizers import ByteTokenizer


def _py_step_limit(count, used, live, terminated, done, limit):
  """gym's TimeLimit, stated per step: a finished episode is frozen, a live one counts."""
  if not live:
    return count, done or terminated or count >= limit, False
  count += used
  return count, done or terminated or count >= limit, (not terminated) and count >= limit


def test_step_limit_matches_reference():
  rng = np.random.RandomState(0)
  n = 400
  count = rng.randint(0, 6, n).astype(np.int32)
  used = rng.randint(0, 3, n).astype(np.int32)
  live, term, done = (rng.rand(3, n) < 0.5)
  limit = 5
  got = jax.jit(jax.vmap(lambda *a: step_limit(*a, limit)))(count, used, live, term, done)
  got = [np.asarray(x) for x in got]
  assert got[0].dtype == np.int32
  for i in range(n):
    want = _py_step_limit(int(count[i]), int(used[i]), bool(live[i]), bool(term[i]), bool(done[i]),
                          limit)
    assert (int(got[0][i]), bool(got[1][i]), bool(got[2][i])) == want, i
  assert got[2].any() and (~got[2]).any()


def test_step_limited_envs_report_truncated_in_info():
  """Every env with a step budget emits `truncated`; a budget-ended episode says so."""
  tok = ByteTokenizer()
  for name, kw, budget in (("sokoban", dict(max_steps=2), 2), ("frozenlake", dict(max_steps=2), 2),
                           ("countdown", dict(max_turns=2), 2)):
    env = envs.make(name, tokenizer=tok, **kw)
    task = env.sample_task(jax.random.key(1))
    state, _ = env.reset(jax.random.key(0), task)
    bad = jnp.asarray(tok.encode("no answer here"), jnp.int32)
    action = envs.Text(bad, jnp.int32(bad.shape[0]))
    step = jax.jit(env.step)
    for t in range(budget):
      state, _, _, done, info = step(state, action)
      assert bool(info["truncated"]) == (t == budget - 1), (name, t)
      assert bool(done) == (t == budget - 1), (name, t)
