"""ReMax's greedy baseline rollout (credit/baseline.py): it is greedy, it starts each task from
the sampled rollout's initial state, and remax = return - greedy return of the same task; for a
JAX env (the compiled rollout) and a host env (the KeyRoom toy through its games' pool)."""
import dataclasses
import importlib.util
import os
import sys

import jax
import numpy as np
import pytest

from agent_rl import credit
from agent_rl.credit.baseline import attach_baseline_return, greedy_config, make_baseline_rollout
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.sampler import SamplerConfig

_spec = importlib.util.spec_from_file_location(
    "rollout_toy_for_credit", os.path.join(os.path.dirname(__file__), "..", "rollout", "toy.py"))
toy = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(toy)

ECFG = EpisodeConfig(sampler=SamplerConfig(temperature=1.0, max_tokens=6, stop_tokens=toy.STOP),
                     max_turns=3, group_size=3)
N_TASKS = 4


@dataclasses.dataclass
class World:
  pol: object
  params: object
  tasks: object
  key: jax.Array
  make: object  # EpisodeConfig -> the rollout of this world (compiled, or the host env's loop)
  baseline_fn: object
  sampled: object


def _jax_world():
  pol, params = toy.tiny_policy(seed=1)
  env = toy.GuessEnv()
  return pol, params, env, ECFG, toy.PIECES, toy.tasks(N_TASKS, key=7), (
      lambda cfg: make_rollout(pol, env, cfg, toy.PIECES))


def _host_world():
  from agent_rl.rollout.layout import chat_pieces
  from agent_rl.tokenizers.chat import stop_ids
  from tests.envs.host.helpers import TOK, _env, _policy
  pol, params = _policy()
  env = _env(n=N_TASKS * ECFG.group_size, fmt="answer")
  ecfg = dataclasses.replace(ECFG, sampler=dataclasses.replace(ECFG.sampler,
                                                               stop_tokens=stop_ids(TOK)))
  pieces = chat_pieces(TOK, env.instruction, "sys")
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(7), N_TASKS))
  return pol, params, env, ecfg, pieces, tasks, lambda cfg: env.runner(pol, cfg, pieces)


@pytest.fixture(scope="module", params=["jax", "host"])
def setup(request):
  pol, params, env, ecfg, pieces, tasks, make = {"jax": _jax_world, "host": _host_world}[
      request.param]()
  key = jax.random.PRNGKey(11)
  baseline_fn = make_baseline_rollout(pol, env, ecfg, pieces)
  sampled, _ = make(ecfg)(params, tasks, key)
  return World(pol, params, tasks, key, lambda: make(ecfg), baseline_fn, sampled)


def first_loss_index(batch):
  return np.argmax(np.asarray(batch.loss_mask) > 0, axis=1)


def test_baseline_rollout_is_greedy(setup):
  pol, params, tk, key, baseline_fn, sampled = (setup.pol, setup.params, setup.tasks, setup.key,
                                                setup.baseline_fn, setup.sampled)
  g = greedy_config(ECFG)
  assert g.sampler.greedy and g.group_size == 1 and g.gate is None and g.search is None
  greedy, _ = baseline_fn(params, tk, key)
  assert greedy.num_episodes == N_TASKS

  def argmax_hits(batch):  # teacher-forced: is each generated token the policy's argmax?
    logits, _ = pol.forward(pol.graphdef, params, batch.tokens, batch.position, batch.attention_mask)
    pred = np.argmax(np.asarray(logits)[:, :-1], axis=-1)
    m = np.asarray(batch.loss_mask)[:, 1:] > 0
    return (np.asarray(batch.tokens)[:, 1:] == pred)[m]

  hits = argmax_hits(greedy)
  assert hits.size > N_TASKS and hits.all()  # several generated tokens, every one the argmax
  assert not argmax_hits(sampled).all()  # the check tells temperature-1 sampling apart


def test_remax_subtracts_the_greedy_return_of_the_same_task(setup):
  params, tk, key, baseline_fn, sampled = (setup.params, setup.tasks, setup.key,
                                           setup.baseline_fn, setup.sampled)
  out, metrics = attach_baseline_return(sampled, baseline_fn, params, tk, key)
  greedy, _ = baseline_fn(params, tk, key)
  rew, val = np.asarray(sampled.reward, np.float64), np.asarray(sampled.valid)
  g_rew, g_val = np.asarray(greedy.reward, np.float64), np.asarray(greedy.valid)
  n, t = rew.shape
  b_task = [sum(g_rew[k, s] for s in range(t) if g_val[k, s]) for k in range(N_TASKS)]
  gid = np.asarray(sampled.group_id)
  assert list(gid) == [i // ECFG.group_size for i in range(n)]
  # Same initial state: the sampled episode's prompt equals its task's greedy prompt.
  fs, fg = first_loss_index(sampled), first_loss_index(greedy)
  for i in range(n):
    assert fs[i] == fg[gid[i]]
    np.testing.assert_array_equal(np.asarray(sampled.tokens)[i, :fs[i]],
                                  np.asarray(greedy.tokens)[gid[i], :fs[i]])
  want = np.zeros((n, t))
  for i in range(n):
    for s in range(t):
      if val[i, s]:
        want[i, s] = sum(rew[i, u] for u in range(s, t) if val[i, u]) - b_task[gid[i]]
  np.testing.assert_allclose(np.asarray(out.extras["baseline_return"]),
                             np.repeat(np.asarray(b_task)[gid][:, None], t, 1), atol=1e-6)
  np.testing.assert_allclose(np.asarray(credit.get("remax")(out).turn), want, atol=1e-5)
  np.testing.assert_allclose(float(metrics["remax/baseline_return"]), np.mean(b_task), atol=1e-6)
  assert not np.allclose(want, 0.0)  # the data exercises a nonzero advantage
  assert set(sampled.extras) <= set(out.extras)  # the env's own extras ride along


def test_attach_refuses_a_non_greedy_group_rollout(setup):
  params, tk, key, sampled = setup.params, setup.tasks, setup.key, setup.sampled
  grouped = setup.make()  # G = 3 episodes per task
  with pytest.raises(ValueError, match="make_baseline_rollout"):
    attach_baseline_return(sampled, grouped, params, tk, key)
  with pytest.raises(ValueError, match="baseline_return"):
    credit.get("remax")(sampled)
