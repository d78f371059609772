"""Several agents on host text games (issue 21): a game with roles (KeyRoomDuo) and a game
without (KeyRoom on a schedule), against the games played directly in plain Python; the host
rollouts record who acted as the env says, overlapped or not."""
import jax
import numpy as np
import pytest

from agent_rl.envs.host.pool import GamePool
from agent_rl.envs.host.text_env import TextHostEnv
from agent_rl.envs.host.text_rules import ACTION_FORMATS, INVALID_TEXT, present, reset_seed
from agent_rl.envs.host.toy import KeyRoomDuo, KeyRoomGame
from agent_rl.rollout.bridge import HostRollout
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.overlap import OverlapRollout
from agent_rl.tokenizers import ByteTokenizer

from tests.envs.host.helpers import _actions, _cfg, _h, _policy, _same

TOK = ByteTokenizer()
PEN = -0.5
# The command is picked by the action text's length: random policies walk, take and unlock,
# so both roles of the duo get turns (and commands of the other role).
DUO_CMDS = ("go to hall", "go to kitchen", "go to study", "take key", "unlock door", "look")
ACTION_FORMATS.register("duo_walk", lambda text, max_answer_bytes=256:
                        DUO_CMDS[len(text) % len(DUO_CMDS)] if len(text) % 7 else None)


def _decode(tok, length, r):
  return TOK.decode([int(t) for t in tok[r, :length[r]]])


def test_duo_matches_the_games_played_directly():
  """Who acts, what each reads, the reward columns and hashes, turn by turn."""
  env = TextHostEnv(GamePool(KeyRoomDuo, 4, workers=0), TOK, obs_len=200, admissible=True,
                    invalid_penalty=PEN)
  assert env.roles == ("scout", "keyholder") and env.reward_names == (
      "score", "role/scout", "role/keyholder") and env.role_reward_terms == env.reward_names[1:]
  assert "Several agents (scout, keyholder)" in env.instruction
  tasks, keys = np.asarray([0, 7], np.int32), np.asarray([[1, 2], [3, 4]], np.uint32)
  tok, length, h0 = env.reset(tasks, keys, 2)
  refs = [KeyRoomDuo() for _ in range(4)]
  seen = [refs[r].reset(f"keyroom-{tasks[r // 2]}", reset_seed(keys[r // 2])) for r in range(4)]
  roles = ("scout", "keyholder")
  for r in range(4):
    assert _decode(tok, length, r) == f"You are the {roles[seen[r].next_agent]}.\n" + present(
        seen[r], True)
    assert h0[r] == _h(seen[r].state_key + b"|agent=%d" % seen[r].next_agent)
  np.testing.assert_array_equal(env.first_agents(), [o.next_agent for o in seen])
  plan = ["go to hall", "go to kitchen", "take key", "go to study", "unlock door", "go to hall",
          "take key", "go to kitchen", "go to study", "unlock door"]
  switched = paid = 0
  for t in range(10):
    texts = [f"<answer>{plan[(t + r) % len(plan)]}</answer>" if (t + r) % 4 else "garbage"
             for r in range(4)]
    active = np.ones(4, bool)
    o_tok, o_len, reward, done, info = env.step(*_actions(texts), active)
    for r in range(4):
      acted = seen[r].next_agent
      assert info["agent_id"][r] == acted
      if texts[r] == "garbage":  # no command: the game is not stepped, the actor pays
        assert reward[r] == PEN and info["next_agent"][r] == acted
        want = np.zeros(3, np.float32)
        want[0] = want[1 + acted] = PEN
        np.testing.assert_array_equal(info["reward_terms"][r], want)
        assert INVALID_TEXT["answer"] in _decode(o_tok, o_len, r)
        continue
      st = refs[r].step(plan[(t + r) % len(plan)])
      seen[r] = st.obs
      assert info["next_agent"][r] == st.obs.next_agent
      switched += int(st.obs.next_agent != acted)
      assert reward[r] == st.score_delta and done[r] == st.done and info["success"][r] == st.won
      np.testing.assert_allclose(info["reward_terms"][r],
                                 [st.score_delta, 0.2 * st.score_delta, st.score_delta])
      paid += int(st.score_delta > 0)
      assert _decode(o_tok, o_len, r) == (
          f"You are the {roles[st.obs.next_agent]}.\n" + present(st.obs, True))
      assert info["state_hash"][r] == _h(st.obs.state_key + b"|agent=%d" % st.obs.next_agent)
      if st.done:
        seen[r] = refs[r].reset(f"keyroom-{tasks[r // 2]}", reset_seed(keys[r // 2]))
        env.reset(tasks, keys, 2)  # keep env and references in step for the next turns
        seen = [refs[q].reset(f"keyroom-{tasks[q // 2]}", reset_seed(keys[q // 2]))
                for q in range(4)]
        break
  assert switched > 0 and paid > 0


def test_a_game_without_roles_on_a_staggered_schedule():
  sched, scales = (0, 1, 0, 2), (0.5, 1.0, 2.0)
  env = TextHostEnv(GamePool(KeyRoomGame, 4, workers=0), TOK, obs_len=200,
                    invalid_penalty=PEN, roles="a,b,c", schedule="0,1,0,2",
                    offset_by_task=True, role_scales="0.5,1,2")
  assert env.roles == ("a", "b", "c") and env.role_reward_terms == ("role/a", "role/b", "role/c")
  tasks, keys = np.asarray([2, 9], np.int32), np.asarray([[5, 6], [7, 9]], np.uint32)
  tok, length, _ = env.reset(tasks, keys, 2)
  offs = [reset_seed(keys[r // 2]) % len(sched) for r in range(4)]
  assert len(set(offs)) > 1  # the two tasks start at different points of the cycle
  refs = [KeyRoomGame() for _ in range(4)]
  for r in range(4):
    o = refs[r].reset(f"keyroom-{tasks[r // 2]}", reset_seed(keys[r // 2]))
    assert _decode(tok, length, r) == f"You are the {'abc'[sched[offs[r]]]}.\n" + o.text
  np.testing.assert_array_equal(env.first_agents(), [sched[o] for o in offs])
  for t in range(3):
    texts = ["nothing" if (t + r) % 3 == 0 else "<answer>look</answer>" for r in range(4)]
    _, _, reward, _, info = env.step(*_actions(texts), np.ones(4, bool))
    for r in range(4):
      acted, nxt = sched[(t + offs[r]) % 4], sched[(t + 1 + offs[r]) % 4]
      assert info["agent_id"][r] == acted and info["next_agent"][r] == nxt  # invalid: moves on
      if texts[r] == "nothing":
        want = np.zeros(4, np.float32)
        want[0] = want[1 + acted] = PEN
      else:
        d = refs[r].step("look").score_delta
        want = np.asarray([d] + [s * d for s in scales], np.float32)
      np.testing.assert_allclose(info["reward_terms"][r], want)
  # without role_scales: a team reward, no columns
  plain = TextHostEnv(GamePool(KeyRoomGame, 2, workers=0), TOK, roles=("x", "y"))
  assert plain.reward_names is None and plain.role_reward_terms is None
  assert "reward_terms" not in plain.info_spec(0, 2) and "next_agent" in plain.info_spec(0, 2)


@pytest.mark.parametrize("game,kw,match", [
    (KeyRoomDuo, dict(roles="p,q"), r"env.host.roles: the game names its own roles"),
    (KeyRoomDuo, dict(role_scales="1,1"), r"env.host.role_scales: the game names its own"),
    (KeyRoomGame, dict(schedule="0,1"), r"env.host.schedule needs env.host.roles"),
    (KeyRoomGame, dict(roles="p,q", schedule="0,2"), r"env.host.schedule: agents \[2\] name no"),
    (KeyRoomGame, dict(roles="p,p"), r"env.host.roles: need distinct"),
    (KeyRoomGame, dict(roles="p,q", role_scales="1"), r"env.host.role_scales: one finite float"),
    (KeyRoomGame, dict(roles="p,q", role_scales="1,x"), r"env.host.role_scales: one float"),
])
def test_bad_role_settings_name_the_field(game, kw, match):
  with pytest.raises(ValueError, match=match):
    TextHostEnv(GamePool(game, 2, workers=0), TOK, **kw)


def test_config_role_fields_are_checked_before_anything_builds():
  from agent_rl.train.config import validate
  from tests.train.tiny import tiny_config
  c = tiny_config(env="host:toy")
  c.log.episodes = 0
  c.env.host.roles, c.env.host.role_scales = "p,q", "1,2,3"
  with pytest.raises(ValueError, match=r"config.env.host.role_scales: one finite float"):
    validate(c)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_host_rollouts_record_who_acted(workers):
  """EpisodeBatch.agent_id is the env's `agent_id` on every valid turn (the loop's chain from
  `first_agents` and `next_agent`), and the overlapped rollout gives the plain loop's batch."""
  pol, params = _policy()
  env = TextHostEnv(GamePool(KeyRoomDuo, 8, workers=workers), TOK, obs_len=64,
                    action_format="duo_walk")
  log = []
  step_wait = env.step_wait

  def logged(handle):
    out = step_wait(handle)
    log.append((np.asarray(handle[0]), out[4]["agent_id"].copy(), handle[2].copy()))
    return out
  env.step_wait = logged
  firsts = []
  reset = env.reset

  def logged_reset(*a):
    out = reset(*a)
    firsts.append(env.first_agents().copy())
    return out
  env.reset = logged_reset
  cfg = _cfg("windowed", turns=5, group=2)
  pieces = chat_pieces(TOK, env.instruction, "sys")
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(1), 4))
  ref, _ = HostRollout(pol, env, cfg, pieces)(params, tasks, jax.random.key(2))
  (first,) = firsts
  agent, valid = np.asarray(ref.agent_id), np.asarray(ref.valid)
  for t, (rows, acted, on) in enumerate(log):
    for r, a, o in zip(rows, acted, on):
      if o:
        assert valid[r, t] and agent[r, t] == a, (r, t)
  np.testing.assert_array_equal(agent[:, 0], first)
  assert len(np.unique(agent[valid])) == 2  # both roles acted
  terms = {k: np.asarray(v) for k, v in ref.extras.items() if k.startswith("reward_terms/")}
  assert set(terms) == {"reward_terms/score", "reward_terms/role/scout",
                        "reward_terms/role/keyholder"}
  log.clear()
  firsts.clear()
  got, _ = OverlapRollout(pol, env, cfg, pieces)(params, tasks, jax.random.key(2))
  _same(ref, got)
  np.testing.assert_array_equal(np.asarray(got.agent_id), agent)
  env.close()
