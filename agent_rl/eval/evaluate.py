"""Evaluation on held-out task seeds: greedy success, and pass@k / avg@k from k samples.

Held-out tasks come from `config.eval.seed` (disjoint from the training stream, which
draws tasks from the run seed), so every evaluation of a run scores the same tasks.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from agent_rl.envs.tasks import eval_tasks
from agent_rl.metrics import to_host
from agent_rl.rollout.compiled import rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.sampler import SamplerConfig


def evaluate(policy, params, env, pieces, ecfg: EpisodeConfig, *, num_tasks: int, seed: int,
             k: int = 1, greedy: bool = True, place=lambda x: x,
             role_terms: Optional[Sequence[str]] = None, slice_tasks: int = 0) -> dict:
  """Metrics `eval/success` (greedy, or sampled when greedy=False), `eval/reward`, the env's
  `eval_extras` per episode (`eval/<key>`, extras_metrics), and with
  k > 1 `eval/pass@k` (any of k samples succeeds) and `eval/avg@k` (mean success over k).
  role_terms: a multi-agent env's per-role reward terms (`agents.role_terms(env)`): adds
  `eval/agent{k}/return`, role k's mean episode return in the greedy episodes.
  `place` lays the tasks out on the mesh (row-sharded when the count divides it). A host env
  evaluates on its `for_eval()` panel (config.env.host.eval_split). slice_tasks > 0 (it
  divides num_tasks): the panel rolls out that many tasks at a time (`config.eval.slice_tasks`:
  an evaluation's memory is one slice's; slice i samples with fold_in(key, i), so the sampled
  pass@k episodes differ from an unsliced panel's, greedy ones only where the env draws)."""
  env = env.for_eval() if callable(getattr(env, "for_eval", None)) else env
  tasks = eval_tasks(env, num_tasks, seed)
  run = lambda cfg, key: rollout_in_slices(policy, params, env, tasks, key, cfg, pieces,
                                           slice_tasks, place)
  key = jax.random.key(seed)
  out = {}
  g_cfg = dataclasses.replace(
      ecfg, group_size=1, gate=None, search=None,
      sampler=dataclasses.replace(ecfg.sampler, greedy=greedy))
  batch = run(g_cfg, key)
  succ = jnp.any(batch.success, axis=1)
  out["eval/success"] = jnp.mean(succ.astype(jnp.float32))
  out["eval/reward"] = jnp.mean(jnp.sum(batch.reward * batch.valid, axis=1))
  out.update(extras_metrics(batch, env, "eval"))
  if role_terms:
    from agent_rl.agents.rewards import agent_returns
    ret = agent_returns(batch, role_terms)
    out.update({f"eval/agent{a}/return": jnp.mean(ret[:, a]) for a in range(ret.shape[1])})
  if k > 1:
    s_cfg = dataclasses.replace(g_cfg, group_size=k,
                                sampler=dataclasses.replace(ecfg.sampler, greedy=False))
    batch = run(s_cfg, jax.random.fold_in(key, 1))
    s = jnp.any(batch.success, axis=1).reshape(num_tasks, k).astype(jnp.float32)
    out[f"eval/pass@{k}"] = jnp.mean(jnp.max(s, axis=1))
    out[f"eval/avg@{k}"] = jnp.mean(s)
  return out


def extras_metrics(batch, env, prefix: str) -> dict:
  """`<prefix>/<key>`: the mean per-episode sum of each info key the env names in
  `eval_extras` (e.g. the route env's worker calls), over valid turns."""
  return {f"{prefix}/{k}": jnp.mean(jnp.sum(batch.extras[k] * batch.valid, axis=1))
          for k in getattr(env, "eval_extras", ())}


def rollout_in_slices(policy, params, env, tasks, key, cfg: EpisodeConfig, pieces,
                      slice_tasks: int = 0, place=lambda x: x):
  """The episodes of `tasks` (leading dim T) in one rollout (slice_tasks 0), or `slice_tasks`
  tasks at a time (slice i with fold_in(key, i), one slice included; one compiled program,
  the slices the same size), joined in task order: an EpisodeBatch of T * group_size."""
  n = jax.tree.leaves(tasks)[0].shape[0]
  if not slice_tasks:
    return run_rollout(policy, params, env, place(tasks), key, cfg, pieces)[0]
  if n % slice_tasks:
    raise ValueError(f"config.eval.slice_tasks={slice_tasks} must divide the panel's {n} tasks")
  parts = [run_rollout(policy, params, env, place(jax.tree.map(lambda a: a[lo:lo + slice_tasks],
                                                               tasks)),
                       jax.random.fold_in(key, i), cfg, pieces)[0]
           for i, lo in enumerate(range(0, n, slice_tasks))]
  return jax.tree.map(lambda *a: jnp.concatenate(a), *parts)


def run_rollout(policy, params, env, tasks, key, cfg: EpisodeConfig, pieces):
  """The compiled rollout of a JAX env, or a host env's own loop (`env.rollout`: the pool
  and overlap of agent_rl/envs/host/text_env.py)."""
  own = getattr(env, "rollout", None)
  if callable(own):
    return own(policy, params, tasks, key, cfg, pieces)
  return rollout(policy, params, env, tasks, key, cfg, pieces)


def episode_config(c, tokenizer) -> EpisodeConfig:
  """The EpisodeConfig of `config.rollout` (shared by training, SFT replay and eval)."""
  r = c.rollout
  from agent_rl.tokenizers.chat import stop_ids  # host-only
  stops = stop_ids(tokenizer)
  sampler = SamplerConfig(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                          max_tokens=r.max_action_tokens, stop_tokens=stops)
  return EpisodeConfig(sampler=sampler, max_turns=r.max_turns, group_size=r.group_size,
                       history=r.history, window_turns=r.window_turns,
                       window_tokens=r.window_tokens if r.history == "windowed" else 0)


def evaluate_panels(c, policy, lm_params, setup, ecfg, place, variants=(), counterparts=()
                    ) -> dict:
  """The held-out evaluation of a policy LM's params (training and `train.evaluate` alike):
  the run's env, each env-kwargs variant `(name, env, pieces)` and each learned counterpart
  (`agents.counterparts.Counterpart`: the run's env, the other agents' weights swapped in).
  Multi-agent envs with role rewards add `.../agent{k}/return`."""
  from agent_rl.agents import counterparts as cps, role_terms  # agents/ imports the rollout
  panels = [("", setup.env, setup.pieces, lm_params)]
  panels += [(name, env, pieces, lm_params) for name, env, pieces in variants]
  panels += [(cp.name, setup.env, setup.pieces,
              cps.splice(setup.agents.mode, lm_params, cp.lm_params, int(c.eval.counterpart_agent)))
             for cp in counterparts]
  out = {}
  for name, env, pieces, p in panels:
    terms = role_terms(env) if setup.agents.num > 1 else None
    m = evaluate(policy, p, env, pieces, ecfg, num_tasks=c.eval.num_tasks, seed=c.eval.seed,
                 k=c.eval.k, greedy=c.eval.greedy, place=place, role_terms=terms,
                 slice_tasks=c.eval.get("slice_tasks", 0))
    out.update({k.replace("eval/", f"eval/{name}/", 1) if name else k: v for k, v in m.items()})
  return to_host(out)
