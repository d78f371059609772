"""TextHostEnv against a plain-Python reference: the same KeyRoom games driven directly."""
import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agent_rl.envs.base import Text
from agent_rl.envs.host.game import GameObs
from agent_rl.envs.host.pool import GamePool
from agent_rl.envs.host.text_env import TextHostEnv
from agent_rl.envs.host.text_rules import (ACTION_FORMATS, INVALID_TEXT, answer_command, present,
                                           reset_seed)
from agent_rl.envs.host.toy import KeyRoomGame
from agent_rl.tokenizers import ByteTokenizer

from tests.envs.host.helpers import A, _actions, _h
from tests.envs.host.hostgames import FaultyGame, NoStateGame

TOK = ByteTokenizer()
def _ref_tokens(text, obs_len):
  ids = TOK.encode(text)
  return ids[:obs_len], len(ids) > obs_len


@pytest.mark.parametrize("score_scale", [1.0, 0.25])
def test_reset_and_steps_match_the_games_played_directly(score_scale):
  """score_scale multiplies the game's score delta, not the invalid-action penalty."""
  obs_len = 40  # short enough that some observations are truncated
  env = TextHostEnv(GamePool(KeyRoomGame, 4, workers=0), TOK, obs_len=obs_len, admissible=True,
                    invalid_penalty=-0.5, extras=("steps",), score_scale=score_scale)
  tasks = np.asarray([3, 5], np.int32)
  keys = np.asarray([[1, 2], [3, 4]], np.uint32)
  tok, length, h0 = env.reset(tasks, keys, 2)
  refs = [KeyRoomGame() for _ in range(4)]
  seen = [refs[r].reset(f"keyroom-{tasks[r // 2]}", reset_seed(keys[r // 2])) for r in range(4)]
  for r in range(4):
    ids, _ = _ref_tokens(present(seen[r], True), obs_len)
    assert list(tok[r, :length[r]]) == ids and (tok[r, length[r]:] == TOK.pad_id).all()
    assert h0[r] == _h(seen[r].state_key)
  assert (tok[0] == tok[1]).all() and (tok[2] == tok[3]).all()  # a group shares its reset
  turns = [["<answer>take key</answer>", "no answer here", "<answer> LOOK || go to x</answer>",
            "<answer>go to hall</answer>"],
           ["<answer>unlock door</answer>", "<answer></answer>", "<answer>look</answer>", "x"]]
  trunc_total = int(sum(_ref_tokens(present(s, True), obs_len)[1] for s in seen))
  for texts in turns:
    active = np.asarray([True, True, True, False])
    o_tok, o_len, reward, done, info = env.step(*_actions(texts), active)
    for r in range(3):
      cmd = answer_command(texts[r])
      if cmd is None:  # invalid: penalty, the game does not move, the hash stays
        assert reward[r] == -0.5 and not info["valid_action"][r] and not done[r]
        assert info["state_hash"][r] == _h(seen[r].state_key)
        shown = present(GameObs(text=INVALID_TEXT["answer"], admissible=seen[r].admissible), True)
      else:
        prev, s = seen[r], refs[r].step(cmd)
        seen[r] = s.obs
        assert info["valid_action"][r] and reward[r] == np.float32(s.score_delta * score_scale)
        assert done[r] == s.done
        assert info["success"][r] == s.won and info["steps"][r] == s.extras["steps"]
        assert info["state_hash"][r] == _h(s.obs.state_key)
        assert info["admissible_action"][r] == (cmd.lower() in prev.admissible)
        shown = present(s.obs, True)
      ids, tr = _ref_tokens(shown, obs_len)
      trunc_total += tr
      assert list(o_tok[r, :o_len[r]]) == ids and info["obs_truncated"][r] == tr
    assert not info["fatal"].any() and not info["obs_truncated"][3]
  assert env.stats["obs_truncated"] == trunc_total > 0
  assert env.stats["invalid_actions"] == 2


def test_admissible_flag_and_list():
  env = TextHostEnv(GamePool(KeyRoomGame, 1), TOK, obs_len=400, admissible=False)
  tok, length, _ = env.reset(np.asarray([0]), np.asarray([[0, 9]], np.uint32), 1)
  assert "admissible" not in TOK.decode(tok[0, :length[0]])
  env = TextHostEnv(GamePool(KeyRoomGame, 1), TOK, obs_len=400, admissible=True)
  tok, length, _ = env.reset(np.asarray([0]), np.asarray([[0, 9]], np.uint32), 1)
  text = TOK.decode(tok[0, :length[0]])
  assert "admissible actions" in text and "'look'" in text
  _, _, _, _, info = env.step(*_actions(["<answer>dance</answer>"]), np.asarray([True]))
  assert info["valid_action"][0] and not info["admissible_action"][0]


def test_deterministic_resets_and_text_hash_fallback():
  env = TextHostEnv(GamePool(NoStateGame, 3), TOK, obs_len=400)
  keys = np.asarray([[5, 6], [7, 8], [5, 6]], np.uint32)
  a = env.reset(np.asarray([1, 1, 1]), keys, 1)
  b = env.reset(np.asarray([1, 1, 1]), keys, 1)
  for x, y in zip(a, b):
    assert np.array_equal(x, y)
  text = TOK.decode(a[0][0, :a[1][0]])
  assert a[2][0] == _h(text.encode()) and a[2][0] == a[2][2]
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(0), 100))
  assert tasks.dtype == np.int32 and 0 <= int(tasks.min()) and int(tasks.max()) < 64


def test_failed_game_ends_its_episode_with_fatal():
  env = TextHostEnv(GamePool(FaultyGame, 2), TOK, obs_len=400, action_format="raw")
  env.reset(np.asarray([0, 1]), np.asarray([[1, 1], [2, 2]], np.uint32), 1)
  _, _, reward, done, info = env.step(*_actions(["boom", "look"]), np.asarray([True, True]))
  assert done[0] and info["fatal"][0] and info["worker_failed"][0] and reward[0] == 0
  assert not info["success"][0] and not done[1] and not info["fatal"][1]
  assert env.stats["failed_steps"] == 1
  # A game that fails to start ends its episode at the first step, whatever the action.
  tok, length, _ = env.reset(np.asarray([13, 1]), np.asarray([[1, 1], [2, 2]], np.uint32), 1)
  assert TOK.decode(tok[0, :length[0]]).startswith("The game stopped")
  _, _, _, done, info = env.step(*_actions(["", "look"]), np.asarray([True, True]))
  assert done[0] and info["fatal"][0] and not info["valid_action"][0] and not done[1]


def test_bad_inputs_are_clear_errors():
  env = TextHostEnv(GamePool(KeyRoomGame, 2), TOK, obs_len=8)
  with pytest.raises(ValueError, match="3 episodes but the pool holds 2"):
    env.reset(np.asarray([0, 1, 2]), np.zeros((3, 2), np.uint32), 1)
  with pytest.raises(ValueError, match=r"task indices \[99\]"):
    env.reset(np.asarray([99]), np.zeros((1, 2), np.uint32), 1)
  with pytest.raises(KeyError, match="unknown host action format 'xml'"):
    TextHostEnv(GamePool(KeyRoomGame, 1), TOK, action_format="xml")
  assert env.for_eval() is env
  ev = TextHostEnv(GamePool(KeyRoomGame, 1), TOK, eval_split="eval").for_eval()
  assert ev.task_ids[0] == "keyroom-1000"


# -- the answer rule is envs/actions.py's (the JAX ActionParser), one action per turn --------
WORDS = ("look", "take key", "go to hall")
PIECES = st.sampled_from(["<answer>", "</answer>", "look", "LOOK", " take key ", "go to hall",
                          "||", " ", "\n", "x", "<answer", "answer>", "é"])


@settings(max_examples=60, deadline=None)
@given(st.lists(PIECES, max_size=8))
def test_answer_rule_matches_the_jax_action_parser(parts):
  text = "".join(parts)
  parser = _parser()
  ids = TOK.encode(text)[:A]
  tok = np.full((A,), TOK.pad_id, np.int32)
  tok[:len(ids)] = ids
  got = parser(jax.numpy.asarray(tok), jax.numpy.int32(len(ids)))
  cmd = answer_command(TOK.decode(ids), max_answer_bytes=128)
  ours = cmd is not None and cmd.lower() in WORDS
  assert bool(got.valid) == ours, text
  if ours:
    assert WORDS[int(got.ids[0])] == cmd.lower()


_P = []


def _parser():
  if not _P:
    from agent_rl.envs.actions import ActionParser
    p = ActionParser(TOK, {w: i for i, w in enumerate(WORDS)}, max_actions=1,
                     max_answer_bytes=128)
    _P.append(jax.jit(lambda t, n: p(Text(t, n))))
  return _P[0]


def test_raw_format_takes_the_first_line():
  raw = ACTION_FORMATS.get("raw")
  assert raw("\n  go to hall \nlook") == "go to hall"
  assert raw(" \n\t") is None
