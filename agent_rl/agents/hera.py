"""Hera's imitation cold start: router labels from device/cloud agreement on cloud trajectories.

Hera (Zhang, Hu, Lin et al. 2026, "Hera: Learning Long-Horizon Coordination for Device-Cloud
Collaborative LLM Agents", arXiv:2605.24598, abstract): "The first stage casts step-level
routing as a supervised classification problem: the device agent is replayed on cloud
trajectories, with each state labeled by the agreement between device and cloud actions"; the
second stage is cost-aware RL that groups identical states across trajectories (here: the
run's RL phase on the route env, envs/route.py, with a step-group kernel such as `gigpo`).

`agreement_rows` (config `sft.plans="route_agreement"`) builds the SFT rows of stage 1:
1. the cloud worker (the route env's last worker) plays `sft.num_demos` demo tasks greedily
   with no router (`force`), one row per turn (windowed history);
2. the device worker reads the same rows: it agrees at a state when its greedy decode of that
   prompt is the cloud's action, i.e. its argmax equals the cloud's token at every generated
   position (greedy decoding along the same prefix, so one teacher-forced forward decides it);
3. the route env replays the cloud trajectories with the router's turns scripted: at each
   state `<answer>device</answer>` where the two agree, else `<answer>cloud</answer>`, then the
   cloud's own action tokens. The router's rows are the SFT targets; the workers' rows leave
   the loss (they are frozen: `agents.frozen`, agents/frozen.py).
Labels depend only on the frozen workers' weights, so a resumed SFT phase rebuilds the same rows.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agent_rl.agents.params import select_agent


def check(c: Any, env: Any) -> None:
  """`sft.plans="route_agreement"` needs the route env with its router and separate agents."""
  where = "config.sft.plans: 'route_agreement'"
  if c.env.name != "route" or getattr(env, "force", None):
    raise ValueError(f"{where} labels a router: needs env.name='route' without "
                     f"env.kwargs.force (got {c.env.name!r}, force={getattr(env, 'force', '')!r})")
  if c.agents.mode != "separate":
    raise ValueError(f"{where} reads the device and cloud workers' own weights: needs "
                     f"agents.mode='separate', got {c.agents.mode!r}")
  if c.rollout.history != "windowed":
    raise ValueError(f"{where} needs rollout.history='windowed' (one turn per row)")


def turn_agreement(lm_graphdef: Any, params: Any, tokens, positions, valid, loss_mask
                   ) -> jax.Array:
  """`[R]` bool: at every generated position (loss_mask) of each row, the model's argmax given
  the prefix equals the row's token (rows with no generated token: True)."""
  from agent_rl import models
  logits, _ = models.forward(lm_graphdef, params, tokens, positions, valid)
  hit = jnp.argmax(logits[:, :-1], axis=-1) == tokens[:, 1:]
  return jnp.all(hit | (loss_mask[:, 1:] == 0), axis=1)


_agreement = jax.jit(turn_agreement, static_argnums=0)


def agreement_plans(policy, lm_params, env, tasks, key, ecfg, pieces, tokenizer, lm_graphdef
                    ) -> tuple[np.ndarray, dict]:
  """Forced turn tokens `[N, 2T, A]` of the router-labelled cloud trajectories (module doc),
  and stats (agreement rate, cloud success). `ecfg.max_turns` = 2T (router turns included)."""
  from agent_rl.rollout.compiled import rollout
  from agent_rl.tokenizers.chat import turn_end_id
  cloud, device = len(env.workers), 1  # agent ids: 0 router, 1..W workers
  forced_env = dataclasses.replace(env, force=env.workers[-1])
  t_base = ecfg.max_turns // 2
  g_cfg = dataclasses.replace(ecfg, group_size=1, gate=None, search=None, max_turns=t_base,
                              sampler=dataclasses.replace(ecfg.sampler, greedy=True))
  batch, metrics = rollout(policy, lm_params, forced_env, tasks, key, g_cfg, pieces)
  seg = batch.segment_len
  rows = lambda x: x.reshape(-1, seg)
  mine = select_agent("separate", lm_params, device, lm_only=True)
  agree = np.asarray(_agreement(lm_graphdef, mine, rows(batch.tokens), rows(batch.position),
                                rows(batch.attention_mask), rows(batch.loss_mask)))
  n, a = batch.agent_id.shape[0], ecfg.sampler.max_tokens
  tok, lm = np.asarray(rows(batch.tokens)), np.asarray(rows(batch.loss_mask))
  valid = np.asarray(batch.valid)
  acted = np.asarray(batch.agent_id)
  end = turn_end_id(tokenizer)
  label = {w: tokenizer.encode(f"<answer>{w}</answer>") + [end] for w in env.workers}
  out = np.full((n, 2 * t_base, a), end, np.int32)
  labels = []
  for i in range(n):
    for t in range(t_base):
      if not valid[i, t]:
        break
      assert acted[i, t] == cloud, (i, t, acted[i, t])
      r = i * t_base + t
      gen = tok[r][lm[r] > 0]
      w = env.workers[device - 1] if agree[r] else env.workers[-1]
      labels.append(w == env.workers[device - 1])
      ids = label[w]
      if len(ids) > a:
        raise ValueError(f"config.rollout.max_action_tokens={a}: the router's turn "
                         f"'<answer>{w}</answer>' needs {len(ids)} tokens")
      out[i, 2 * t, :len(ids)] = ids
      out[i, 2 * t + 1, :len(gen)] = gen
  stats = {"device_agrees": float(np.mean(labels)) if labels else 0.0,
           "cloud_success": float(metrics["rollout/success"]), "states": len(labels)}
  return out, stats


def agreement_rows(c, setup, ecfg, policy, lm_params, lm_graphdef, seeds):
  """The SFT rows of Hera's stage 1 (module doc) on the demo tasks `seeds` (the run checked
  the setting at start-up: `check`)."""
  from agent_rl.data.scripted import scripted_policy
  from agent_rl.envs.tasks import sample_tasks
  from agent_rl.rollout.compiled import rollout
  from agent_rl.train.sft import _rows_of
  tasks = sample_tasks(setup.env, seeds)
  key = jax.random.key(0)
  forced, st = agreement_plans(policy, lm_params, setup.env, tasks, key, ecfg, setup.pieces,
                               setup.tokenizer, lm_graphdef)
  g_cfg = dataclasses.replace(ecfg, group_size=1, gate=None, search=None,
                              sampler=dataclasses.replace(ecfg.sampler, greedy=True))
  batch, m = rollout(scripted_policy(setup.model_cfg.vocab_size), jnp.asarray(forced),
                     setup.env, tasks, key, g_cfg, setup.pieces)
  print(f"Hera router labels: {st['states']} states of {len(seeds)} cloud trajectories (cloud "
        f"success {st['cloud_success']:.3f}), device agrees at {st['device_agrees']:.3f}; "
        f"replayed success {float(m['rollout/success']):.3f}", flush=True)
  return _rows_of(batch)
