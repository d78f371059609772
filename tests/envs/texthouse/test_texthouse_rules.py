"""TextHouse / TextLab rules against the plain-Python reference (reference.py).

Random tasks from both splits, random turns (admissible actions, random grammar actions,
case / whitespace variants, malformed text, out-of-vocabulary ids); every step compares the
decoded observation, reward terms, done, success, milestone and validity.
"""
import random

import jax
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.tasks import sample_tasks
from agent_rl.envs.texthouse import catalog as C
from conftest import CharTokenizer
from texthouse import reference
from texthouse.common import batched, decode, row, stack, turn_bytes, turns

GRAMMAR = list(C.all_actions())
WIDTH = 72


def random_turn(rng, ref):
  u = rng.random()
  if u < 0.6:                                       # progress-making verbs weighted up
    adm = ref.admissible()
    a = rng.choice(adm + [x for x in adm if x.split()[0] in ("take", "move", "heat", "cool", "clean", "use", "open")] * 3)
  elif u < 0.75:
    a = rng.choice(GRAMMAR)
  elif u < 0.85:                                     # still valid: case and outer whitespace
    a = rng.choice(ref.admissible())
    a = rng.choice(["  ", "\n", ""]) + "".join(c.upper() if rng.random() < 0.3 else c for c in a) + " \t"
  else:
    junk = ["", "go to", "take", "open  cabinet 1", "lookk", "go to cabinet 9", "move mug 1 in sinkbasin 1",
            "examine", "heat mug 1 with", "use", "<answer>look", "look</answer>", "||", "look || look"]
    a = rng.choice(junk)
    return rng.choice([f"<answer>{a}</answer>", a, f"<think>x</think><answer>{a}", f"<answer> {a} <"])
  return rng.choice([f"<answer>{a}</answer>", f"I will act. <answer>{a}</answer> done",
                     f"<answer>{a}</answer><answer>look</answer>"])


# Default configs and batch 32, so test_texthouse_solver's replays reuse these compilations.
@pytest.mark.parametrize("name,kwargs,steps", [("texthouse", {}, 28),
                                               ("texthouse", {"list_actions": True, "repeat_goal": True}, 12),
                                               ("texthouse", {"repeat_room": True, "repeat_goal": True}, 12),
                                               ("textlab", {}, 28)])
def test_rules_match_reference(name, kwargs, steps):
  tok = CharTokenizer()
  env = envs.make(name, tokenizer=tok, **kwargs)
  unseen = envs.make(name, tokenizer=tok, split="unseen", **kwargs)
  tasks = stack(sample_tasks(env, range(16)), sample_tasks(unseen, range(100, 116)))
  n = 32
  reset, step = batched(env)
  state, obs = reset(jax.random.split(jax.random.key(0), n), tasks)
  refs = [reference.RefHouse(row(tasks, i), env.stages, env.max_steps,
                            list_actions=env.list_actions, repeat_goal=env.repeat_goal,
                            repeat_room=env.repeat_room)
          for i in range(n)]
  for i in range(n):
    assert decode(tok, obs, i) == refs[i].reset_text()
  rng = random.Random(0)
  # Even envs follow the expert plan with harmless noise (so stages, milestones and success
  # are reached); odd envs walk at random.
  plans = [env.solve(row(tasks, i)) if i % 2 == 0 else None for i in range(n)]
  harmless = ["<answer>look</answer>", "<answer>inventory</answer>", "<answer>go to</answer>", "look"]
  seen_valid = seen_milestone = seen_done = seen_success = 0
  for t in range(steps):
    texts = []
    for i, r in enumerate(refs):
      if plans[i] is not None and plans[i] and rng.random() < 0.75:
        texts.append(f"<answer>{plans[i].pop(0)}</answer>")
      elif plans[i] is not None:
        texts.append(rng.choice(harmless))
      else:
        texts.append(random_turn(rng, r))
    act = turns(tok, texts, WIDTH)
    if t % 5 == 4:                                  # out-of-vocabulary ids in a few turns
      toks = np.asarray(act.tokens).copy()
      toks[::7, 3] = tok.vocab_size + 5
      act = act.replace(tokens=toks)
    state, obs, reward, done, info = step(state, act)
    for i, r in enumerate(refs):
      text, terms, rdone, rinfo = r.step(turn_bytes(tok, act.tokens[i], act.length[i]))
      ctx = f"env {i} step {t} turn {texts[i]!r}"
      assert decode(tok, obs, i) == text, ctx
      np.testing.assert_allclose(np.asarray(info["reward_terms"][i]), terms, err_msg=ctx)
      assert bool(done[i]) == rdone, ctx
      assert bool(info["success"][i]) == rinfo["success"], ctx
      assert bool(info["milestone"][i]) == rinfo["milestone"], ctx
      assert bool(info["valid_action"][i]) == rinfo["valid"], ctx
      np.testing.assert_allclose(float(reward[i]), np.dot(terms, env.reward_weights), rtol=1e-6)
      seen_valid += rinfo["valid"]
      seen_milestone += rinfo["milestone"]
      seen_done += rdone
      seen_success += terms[0]
  assert seen_valid > n * steps // 2 and seen_milestone > n
  assert seen_success >= (n // 4 if name == "texthouse" and steps > 20 else 0)
