"""TextHouse construction errors, splits, state hashes, skills, privileged text, host tasks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.tasks import sample_tasks
from agent_rl.envs.texthouse import TextHouse
from agent_rl.envs.texthouse import catalog as C
from conftest import CharTokenizer
from texthouse import reference
from texthouse.common import batched, decode, row, stack, turns

TOK = CharTokenizer()
B = 32          # the batch test_texthouse_rules compiles for the default env (shared jit cache)


@pytest.mark.parametrize("kwargs,match", [
    ({"split": "valid"}, "split"),
    ({"families": ("pick_and_place", "slice_then_place")}, "families"),
    ({"objects": ("mug", "spaceship")}, "objects"),
    ({"num_objects": 2}, "num_objects"),
    ({"families": ("pick_heat_then_place",), "objects": ("book", "pen", "cd")}, "pick_heat_then_place"),
    ({"skill_prob": 1.5}, "skill_prob"),
    ({"reward_weights": (1.0, 2.0)}, "reward_weights"),
    ({"max_steps": 0}, "max_steps"),
])
def test_construction_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    TextHouse(tokenizer=TOK, **kwargs)
  with pytest.raises(ValueError, match="tokenizer"):
    TextHouse()


def _env():
  return envs.make("texthouse", tokenizer=TOK)


@pytest.mark.parametrize("spec,match", [
    (dict(objects=[("mug", 1, "cabinet 1")], goals=[("pick_heat_then_place", "apple", "countertop")]), "needs 1 apple"),
    (dict(objects=[("mug", 1, "cabinet 1")], goals=[("pick_two_obj_and_place", "mug", "countertop")]), "needs 2 mug"),
    (dict(objects=[("book", 1, "cabinet 1")], goals=[("pick_heat_then_place", "book", "countertop")]), "cannot be the object"),
    (dict(objects=[("mug", 1, "shelf 1")], goals=[("pick_and_place", "mug", "countertop")]), "not in the layout"),
    (dict(objects=[("mug", 1, "cabinet 1")], goals=[("pick_and_place", "mug", "desk")]), "target kind"),
    (dict(objects=[("book", 1, "cabinet 1")], goals=[("look_at_obj_in_light", "book", "desk")], layout={"desk": 1}), "desklamp"),
    (dict(objects=[("mug", 1, "countertop 1")], goals=[("pick_and_place", "mug", "countertop")]), "already starts"),
    (dict(objects=[("unicorn", 1, "cabinet 1")], goals=[("pick_and_place", "mug", "countertop")]), "unknown object kind"),
    (dict(objects=[("mug", 1, "cabinet 1")], goals=[("cook", "mug", "countertop")]), "unknown family"),
    (dict(objects=[("mug", 1, "cabinet 1")], goals=[("pick_and_place", "mug", "countertop")], layout={"oven": 1}), "oven"),
])
def test_task_from_spec_errors(spec, match):
  spec.setdefault("layout", {})
  with pytest.raises(ValueError, match=match):
    _env().task_from_spec(**spec)


def test_host_task_solves_and_renders():
  env = _env()
  task = env.task_from_spec(layout={"cabinet": 2, "desk": 1}, goals=[("pick_clean_then_place", "mug", "desk")],
                            objects=[("mug", 2, "cabinet 2"), ("apple", 1, "countertop 1"), ("book", 3, "fridge 1")])
  ref = reference.RefHouse(jax.tree.map(np.asarray, task), 1)
  assert env.render_text(task) == ref.reset_text()
  assert "Your task is to: put a clean mug in desk." in ref.reset_text()
  plan = env.solve(task)
  assert plan == ["go to cabinet 2", "open cabinet 2", "take mug 2 from cabinet 2", "go to sinkbasin 1",
                  "clean mug 2 with sinkbasin 1", "go to desk 1", "move mug 2 to desk 1"]
  batch = stack(jax.tree.map(lambda x: np.asarray(x)[None], task), sample_tasks(env, range(B - 1)))
  reset, step = batched(env)                                # batch B, shared with other tests
  state, _ = reset(jax.random.split(jax.random.key(0), B), batch)
  for a in plan:
    state, obs, reward, done, info = step(state, turns(TOK, [f"<answer>{a}</answer>"] * B, 48))
    assert decode(TOK, obs, 0) == ref.step(f"<answer>{a}</answer>".encode())[0]
  assert bool(done[0]) and bool(info["success"][0]) and float(reward[0]) == 10.0


def test_splits_are_disjoint():
  train = sample_tasks(_env(), range(384))
  unseen = sample_tasks(envs.make("texthouse", tokenizer=TOK, split="unseen"), range(384))
  pairs = lambda t: set(zip(np.asarray(t.goal_obj).ravel().tolist(), np.asarray(t.goal_rec).ravel().tolist()))  # noqa: E731
  a, b = pairs(train), pairs(unseen)
  assert not a & b and all(C.UNSEEN[p] for p in b) and not any(C.UNSEEN[p] for p in a)
  for t in (train, unseen):
    assert set(np.asarray(t.goal_family).ravel().tolist()) == set(range(6))
  assert not np.asarray(train.unseen).any() and np.asarray(unseen.unseen).all()


def test_state_hash_equal_for_equal_states():
  env = _env()
  tasks = sample_tasks(env, range(B))
  reset, step = batched(env)
  s0, _ = reset(jax.random.split(jax.random.key(0), B), tasks)
  go = [f"<answer>go to {C.REC_NAMES[0]}</answer>"] * B

  def run(state, texts):
    for t in texts:
      state, *_ = step(state, turns(TOK, t, 48))
    return state

  op, cl = ["<answer>open cabinet 1</answer>"] * B, ["<answer>close cabinet 1</answer>"] * B
  a = run(s0, [go, op, cl])
  b = run(s0, [["<answer>look</answer>"] * B, go, op, ["<answer>inventory</answer>"] * B, cl])
  c = run(s0, [go, ["<answer>open cabinet 1</answer>"] * B])
  h = jax.vmap(env.state_hash)
  np.testing.assert_array_equal(h(a), h(b))                # same world, different paths and steps
  assert (np.asarray(h(a)) != np.asarray(h(c))).all()      # cabinet 1 open vs closed
  assert (np.asarray(h(a)) != np.asarray(h(s0))).all()


def test_skill_flag_and_privileged_text():
  env = _env()
  h = B // 2
  tasks = sample_tasks(env, range(h))
  flagged = stack(tasks.replace(skill=np.zeros(h, bool)), tasks.replace(skill=np.ones(h, bool)))
  reset, step = batched(env)
  state, obs = reset(jax.random.split(jax.random.key(0), B), flagged)
  _, _, _, _, info = step(state, turns(TOK, ["<answer>look</answer>"] * B, 48))
  np.testing.assert_array_equal(np.asarray(info["skill_injected"]), [False] * h + [True] * h)
  for i in range(4):
    plain, skilled = decode(TOK, obs, i), decode(TOK, obs, i + h)
    fam = int(tasks.goal_family[i, 0])
    assert skilled == plain + "\n" + C.SKILLS[fam] and "Skill" not in plain
  priv = jax.jit(jax.vmap(env.privileged_text))(tasks)
  for i in range(4):
    want = reference.RefHouse(row(tasks, i), 1).privileged_text()
    assert decode(TOK, priv, i) == want and want.startswith("The ")


def test_step_limit_truncates_and_textlab_variant():
  env = _env()                                              # max_steps 50, as verl-agent
  reset, step = batched(env)
  state, _ = reset(jax.random.split(jax.random.key(0), B), sample_tasks(env, range(B)))
  look = turns(TOK, ["<answer>look</answer>"] * B, 48)
  for t in range(51):
    state, _, reward, done, info = step(state, look)
    assert np.all(np.asarray(done) == (t >= 49)) and np.all(np.asarray(info["truncated"]) == (t == 49))
    assert np.all(np.asarray(reward) == 0.0)
  lab = envs.make("textlab", tokenizer=TOK)
  assert (lab.stages, lab.num_objects, lab.max_steps) == (4, 14, 100) and lab.reward_names == env.reward_names


def test_env_corpus_for_tokenizer_training():
  from agent_rl.train.setup import env_corpus
  texts = env_corpus("texthouse", {}, num_tasks=8)
  assert any(t.startswith("-= Welcome to TextWorld, ALFRED! =-") for t in texts)
  assert any(t.startswith("<answer>go to ") for t in texts)


def test_admissible_listing_is_exactly_the_applicable_actions():
  """Along expert plans, every listed action changes or reveals something and a sample of
  unlisted grammar actions prints "Nothing happens." (reference model; the JAX listing is
  compared with the reference's in test_texthouse_rules)."""
  import copy
  import random
  rng = random.Random(0)
  env = _env()
  tasks = sample_tasks(env, range(12))
  ids = C.all_actions()
  grammar = list(ids)
  for i in range(12):
    ref = reference.RefHouse(row(tasks, i), 1)
    for a in env.solve(row(tasks, i)):
      listed = ref.admissible()
      assert a in listed
      for b in listed + rng.sample(grammar, 40):
        probe = copy.deepcopy(ref)
        out = probe.apply(*C.split_action(ids[b]))
        assert (out != "Nothing happens.") == (b in listed), (b, out)
      ref.step(f"<answer>{a}</answer>".encode())
