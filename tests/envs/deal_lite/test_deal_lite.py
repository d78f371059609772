"""DealLite vs plain-Python references written from the docstrings: a brute force over all
allocations (Nash, Pareto, bounds), the game rules re-implemented on the turn's bytes (regex
parse), the scripted bargainers re-implemented as loops, the sampler's enumeration replayed on
the same draws. Random turns (valid, malformed, garbage tokens) drive env and reference."""
import functools
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.base import Text
from agent_rl.envs.deal_lite import DealLite, game
from batched import vstep
from conftest import CharTokenizer

TOK = CharTokenizer()
A_LEN = 320
B = 48
ROLES = ("alice", "bob")
ENV = envs.make("deal_lite", tokenizer=TOK)
WS = b" \t\n\r\x0b\x0c"
_OFFER_RE = re.compile(rb"<offer>[%s]*([0-9]{1,9})[%s]+([0-9]{1,9})[%s]+([0-9]{1,9})[%s]*</offer>"
                       % ((re.escape(WS),) * 4))


# -- references ------------------------------------------------------------------------------
def allocations(c):
  return list(itertools.product(*[range(x + 1) for x in c]))


def utils(c, v, x):
  return sum(a * b for a, b in zip(v[0], x)), sum(b * (n - a) for a, b, n in zip(x, v[1], c))


def ref_nash(c, v):
  best, arg = -1, None
  for x in allocations(c):
    ua, ub = utils(c, v, x)
    if ua * ub > best:
      best, arg = ua * ub, x
  return arg, best


def ref_pareto(c, v, x):
  ux = utils(c, v, x)
  for y in allocations(c):
    uy = utils(c, v, y)
    if uy[0] >= ux[0] and uy[1] >= ux[1] and uy != ux:
      return False
  return True


def ref_parse(data: bytes, max_bytes=256, width=64):
  if len(data) > max_bytes:
    return ("invalid",)
  s = data.strip()
  if len(s) > width:
    return ("invalid",)
  if s == b"<accept>":
    return ("accept",)
  if s == b"<walk>":
    return ("walk",)
  m = _OFFER_RE.fullmatch(s)
  return ("offer", tuple(int(g) for g in m.groups())) if m else ("invalid",)


def bot_offer(name, c, v):
  """Bob's offer (what bob keeps) under the scripted.py docstring's rules."""
  if name == "greedy":
    return tuple(n if b > 0 else 0 for n, b in zip(c, v[1]))
  best, arg = None, None
  for x in allocations(c):     # lexicographic in alice's items; strict > keeps the first
    ua, ub = utils(c, v, x)
    if name == "fair":
      key = (min(ua, ub), ua + ub)
    else:
      if 100 * ub < 60 * 10:
        continue
      key = (ua, ub)
    if best is None or key > best:
      best, arg = key, x
  return tuple(n - a for n, a in zip(c, arg))


BOTS = {"fair": (50, 0), "greedy": (80, 0), "walker": (60, 2)}


class RefGame:
  def __init__(self, c, v, max_turns=6, penalty=-0.1, total=10, bot=None):
    self.c, self.v, self.max_turns, self.penalty, self.total, self.bot = c, v, max_turns, penalty, total, bot
    self.turn, self.agent, self.alloc, self.by = 0, 0, None, -1
    self.offers, self.invalid = [0, 0], [0, 0]
    self.deal = self.walked = self.done = False

  def turn_(self, act):
    """One turn; returns (terms [4], valid, deal now, truncated now)."""
    terms = [0.0] * 4
    if self.done:
      return terms, False, False, False
    k, valid, deal = self.agent, True, False
    if act[0] == "offer" and all(0 <= x <= n for x, n in zip(act[1], self.c)):
      self.alloc = act[1] if k == 0 else tuple(n - x for x, n in zip(act[1], self.c))
      self.by = k
      self.offers[k] += 1
    elif act[0] == "accept" and self.by == 1 - k:
      deal = self.deal = True
    elif act[0] == "walk":
      self.walked = True
    else:
      valid = False
      self.invalid[k] += 1
      terms[k] += self.penalty
      terms[2 + k] = 1.0
    self.turn += 1
    if deal:
      ua, ub = utils(self.c, self.v, self.alloc)
      terms[0] += ua / self.total
      terms[1] += ub / self.total
    ended = deal or self.walked
    trunc = self.turn >= self.max_turns and not ended
    self.done = ended or self.turn >= self.max_turns
    self.agent = 1 - k
    return terms, valid, deal, trunc

  def bot_act(self):
    pct, walk_after = BOTS[self.bot]
    if self.by == 0 and 100 * utils(self.c, self.v, self.alloc)[1] >= pct * self.total:
      return ("accept",)
    if walk_after and self.offers[1] >= walk_after:
      return ("walk",)
    return ("offer", bot_offer(self.bot, self.c, self.v))

  def step(self, act):
    terms, valid, deal, trunc = self.turn_(act)
    if self.bot is not None and not self.done:
      t2, _, d2, tr2 = self.turn_(self.bot_act())
      terms, deal, trunc = [a + b for a, b in zip(terms, t2)], deal or d2, trunc or tr2
    return terms, valid, deal, trunc

  def text(self):
    r = 0 if self.bot else self.agent
    nums = lambda xs: " ".join(str(x) for x in xs)
    if self.by < 0:
      offer = " No offer."
    else:
      mine = self.alloc if r == 0 else tuple(n - a for n, a in zip(self.c, self.alloc))
      offer = f" {'Your' if self.by == r else 'Their'} offer gives you: {nums(mine)}."
    return (f"You are {ROLES[r]}. Items: {nums(self.c)}. Your values: {nums(self.v[r])}.{offer} "
            f"Turns left: {max(self.max_turns - self.turn, 0)}.")


# -- helpers -----------------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnums=(0, 2))
def _fresh(env, key, n):
  tasks = jax.vmap(env.sample_task)(jax.random.split(key, n))
  return tasks, *jax.vmap(env.reset)(jax.random.split(key, n), tasks)


def _actions(token_lists):
  toks = np.zeros((len(token_lists), A_LEN), np.int32)
  lens = np.zeros((len(token_lists),), np.int32)
  for k, ids in enumerate(token_lists):
    toks[k, :len(ids)], lens[k] = ids, len(ids)
  return Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))


_TABLE, _TLEN = TOK.byte_table()


def _bytes(ids):
  return b"".join(bytes(_TABLE[i, :_TLEN[i]]) for i in ids)


def _decode(obs, k):
  return TOK.decode(np.asarray(obs.tokens[k])[:int(obs.length[k])])


_MALFORMED = ["<offer> 1 2 </offer>", "<offer> 1 2 3 4 </offer>", "<offer> 1,2,3 </offer>",
              "<OFFER> 1 2 3 </OFFER>", "<accept> now", "accept", "<walk/>", "", "   \n",
              "<offer> 1234567890 0 0 </offer>", "<offer> -1 2 3 </offer>", "<offer> +1 2 3 </offer>",
              "<offer> 1 2 3 </offer> <accept>", "<offer> 1 2 3 </offer", "<think>ok</think><accept>",
              "<offer>" + " " * 60 + "1 1 1 </offer>", "<accept>" + " " * 300, "<offer> 1 2 3 </offer>x",
              "<offer>1 2 3</offer>", "<offer>\n0001\t2  0\n</offer>", "\t<walk>  ", "<answer>1</answer>"]


def _random_turn(rng, counts):
  r = rng.random()
  ws = lambda lo=0: "".join(rng.choice([" ", "\t", "\n"], size=int(rng.integers(lo, 3))))
  if r < 0.4:
    nums = [int(rng.integers(0, n + 2)) for n in counts]
    return TOK.encode(ws() + "<offer>" + ws() + (ws(1)).join(map(str, nums)) + ws() + "</offer>" + ws())
  if r < 0.65:
    return TOK.encode(ws() + "<accept>" + ws())
  if r < 0.7:
    return TOK.encode("<walk>")
  if r < 0.88:
    return TOK.encode(_MALFORMED[int(rng.integers(len(_MALFORMED)))])
  return [int(i) for i in rng.integers(1, TOK.vocab_size, size=int(rng.integers(0, 24)))]


def _play(env, bot, seed, steps):
  """Random turns through env and RefGame side by side, checking every output."""
  rng = np.random.default_rng(seed)
  tasks, states, obs = jax.device_get(_fresh(env, jax.random.key(seed), B))
  refs = [RefGame(tuple(int(x) for x in tasks.counts[k]), [tuple(int(x) for x in r) for r in tasks.values[k]],
                  bot=bot) for k in range(B)]
  for k in range(B):
    assert _decode(obs, k) == refs[k].text()
  seen = dict(deal=0, walk=0, trunc=0, invalid=0)
  for _ in range(steps):
    turns = [_random_turn(rng, g.c) for g in refs]
    agents = [g.agent if bot is None else 0 for g in refs]
    states, obs, reward, done, info = jax.device_get(vstep(env, states, _actions(turns)))
    for k, g in enumerate(refs):
      was_done, was_walked = g.done, g.walked
      terms, valid, deal, trunc = g.step(ref_parse(_bytes(turns[k])))
      np.testing.assert_allclose(info["reward_terms"][k], terms, atol=1e-6, err_msg=str(k))
      w = (1, 1, 0, 0) if bot is None else (1, 0, 0, 0)
      np.testing.assert_allclose(reward[k], np.dot(terms, w), atol=1e-6)
      assert (bool(done[k]), bool(info["valid_action"][k]), bool(info["success"][k]), bool(info["truncated"][k])) \
          == (g.done, valid, deal, trunc), (k, _bytes(turns[k]))
      if not was_done:
        assert int(info["agent_id"][k]) == agents[k]
      if not g.done:
        assert int(info["next_agent"][k]) == (g.agent if bot is None else 0)
      assert list(states.invalid[k]) == g.invalid and list(states.offers[k]) == g.offers
      assert bool(info["deal"][k]) == g.deal
      pareto = g.deal and ref_pareto(g.c, g.v, g.alloc)
      assert bool(info["pareto"][k]) == pareto
      _, best = ref_nash(g.c, g.v)
      prod = np.prod(utils(g.c, g.v, g.alloc)) if g.deal else 0
      np.testing.assert_allclose(info["nash_gap"][k], (best - prod) / best, atol=1e-6)
      assert _decode(obs, k) == g.text()
      if not was_done:
        seen["deal"] += deal
        seen["walk"] += g.walked and not was_walked
        seen["trunc"] += trunc
        seen["invalid"] += not valid
  return seen


# -- tests -------------------------------------------------------------------------------------
def test_random_turns_match_reference_rules():
  seen = {}
  for seed in (0, 1):
    for key, val in _play(ENV, None, seed, ENV.max_turns + 1).items():
      seen[key] = seen.get(key, 0) + val
  assert all(v > 0 for v in seen.values()), seen


@pytest.mark.parametrize("bot", ["fair", "greedy", "walker"])
def test_scripted_opponents_follow_their_rules(bot):
  env = DealLite(tokenizer=TOK, opponent=bot)
  seen = _play(env, bot, 7, 4)
  assert seen["deal"] > 0 and seen["invalid"] > 0, seen
  assert env.roles == ROLES and env.reward_weights == (1.0, 0.0, 0.0, 0.0)


def test_walker_walks_instead_of_its_third_offer():
  env = DealLite(tokenizer=TOK, opponent="walker")
  tasks, states, _ = _fresh(env, jax.random.key(3), 8)
  keep_all = [TOK.encode("<offer> " + " ".join(map(str, np.asarray(c))) + " </offer>") for c in tasks.counts]
  for t in range(3):
    states, _, _, done, _ = jax.device_get(vstep(env, states, _actions(keep_all)))
    assert list(done) == [t == 2] * 8
  assert np.all(states.walked) and np.all(states.offers[:, 1] == 2) and not np.any(states.deal)


def test_sampler_replays_enumeration_and_value_rule():
  keys = jax.random.split(jax.random.key(11), 64)
  tasks = jax.device_get(jax.jit(jax.vmap(ENV.sample_task))(keys))
  valid = []
  for c in itertools.product(range(1, 5), repeat=3):
    vs = [v for v in itertools.product(range(11), repeat=3) if sum(a * b for a, b in zip(v, c)) == 10]
    pairs = [(a, b) for a in vs for b in vs
             if all(x + y > 0 for x, y in zip(a, b)) and any(x > 0 and y > 0 for x, y in zip(a, b))]
    if pairs:
      valid.append((c, pairs))
  for k in range(64):
    u = np.asarray(jax.random.uniform(keys[k], (2,)), np.float32)
    c, pairs = valid[min(int(np.floor(u[0] * np.float32(len(valid)))), len(valid) - 1)]
    va, vb = pairs[min(int(np.floor(u[1] * np.float32(len(pairs)))), len(pairs) - 1)]
    assert tuple(tasks.counts[k]) == c and tuple(tasks.values[k, 0]) == va and tuple(tasks.values[k, 1]) == vb
  again = jax.device_get(jax.jit(jax.vmap(ENV.sample_task))(keys))
  np.testing.assert_array_equal(again.values, tasks.values)
  assert len({tuple(c) for c in tasks.counts}) > 20


def test_solve_reaches_brute_force_nash_and_host_solutions():
  tasks, states, _ = jax.device_get(_fresh(ENV, jax.random.key(5), B))
  plans = [ENV.solve(jax.tree.map(lambda x: x[k], tasks)) for k in range(B)]
  assert all(len(p) == 2 and p[1] == "<accept>" for p in plans)
  for t in range(2):
    states, _, reward, done, info = jax.device_get(vstep(ENV, states, _actions([TOK.encode(p[t]) for p in plans])))
  assert np.all(done) and np.all(info["deal"]) and np.all(info["pareto"]) and np.all(info["nash_gap"] == 0)
  for k in range(B):
    c, v = tuple(int(x) for x in tasks.counts[k]), [tuple(int(x) for x in r) for r in tasks.values[k]]
    x, best = ref_nash(c, v)
    assert plans[k][0] == "<offer> %d %d %d </offer>" % x and game.nash_allocation(c, v) == x
    ua, ub = utils(c, v, x)
    np.testing.assert_allclose(info["reward_terms"][k], [ua / 10, ub / 10, 0, 0], atol=1e-6)
    assert best > 0
    assert game.pareto_frontier(c, v) == [y for y in allocations(c) if ref_pareto(c, v, y)]
    us = [utils(c, v, y) for y in allocations(c)]
    assert game.upper_bounds(c, v) == (max(a for a, b in us if b > 0), max(b for a, b in us if a > 0))


@pytest.mark.parametrize("bot", ["fair", "greedy", "walker"])
def test_solve_against_scripted_is_best_first_exchange(bot):
  env = DealLite(tokenizer=TOK, opponent=bot)
  tasks, states, _ = jax.device_get(_fresh(env, jax.random.key(9), 16))
  plans = [env.solve(jax.tree.map(lambda x: x[k], tasks)) for k in range(16)]
  got = np.zeros(16)
  for t in range(2):
    turns = [TOK.encode(p[min(t, len(p) - 1)]) if t < len(p) else TOK.encode("<walk>") for p in plans]
    states, _, _, _, info = jax.device_get(vstep(env, states, _actions(turns)))
    got += info["reward_terms"][:, 0]
  for k in range(16):
    c, v = tuple(int(x) for x in tasks.counts[k]), [tuple(int(x) for x in r) for r in tasks.values[k]]
    best = 0.0
    for x in allocations(c):
      for tail in ([], [("accept",)]):
        g, total = RefGame(c, v, bot=bot), 0.0
        for act in [("offer", x)] + tail:
          total += g.step(act)[0][0]
        best = max(best, total)
    assert got[k] == pytest.approx(best, abs=1e-6), (k, plans[k])


def test_state_hash_equal_states_and_jit_matches_eager():
  task = ENV.task_from_values([1, 2, 3], [[1, 0, 3], [4, 3, 0]])
  s1, _ = ENV.reset(jax.random.key(0), task)
  s2, _ = ENV.reset(jax.random.key(1), task)
  assert int(ENV.state_hash(s1)) == int(ENV.state_hash(s2))
  a = Text(*[x[0] for x in jax.tree.leaves(_actions([TOK.encode("<offer> 1 1 1 </offer>")]))])
  out_jit = jax.jit(ENV.step)(s1, a)
  out_eager = ENV.step(s2, a)
  for x, y in zip(jax.tree.leaves(out_jit), jax.tree.leaves(out_eager)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert int(out_jit[4]["state_hash"]) != int(ENV.state_hash(s1))
  assert int(out_jit[4]["state_hash"]) == int(ENV.state_hash(out_eager[0]))


def test_contract_fields_and_obs_len():
  assert ENV.roles == ROLES and set(ENV.role_reward_terms) <= set(ENV.reward_names)
  assert len(ENV.role_reward_terms) == len(ENV.roles)
  for form in ("<offer> a b c </offer>", "<accept>", "<walk>"):
    assert form in ENV.instruction
  longest = (len("You are alice.") + len(" Items:") + 3 * 2 + 1 + len(" Your values:") + 3 * 3 + 1
             + len(" Their offer gives you:") + 3 * 2 + 1 + len(" Turns left:") + 2 + 1)
  assert ENV.obs_len == longest


@pytest.mark.parametrize("kwargs, field", [(dict(max_count=0), "max_count"), (dict(total=0), "total"),
                                           (dict(max_turns=1), "max_turns"), (dict(opponent="bogus"), "opponent"),
                                           (dict(max_action_bytes=8), "max_action_bytes"),
                                           (dict(total=1), "total=1")])
def test_bad_config_raises_naming_the_field(kwargs, field):
  with pytest.raises(ValueError, match=field):
    DealLite(tokenizer=TOK, **kwargs)


def test_task_from_values_rejects_bad_values():
  with pytest.raises(ValueError, match="values"):
    ENV.task_from_values([1, 2, 3], [[1, 1, 1], [0, 0, 0]])
  with pytest.raises(ValueError, match="counts"):
    ENV.task_from_values([0, 2, 3], [[1, 1, 1], [1, 1, 1]])
