"""SPA world-model turn text: states vs plain-Python replays, env parsing of the think block,
and SFT rows whose loss covers the whole think + answer text."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.data import world_model as wm
from agent_rl.envs.tasks import sample_tasks
from agent_rl.envs.base import Text
from agent_rl.eval.evaluate import episode_config
from agent_rl.data.scripted import encode_plans, scripted_policy
from agent_rl.rollout.compiled import rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.tokenizers import ByteTokenizer
from agent_rl.train import sft
from agent_rl.train.setup import build, env_corpus
from tests.envs.ref_sokoban import PySokoban
from tests.train.tiny import tiny_config

TOK = ByteTokenizer()
SOKO = envs.make("sokoban", tokenizer=TOK, dim_room=(6, 6), num_boxes=2, max_steps=50)
LEVELS = ["######\n#.  .#\n# $$ #\n#  @ #\n#    #\n######",   # 2 boxes, 8 moves
          "######\n#  . #\n# $  #\n# @  #\n######"]            # 1 box, 4 moves


def cells(pairs):
  return " ".join(f"({r},{c})" for r, c in sorted(pairs)) or "none"


def ref_sokoban_text(g: PySokoban) -> str:
  return f"player ({g.player[0]},{g.player[1]}) boxes {cells(g.boxes)} targets {cells(g.targets)}"


def ref_spa(obs, pred, action):
  return (f"<think><observation>{obs}</observation><prediction>{pred}</prediction></think>"
          f"<answer>{action}</answer>")


def ref_sokoban_turns(task, plan, num_turns):
  """SPA turn texts of one task from the plain-Python rules (tests/envs/ref_sokoban.py)."""
  g = PySokoban(*(np.asarray(x).tolist() for x in (task.walls, task.targets, task.boxes, task.player)))
  out = []
  for a in plan[:num_turns]:
    before = ref_sokoban_text(g)
    g.turn([a.lower()], True)
    out.append(ref_spa(before, ref_sokoban_text(g), a))
  return out


def stack(tasks):
  return jax.tree.map(lambda *x: np.stack([np.asarray(a) for a in x]), *tasks)


def one(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def test_sokoban_states_match_plain_python_replay():
  tasks = stack([SOKO.task_from_text(lv) for lv in LEVELS])
  plans = [SOKO.solve(one(tasks, i)) for i in range(len(LEVELS))]
  assert len(plans[0]) > 4 and len(plans[1]) == 4
  plans.append(plans[1][:2])  # ragged plans, and one cut by num_turns below
  tasks = stack([SOKO.task_from_text(lv) for lv in LEVELS + LEVELS[1:]])
  num_turns = 4
  got = wm.spa_plans("sokoban", SOKO, tasks, plans, num_turns)
  for i, plan in enumerate(plans):
    want = ref_sokoban_turns(one(tasks, i), plan, num_turns)
    assert len(want) == min(len(plan), num_turns)
    assert got[i] == want
  assert "boxes (2,2) (2,3) targets (1,1) (1,4)" in got[0][0]
  # A full plan ends with every box on a target.
  full = wm.state_trajectories("sokoban", SOKO, tasks, plans, 10)[0]
  assert len(full) == len(plans[0]) + 1
  boxes, targets = re.match(r"player \S+ boxes (.*) targets (.*)", full[-1]).groups()
  assert boxes == targets


def test_frozenlake_states_match_plain_python_walk():
  env = envs.make("frozenlake", tokenizer=TOK, size=4, is_slippery=False)
  rows = ["SFFF", "FHFH", "FFFH", "HFFG"]
  task = env.task_from_map(rows)
  tasks = jax.tree.map(lambda x: np.asarray(x)[None], task)
  plan = ["Right", "Right", "Down", "Left", "Down"]  # the 4th move walks into the hole at (1,1)
  got = wm.state_trajectories("frozenlake", env, tasks, [plan], 10)[0]
  delta = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
  holes = cells((r, c) for r in range(4) for c in range(4) if rows[r][c] == "H")
  pos, want = (0, 0), []
  for a in [None] + plan:
    if a is not None and rows[pos[0]][pos[1]] not in "HG":  # terminal cells absorb
      pos = (min(max(pos[0] + delta[a][0], 0), 3), min(max(pos[1] + delta[a][1], 0), 3))
    want.append(f"player ({pos[0]},{pos[1]}) holes {holes} goal (3,3)")
  assert got == want
  assert got[4].startswith("player (1,1)")


def test_slippery_states_follow_the_replayed_episode():
  """With slippery ice the true s_{t+1} depends on the episode key: every state text must
  match the grid the compiled rollout (scripted policy, same rollout key) shows."""
  env = envs.make("frozenlake", tokenizer=TOK, size=4, is_slippery=True)
  # One hole-free map 4 times: the episodes differ only by their keys (fold_in of the task index).
  tasks = stack([env.task_from_map(["SFFF", "FFFF", "FFFF", "FFFG"])] * 4)
  plans = [["Down", "Right", "Down", "Right"]] * 4
  key = jax.random.key(7)
  got = wm.state_trajectories("frozenlake", env, tasks, plans, 4, key=key)
  end = TOK.special("<|im_end|>")
  cfg = EpisodeConfig(sampler=SamplerConfig(greedy=True, max_tokens=24, stop_tokens=(end,)),
                      max_turns=4, group_size=1)
  batch, _ = rollout(scripted_policy(TOK.vocab_size), jnp.asarray(encode_plans(TOK, plans, 4, 24)),
                     env, tasks, key, cfg, chat_pieces(TOK, env.instruction))
  for i in range(4):
    row = np.asarray(batch.tokens[i])[np.asarray(batch.attention_mask[i]) > 0]
    grids = re.findall(r"((?:[P_OGX√]{4}\n){4})", TOK.decode(row))
    assert len(grids) == 4  # s_0..s_3: the state after the last turn is never shown
    for t, grid in enumerate(grids):
      r, c = next((r, line.index(ch)) for r, line in enumerate(grid.split("\n")) for ch in "PX√" if ch in line)
      assert got[i][t].startswith(f"player ({r},{c}) "), (i, t, got[i][t], grid)
  # Slips happened (otherwise the check above is the deterministic one).
  assert any(s[1].startswith("player (0,0)") or s[1].startswith("player (0,1)") for s in got)


def test_env_parses_the_answer_after_the_think_block():
  tasks = stack([SOKO.task_from_text(LEVELS[0])])
  plan = SOKO.solve(one(tasks, 0))
  turn = wm.spa_plans("sokoban", SOKO, tasks, [plan], 1)[0][0]
  assert turn.startswith("<think><observation>player (3,3) ") and turn.endswith("<answer>Up</answer>")

  @jax.jit
  def reset_step(task, action):
    state, _ = SOKO.reset(jax.random.key(0), task)
    return SOKO.step(state, action)

  def step(s):
    ids = np.zeros((256,), np.int32)
    ids[:len(TOK.encode(s))] = TOK.encode(s)
    return reset_step(one(tasks, 0), Text(tokens=ids, length=np.int32(len(TOK.encode(s)))))

  spa, bare = step(turn), step(f"<answer>{plan[0]}</answer>")
  assert bool(spa[4]["valid_action"])
  np.testing.assert_array_equal(spa[0].player, [2, 3])
  np.testing.assert_array_equal(spa[0].player, bare[0].player)
  np.testing.assert_array_equal(spa[0].boxes, bare[0].boxes)


def test_unknown_env_name_lists_known_ones():
  with pytest.raises(KeyError, match="unknown world-model state text.*'countdown'.*known: frozenlake, sokoban"):
    wm.state_fn("countdown")
  with pytest.raises(ValueError, match="leading sizes"):
    wm.spa_plans("sokoban", SOKO, stack([SOKO.task_from_text(lv) for lv in LEVELS]), [["Up"]], 2)


def test_sft_rows_train_on_the_whole_spa_turn(tmp_path):
  c = tiny_config(sft_steps=1)
  c.sft.world_model, c.sft.num_demos = True, 4
  c.rollout.max_action_tokens = 48
  setup = build(c, str(tmp_path))
  tok = setup.tokenizer
  ecfg = episode_config(c, tok)
  rows = sft.demo_rows(c, setup, ecfg, str(tmp_path))
  toks, mask, ti = map(np.asarray, (rows.tokens, rows.loss_mask, rows.turn_index))
  seeds = [sft.DEMO_SEED_BASE + i for i in range(c.sft.num_demos)]
  tasks = sample_tasks(setup.env, seeds)
  end = tok.special("<|im_end|>")
  assert toks.shape[0] == len(seeds)
  for i in range(len(seeds)):
    want = ref_sokoban_turns(one(tasks, i), setup.env.solve(one(tasks, i)), c.rollout.max_turns)
    assert want
    for t, text in enumerate(want):
      got = toks[i][(ti[i] == t) & (mask[i] > 0)]
      assert tok.decode(got[:-1]) == text
      assert got[-1] == end
    # Nothing else in the row is a target: the loss covers exactly the assistant turns.
    assert mask[i].sum() == sum(len(tok.encode(w)) + 1 for w in want)


def test_tokenizer_corpus_adds_spa_turns_only_when_on():
  off = env_corpus("frozenlake", {}, num_tasks=4)
  on = env_corpus("frozenlake", {}, num_tasks=4, world_model=True)
  assert on[:len(off)] == off  # the default corpus (hence tokenizer) is unchanged
  extra = on[len(off):]
  assert extra and all(t.startswith("<think><observation>player (") for t in extra)


def _ref_house_text(ref) -> str:
  """The SPA state text of a plain-Python TextHouse (tests/envs/texthouse/reference.py)."""
  from agent_rl.envs.texthouse import catalog as C
  kinds = {k for f, k in zip(ref.fam, ref.gobj) if f >= 0 and k >= 0}
  if C.FAMILIES.index("look_at_obj_in_light") in ref.fam:
    kinds.add(C.LAMP)
  parts = [f"at {C.REC_NAMES[ref.at] if ref.at is not None else 'middle of room'}",
           f"holding {ref.oname(ref.held) if ref.held is not None else 'nothing'}",
           f"open {', '.join(C.REC_NAMES[r] for r in sorted(ref.opened)) or 'none'}"]
  for s in ref.slots:
    if ref.kind[s] in kinds:
      words = [ref.oname(s), "held" if ref.held == s else f"in {C.REC_NAMES[ref.loc[s]]}"]
      words += [w for w, v in (("hot", ref.hot), ("cool", ref.cold), ("clean", ref.clean),
                               ("on", ref.on)) if s in v]
      parts.append(" ".join(words))
  return "; ".join(parts)


@pytest.mark.parametrize("name", ["texthouse", "textlab"])
def test_texthouse_state_text_matches_the_python_port(name):
  """SPA state texts s_0..s_T of solver-plan episodes equal the plain-Python port's states
  after the same turns (all six families across the tasks)."""
  from tests.envs.texthouse.reference import RefHouse
  env = envs.make(name, tokenizer=TOK)
  tasks = sample_tasks(env, range(30, 36))
  host = [jax.tree.map(lambda x: np.asarray(x)[i], tasks) for i in range(6)]
  plans = [env.solve(t) for t in host]
  num_turns = 12
  got = wm.state_trajectories(name, env, tasks, plans, num_turns)
  for t, plan, texts in zip(host, plans, got):
    ref = RefHouse(t, env.stages, max_steps=env.max_steps)
    want = [_ref_house_text(ref)]
    for a in plan[:num_turns]:
      ref.step(f"<answer>{a}</answer>".encode())
      want.append(_ref_house_text(ref))
    assert texts == want
  assert any("held" in s for texts in got for s in texts)
