"""The route env (Hera's router over workers) against the base env played directly: who acts,
what each reads, rewards (task minus call costs), calls, done and success, turn by turn."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.base import Text
from agent_rl.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
BASE = dict(dim_room=(6, 6), num_boxes=1, max_steps=6)
LINE = TOK.encode("You are the router.\n")
CHOICE = TOK.encode("Who takes this step? Answer <answer>device</answer> or "
                    "<answer>cloud</answer>.\n")


def _act(text, width=40):
  ids = TOK.encode(text)[:width]
  return Text(jnp.asarray(ids + [TOK.pad_id] * (width - len(ids)), jnp.int32), jnp.int32(len(ids)))


def _text(obs):
  return list(np.asarray(obs.tokens)[:int(obs.length)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_turns_equal_the_base_env_played_directly(seed):
  env = envs.make("route", tokenizer=TOK, base="sokoban", base_kwargs=BASE, costs=(0.25, 1.5))
  base = env.inner
  rng = np.random.default_rng(seed)
  task = env.sample_task(jax.random.key(seed))
  key = jax.random.key(100 + seed)
  s, obs = env.reset(key, task)
  b, bobs = base.reset(key, task)
  step, bstep = jax.jit(env.step), jax.jit(base.step)
  assert _text(obs) == LINE + _text(bobs) + CHOICE
  phase, calls, done, turns = 0, [0, 0], False, 0
  while not done and turns < 40:
    turns += 1
    if phase == 0:  # the router: a valid choice or junk
      choice = rng.choice(["device", "cloud", "DEVICE", "phone", "<answer>cloud"])
      text = choice if choice.startswith("<") else f"<answer>{choice}</answer>"
      s, obs, r, d, info = step(s, _act(text))
      ok = choice.lower() in ("device", "cloud")
      assert bool(info["valid_action"]) == ok and int(info["agent_id"]) == 0
      assert float(r) == pytest.approx(0.0 if ok else -0.1)
      assert not bool(d) and not bool(info["success"])
      nxt = (1 + ["device", "cloud"].index(choice.lower())) if ok else 0
      assert int(info["next_agent"]) == nxt
      assert _text(obs) == (_text(bobs) if ok else LINE + _text(bobs) + CHOICE)
      phase = nxt
    else:  # the chosen worker steps the base env
      move = rng.choice(["Up", "Down", "Left", "Right", "jump"])
      s, obs, r, d, info = step(s, _act(f"<answer>{move}</answer>"))
      b, bobs, br, bd, binfo = bstep(b, _act(f"<answer>{move}</answer>"))
      calls[phase - 1] += 1
      cost = (0.25, 1.5)[phase - 1]
      assert float(r) == pytest.approx(float(br) - cost, abs=1e-5)
      assert int(info["agent_id"]) == phase and int(info["next_agent"]) == 0
      assert bool(d) == bool(bd) and bool(info["success"]) == bool(binfo["success"])
      assert bool(info["valid_action"]) == bool(binfo["valid_action"])
      assert int(info["route/calls/device"]) == (phase == 1)
      assert int(info["route/calls/cloud"]) == (phase == 2)
      np.testing.assert_array_equal(np.asarray(info["reward_terms"])[:4], binfo["reward_terms"])
      assert _text(obs) == LINE + _text(bobs) + CHOICE
      done, phase = bool(d), 0
  assert list(np.asarray(s.calls)) == calls


def test_forced_worker_acts_every_turn_and_pays():
  env = envs.make("route", tokenizer=TOK, base="sokoban", base_kwargs=BASE, costs=(0.0, 2.0),
                  force="cloud")
  task = env.sample_task(jax.random.key(3))
  s, obs = env.reset(jax.random.key(4), task)
  b, bobs = env.inner.reset(jax.random.key(4), task)
  assert _text(obs) == _text(bobs)
  assert int(env.first_agent(s)) == 2
  for move in env.solve(task):
    s, obs, r, d, info = env.step(s, _act(f"<answer>{move}</answer>"))
    b, bobs, br, bd, _ = env.inner.step(b, _act(f"<answer>{move}</answer>"))
    assert int(info["agent_id"]) == 2 == int(info["next_agent"])
    assert float(r) == pytest.approx(float(br) - 2.0, abs=1e-5)
  assert bool(d) and bool(info["success"])
  assert int(s.calls[1]) == len(env.solve(task)) and int(s.calls[0]) == 0


def test_solver_plan_hands_every_step_to_the_last_worker_and_wins():
  env = envs.make("route", tokenizer=TOK, base="sokoban", base_kwargs=BASE)
  task = env.sample_task(jax.random.key(5))
  plan = env.solve(task)
  assert plan[0::2] == ["cloud"] * (len(plan) // 2) and plan[1::2] == env.inner.solve(task)
  s, _ = env.reset(jax.random.key(0), task)
  for a in plan:
    s, _, _, d, info = env.step(s, _act(f"<answer>{a}</answer>"))
  assert bool(d) and bool(info["success"])


def test_router_and_worker_states_hash_apart():
  env = envs.make("route", tokenizer=TOK, base="sokoban", base_kwargs=BASE)
  s, _ = env.reset(jax.random.key(0), env.sample_task(jax.random.key(0)))
  s2, _, _, _, info = env.step(s, _act("<answer>device</answer>"))
  assert int(env.state_hash(s)) != int(info["state_hash"]) == int(env.state_hash(s2))


@pytest.mark.parametrize("kw,match", [
    (dict(force="phone"), "route.force"),
    (dict(costs=(1.0,)), "route.costs"),
    (dict(costs=(0.0, -1.0)), "route.costs"),
    (dict(workers=("router", "cloud")), "route.workers"),
    (dict(base="route"), "route.base"),
])
def test_bad_settings_name_the_field(kw, match):
  with pytest.raises(ValueError, match=match):
    envs.make("route", tokenizer=TOK, **{"base": "sokoban", "base_kwargs": BASE, **kw})
