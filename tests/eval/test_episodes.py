"""render_episodes against an independent reference: the env replayed on the host.

The rendered text of each episode must equal the text built from what the env itself
returns when stepped with the episode's actions (its initial observation, rewards, flags
and observations), for both history layouts.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.envs.base import Text
from agent_rl.eval.episodes import render_episodes
from agent_rl.rollout.compiled import episode_keys, reset_groups, rollout
from agent_rl.rollout.episode import HISTORY_MODES, action_length
from tests.rollout.sokoban_policy import sokoban_setup

N_TASKS, GROUP = 3, 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return sokoban_setup(str(tmp_path_factory.mktemp("tok")), N_TASKS, GROUP)


def reference_texts(tok, env, pieces, cfg, tasks, key, batch):
  """The expected text of every episode, from env.reset / env.step on the host."""
  stops = {tok.eos_id, tok.special("<|im_end|>")}
  reset_keys, _, group_id = episode_keys(key, N_TASKS, GROUP)
  state, obs = reset_groups(env, tasks, reset_keys, GROUP)
  step = jax.jit(env.step)  # one compile instead of op-by-op dispatch per turn
  a_len = action_length(env, cfg)
  seg = batch.segment_len
  dec = lambda ids: tok.decode([int(i) for i in ids]).strip("\n")
  out = []
  for i in range(N_TASKS * GROUP):
    s = jax.tree.map(lambda x: x[i], state)
    obs0 = list(np.asarray(obs.tokens[i])[:int(obs.length[i])])
    turns, ret, solved = [], 0.0, False
    for t in range(cfg.max_turns):
      # the action: the tokens the policy generated at turn t (loss-masked slots)
      sl = slice(t * seg, (t + 1) * seg) if seg else slice(None)
      row_ti, row_tok = np.asarray(batch.turn_index[i])[sl], np.asarray(batch.tokens[i])[sl]
      act = [int(x) for x in row_tok[row_ti == t]]
      if not act:
        break
      act = act[:-1] if act[-1] in stops else act
      a = np.full((a_len,), tok.pad_id, np.int32)
      a[:min(len(act), a_len)] = act[:a_len]
      s, o, r, d, info = step(s, Text(tokens=jnp.asarray(a), length=jnp.int32(min(len(act), a_len))))
      r, d, ok, va = float(r), bool(d), bool(info["success"]), bool(info["valid_action"])
      ret += r
      solved |= ok
      flags = [f"reward {r:+.3f}"] + (["invalid action"] if not va else []) + (
          ["success"] if ok else []) + (["done"] if d else [])
      turns.append(f"[turn {t}] action: {dec(act)!r}  ({', '.join(flags)})")
      if d:
        break
      if t < cfg.max_turns - 1:
        turns += ["[observation]", dec(np.asarray(o.tokens)[:int(o.length)])]
    n = sum(1 for x in turns if x.startswith("[turn"))
    head = (f"episode {i} (task {int(group_id[i])}): {'solved' if solved else 'not solved'}, "
            f"return {ret:.3f}, {n} turns")
    out.append("\n".join([head, "[prompt]", dec(list(pieces.first) + obs0)] + turns))
  return out


KEY = jax.random.PRNGKey(7)


def history_cfg(cfg, history):
  window = history != HISTORY_MODES[0]
  return dataclasses.replace(cfg, history=history, window_turns=1,
                             window_tokens=400 if window else 0)


@pytest.fixture(scope="module")
def batches(setup):
  tok, env, pol, params, cfg, tasks, pieces = setup
  return {h: rollout(pol, params, env, tasks, KEY, history_cfg(cfg, h), pieces)[0]
          for h in HISTORY_MODES}


@pytest.mark.parametrize("history", HISTORY_MODES)
def test_render_matches_env_replay(setup, batches, history):
  tok, env, pol, params, cfg, tasks, pieces = setup
  window = history != HISTORY_MODES[0]
  cfg, key, batch = history_cfg(cfg, history), KEY, batches[history]
  assert bool(batch.segment_len) == window
  got = render_episodes(batch, tok, num=N_TASKS * GROUP, pieces=pieces)
  want = reference_texts(tok, env, pieces, cfg, tasks, key, batch)
  assert got == want
  assert sum(t.count("[observation]") for t in got) >= 3  # the test sees multi-turn episodes
  # without pieces the chat markers stay, but every observation is still there
  raw = render_episodes(batch, tok, num=2)
  for r, w in zip(raw, want):
    for block in w.split("[observation]\n")[1:]:
      assert block.split("\n[turn")[0] in r


def test_render_selection_and_errors(setup, batches):
  tok, env, pol, params, cfg, tasks, pieces = setup
  batch = batches[HISTORY_MODES[0]]
  host = jax.device_get(batch)
  all_texts = render_episodes(host, tok, num=100, pieces=pieces)
  assert len(all_texts) == N_TASKS * GROUP
  assert render_episodes(host, tok, pieces=pieces, episodes=[4, 1]) == [all_texts[4], all_texts[1]]
  assert render_episodes(batch, tok, num=3, pieces=pieces) == all_texts[:3]
  with pytest.raises(ValueError, match=r"episode indices \[6\] outside \[0, 6\)"):
    render_episodes(batch, tok, episodes=[6])
  with pytest.raises(ValueError, match="num must be >= 0"):
    render_episodes(batch, tok, num=-1)
  with pytest.raises(TypeError, match="must be an EpisodeBatch"):
    render_episodes({"tokens": 0}, tok)


def test_held_out_episodes_are_the_tasks_evaluate_scores(setup):
  """The report's episodes are evaluate's greedy held-out episodes: their returns and
  successes average to evaluate's eval/reward and eval/success."""
  import re
  from agent_rl.eval.episodes import held_out_episodes
  from agent_rl.eval.evaluate import evaluate
  tok, env, pol, params, cfg, tasks, pieces = setup
  n = 4
  texts = held_out_episodes(pol, params, env, pieces, cfg, tok, num_tasks=n, seed=3, num=n)
  ev = evaluate(pol, params, env, pieces, cfg, num_tasks=n, seed=3, k=1, greedy=True)
  heads = [re.match(r"episode (\d+) \(task (\d+)\): (solved|not solved), return (\S+), (\d+) turns",
                    t) for t in texts]
  assert all(heads) and [int(h.group(2)) for h in heads] == list(range(n))
  np.testing.assert_allclose(np.mean([float(h.group(4)) for h in heads]),
                             float(ev["eval/reward"]), atol=1e-3)
  assert np.mean([h.group(3) == "solved" for h in heads]) == pytest.approx(float(ev["eval/success"]))
  assert held_out_episodes(pol, params, env, pieces, cfg, tok, num_tasks=n, seed=3, num=2) == texts[:2]
