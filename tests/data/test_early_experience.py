"""Implicit world modeling on early experience (data/early_experience.py; Zhang et al. 2025):
the alternatives, the next observations they lead to (against the game played by hand in this
process, in-process and across worker processes), the rows, the config checks and a run."""
import json
import os

import jax
import numpy as np
import pytest

from agent_rl.data.early_experience import (IWM_INSTRUCTION, Transition, alternatives,
                                            iwm_rows)
from agent_rl.data.world_model import game_state_text
from agent_rl.envs.host.pool import GamePool
from agent_rl.envs.host.text_env import TextHostEnv
from agent_rl.envs.host.text_rules import reset_seed
from agent_rl.envs.host.toy import KeyRoomGame
from agent_rl.envs.tasks import sample_tasks
from agent_rl.rollout.compiled import episode_keys
from agent_rl.rollout.layout import chat_pieces
from agent_rl.tokenizers import ByteTokenizer
from tests.train.tiny import host_config, host_demos

TOK = ByteTokenizer()


def test_alternatives_are_other_admissible_commands_drawn_uniformly():
  adm = ["go east", "take key", "open door", "go west", "look"]
  seen = {a: 0 for a in adm}
  for s in range(3000):
    got = alternatives(adm, "take key", 2, np.random.default_rng(s))
    assert len(got) == len(set(got)) == 2 and "take key" not in got and set(got) <= set(adm)
    # the listing order does not change the draw
    assert got == alternatives(adm[::-1], "take key", 2, np.random.default_rng(s))
    for a in got:
      seen[a] += 1
  assert seen["take key"] == 0
  # Each of the 4 others is in a draw of 2 with probability 1/2: 1,500 of 3,000 (sd ~27).
  assert all(abs(seen[a] - 1500) < 120 for a in adm if a != "take key"), seen
  assert alternatives(adm, "look", 9, np.random.default_rng(0)) == sorted(set(adm) - {"look"})
  assert alternatives(["look"], "look", 2, np.random.default_rng(0)) == []
  # the env reads commands ignoring case: the expert's own command is never an alternative
  assert alternatives(["Take Key", "look"], "take key", 2, np.random.default_rng(0)) == ["look"]
  # and case variants of one command are one alternative (its first spelling, sorted)
  assert alternatives(["look", "go east", "Look"], "take key", 3,
                      np.random.default_rng(0)) == ["Look", "go east"]


def _demos(env, num_demos, k):
  return host_demos(env, TOK, num_demos, 16, iwm_alternatives=k)


@pytest.mark.parametrize("workers", [0, 2])
def test_transitions_are_the_game_played_by_hand(workers):
  """Each demo game's early experience: at each expert state within 4 turns, the drawn
  alternatives and the observation each leads to, replayed here from a fresh game."""
  env = TextHostEnv(GamePool(KeyRoomGame, 3, workers=workers), TOK, obs_len=48)
  try:
    _, st, got = _demos(env, 5, k=2)
    tasks = np.asarray(sample_tasks(env, [1000 + i for i in range(5)]))
    want = []
    for j in range(2):  # chunks of the pool's 3 games: 3 + 2
      n = min(3, 5 - 3 * j)
      keys = np.asarray(episode_keys(jax.random.fold_in(jax.random.key(0), j), n, 1)[0])
      for i in range(n):
        game = KeyRoomGame()
        start = (env.task_ids[int(tasks[3 * j + i])], reset_seed(keys[i]))
        plan = game.expert(*start)
        for t in range(min(len(plan), 4)):
          game.reset(*start)
          before = None
          for cmd in plan[:t]:
            before = game.step(cmd).obs
          before = before or game.reset(*start)
          for a in alternatives(before.admissible, plan[t], 2, np.random.default_rng((j, i, t))):
            game.reset(*start)
            for cmd in plan[:t]:
              game.step(cmd)
            after = game.step(a).obs.text
            want.append(Transition(game_state_text(before.text), a, game_state_text(after)))
    assert st["iwm_failed"] == 0 and st["demos"] == 5
    assert got == want and len(want) > 10
    assert any(w.next_state != w.state for w in want)  # some alternatives change the room
    if not workers:  # resumed past the IWM stage: the same demos, nothing replayed
      batches, st2, none = host_demos(env, TOK, 5, 16, iwm_alternatives=2,
                                      replay_alternatives=False)
      assert none == [] and st2["demos"] == 5
      same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), batches, _demos(env, 5, 2)[0])
      assert all(jax.tree.leaves(same))
  finally:
    env.close()


def test_stage_batch_switches_at_iwm_steps_and_each_stage_counts_its_own_steps():
  """IWM batches for steps < iwm_steps, then the demo rows from their own step 0: each stage
  is a pure function of the step, so a run resumed on either side draws the same batches."""
  from agent_rl.train.sft import Stages, sft_batches, stage_batch
  demos = _like(6, 10)._replace(tokens=np.arange(60, dtype=np.int32).reshape(10, 6))
  iwm = _like(6, 7)._replace(tokens=-np.arange(1, 43, dtype=np.int32).reshape(7, 6))
  eq = lambda a, b: all(jax.tree.leaves(jax.tree.map(lambda x, y: np.array_equal(x, y), a, b)))
  stages = Stages(iwm_steps=3)
  for step in range(8):
    got, stage = stage_batch(demos, iwm, stages, 4, step, 5)
    want = sft_batches(iwm, 4, step, 5) if step < 3 else sft_batches(demos, 4, step - 3, 5)
    assert stage == ("iwm" if step < 3 else "demos") and eq(got, want)
  assert stage_batch(demos, None, stages, 4, 3, 5)[1] == "demos"  # past it: no IWM rows needed


def _like(width, n=1):
  from agent_rl.objective.minibatch import Minibatch
  z = np.zeros((n, width), np.float32)
  return Minibatch(tokens=np.zeros((n, width), np.int32), position=np.zeros((n, width), np.int32),
                   attention_mask=np.zeros((n, width), bool), loss_mask=z,
                   turn_index=np.zeros((n, width), np.int32), old_logprobs=z, advantages=z,
                   agent=np.zeros((n,), np.int32))


def test_iwm_rows_train_on_the_next_observation_only():
  pieces = chat_pieces(TOK, IWM_INSTRUCTION)
  end = TOK.special("<|im_end|>")
  trs = [Transition("you are in room 1. a key is here.", "take key", "you take the key."),
         Transition("x" * 400, "go east", "you are in room 2."),   # state cut to fit
         Transition("room", "look", "y" * 400)]                   # next state cannot fit
  rows, st = iwm_rows(TOK, pieces, end, trs, like=_like(256))
  assert st == dict(rows=2, state_cut=1, dropped=1) and rows.tokens.shape == (2, 256)
  tok, loss, att, ti = map(np.asarray, (rows.tokens, rows.loss_mask, rows.attention_mask,
                                        rows.turn_index))
  for r, tr in enumerate(trs[:2]):
    target = tok[r][loss[r] > 0]
    assert TOK.decode([int(x) for x in target[:-1]]) == tr.next_state and target[-1] == end
    assert (ti[r][loss[r] > 0] == 0).all() and (ti[r][loss[r] == 0] == -1).all()
    n = int(att[r].sum())
    assert att[r][:n].all() and not att[r][n:].any() and loss[r][n:].sum() == 0
    prompt = TOK.decode([int(x) for x in tok[r][:n][loss[r][:n] == 0]])
    assert IWM_INSTRUCTION in prompt and f"\nAction: {tr.action}" in prompt
  first = TOK.decode([int(x) for x in tok[0][:int(att[0].sum())]])
  assert "Observation: you are in room 1. a key is here.\nAction: take key" in first
  assert rows.agent.shape == (2,) and rows.position.shape == (2, 256)


@pytest.mark.parametrize("field,value,match", [
    ("iwm_alternatives", 2, "sft.iwm_steps.*must be both > 0 or both 0"),
    ("iwm_steps", 5, "sft.iwm_alternatives.*must be both > 0 or both 0"),
    ("iwm_alternatives", -1, "sft.iwm_alternatives: must be an int >= 0"),
])
def test_bad_iwm_settings_name_the_field(field, value, match):
  from agent_rl.train.config import validate
  c = host_config(iterations=0)
  c.sft.steps = 10
  c.sft[field] = value
  with pytest.raises(ValueError, match=match):
    validate(c)


def test_iwm_needs_a_host_game_and_its_steps_inside_sft_steps():
  from agent_rl.train.config import validate
  from tests.train.tiny import tiny_config
  c = tiny_config(iterations=0)
  c.sft.steps, c.sft.iwm_alternatives, c.sft.iwm_steps = 10, 2, 5
  with pytest.raises(ValueError, match="sft.iwm_alternatives: early experience .* not one"):
    validate(c)
  c = host_config(iterations=0)
  c.sft.steps, c.sft.iwm_alternatives, c.sft.iwm_steps = 10, 2, 11
  with pytest.raises(ValueError, match=r"sft.iwm_steps: 11 must be <= sft.steps \(10\) less "
                     r"sft.copy_steps \(0\)"):
    validate(c)
  c.sft.iwm_steps, c.agents.mode = 5, "lora"
  with pytest.raises(ValueError, match="sft.iwm_alternatives: supported with one shared network"):
    validate(c)


# CI budget (2026-12-07: 58 s): the transitions, the stage switch and the IWM rows are the unit
# tests above; the whole run, -m slow.
@pytest.mark.slow
def test_a_run_fits_early_experience_then_the_demos(tmp_path):
  """IWM steps first (their loss falls), then the demos; held-out success rises after SFT."""
  from agent_rl.train.run import run
  c = host_config(iterations=0)
  c.rollout.max_turns, c.rollout.max_action_tokens = 4, 16
  c.sft.steps, c.sft.iwm_steps, c.sft.iwm_alternatives = 200, 50, 2
  c.sft.num_demos, c.sft.batch_size, c.train.log_every = 32, 8, 10
  c.optim.lr = 3e-3
  run(c, str(tmp_path))
  with open(os.path.join(tmp_path, "metrics.jsonl")) as f:
    recs = [json.loads(ln) for ln in f]
  sft = [r for r in recs if "sft/loss" in r]
  assert [r["sft/iwm"] for r in sft] == [1.0] * 5 + [0.0] * 15
  assert sft[4]["sft/loss"] < 0.5 * sft[0]["sft/loss"], sft[:5]
  ev = [r for r in recs if "eval/success" in r]
  assert len(ev) >= 2 and ev[-1]["eval/success"] > ev[0]["eval/success"], ev
