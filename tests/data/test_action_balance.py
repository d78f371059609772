"""Action-balanced SFT weights (`sft.action_balance`, data/action_balance.py) against plain
loops: the weights of a plan set, the weighted loss mask, and the demo rows of a JAX env and of
a host game, where the reference reads each turn's action back out of the row's own tokens."""
import re
import types

import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.credit.base import turn_to_token
from agent_rl.data.action_balance import action_kind, turn_weights
from agent_rl.train.config import base_config, validate
from tests.train.tiny import host_demos, tiny_config


def _ref_weights(plans, max_turns, b):
  """The formula as a loop: n(kind)^-b, divided by its mean over every demo turn."""
  counts = {}
  for p in plans:
    for a in p[:max_turns]:
      k = (re.findall(r"[A-Za-z]+", a) or [""])[0].lower()
      counts[k] = counts.get(k, 0) + 1
  raw = [[counts[(re.findall(r"[A-Za-z]+", a) or [""])[0].lower()] ** -b for a in p[:max_turns]]
         for p in plans]
  flat = [w for ws in raw for w in ws]
  mean = sum(flat) / len(flat)
  return [[w / mean for w in ws] for ws in raw]


def test_action_kind_is_the_first_word():
  assert action_kind("go to cabinet 1") == "go"
  assert action_kind("Take apple 1 from fridge 1") == "take"
  assert action_kind("click[buy now]") == "click"
  assert action_kind("  search[red shoes]") == "search"
  assert action_kind("42") == "" and action_kind("") == ""


@pytest.mark.parametrize("b", [0.0, 0.5, 1.0])
def test_turn_weights_match_the_formula(b):
  rng = np.random.default_rng(0)
  verbs = ["go to x", "open x", "go to y", "take a from x", "put a in y", "examine z", "7"]
  probs = np.array([30, 10, 30, 3, 3, 1, 1], float)
  plans = [[verbs[i] for i in rng.choice(len(verbs), size=rng.integers(0, 12),
                                         p=probs / probs.sum())] for _ in range(40)]
  w = turn_weights(plans, 8, b)
  ref = _ref_weights(plans, 8, b)
  assert w.shape == (40, 8) and w.dtype == np.float32
  for i, p in enumerate(plans):
    n = min(len(p), 8)
    np.testing.assert_allclose(w[i, :n], ref[i], rtol=1e-6)
    assert not w[i, n:].any()
  on = np.concatenate([w[i, :min(len(p), 8)] for i, p in enumerate(plans)])
  np.testing.assert_allclose(on.mean(), 1.0, rtol=1e-6)  # the loss keeps its scale
  kinds = np.array([action_kind(a) for p in plans for a in p[:8]])
  totals = {k: on[kinds == k].sum() for k in set(kinds)}
  if b == 0:
    np.testing.assert_array_equal(on, 1.0)
  if b == 1:  # inverse frequency: every kind carries the same total weight
    np.testing.assert_allclose(list(totals.values()), next(iter(totals.values())), rtol=1e-5)


def test_no_turns_is_an_error_naming_the_field():
  with pytest.raises(ValueError, match=r"sft\.action_balance"):
    turn_weights([[], []], 4, 1.0)


def test_turn_weights_reach_the_tokens_as_a_loop_puts_them():
  rng = np.random.default_rng(1)
  n, length, t = 3, 20, 4
  mask = (rng.random((n, length)) < 0.6).astype(np.float32)
  ti = rng.integers(-1, t, size=(n, length)).astype(np.int32)
  mask[ti < 0] = 0.0  # prompts / observations are never targets
  w = rng.random((n, t)).astype(np.float32)
  got = np.asarray(turn_to_token(jnp.asarray(w), jnp.asarray(ti), jnp.asarray(mask)))
  want = np.array([[mask[i, j] * (w[i, ti[i, j]] if ti[i, j] >= 0 else 0.0)
                    for j in range(length)] for i in range(n)])
  np.testing.assert_allclose(got, want, rtol=1e-6)


def _actions_of(tok, tokens, mask, turn_index, turns):
  """Each turn's action text read back from the row's supervised tokens."""
  out = []
  for t in range(turns):
    ids = tokens[(turn_index == t) & (mask > 0)]
    if not len(ids):
      break
    text = tok.decode([int(x) for x in ids[:-1]])  # the turn-end token last
    m = re.search(r"<answer>(.*?)</answer>", text)
    out.append(m.group(1) if m else text)
  return out


def _check_rows(tok, plain, weighted, turns, b):
  """Every supervised token's weight is its turn's: the formula over the actions decoded
  from the plain rows."""
  toks, m0, ti = (np.asarray(x) for x in (plain.tokens, plain.loss_mask, plain.turn_index))
  m1 = np.asarray(weighted.loss_mask)
  acts = [_actions_of(tok, toks[i], m0[i], ti[i], turns) for i in range(len(toks))]
  ref = _ref_weights(acts, turns, b)
  kinds = {action_kind(a) for p in acts for a in p}
  assert len(kinds) >= 2, kinds
  for i in range(len(toks)):
    for t, w in enumerate(ref[i]):
      sel = (ti[i] == t) & (m0[i] > 0)
      np.testing.assert_allclose(m1[i][sel], w, rtol=1e-5)
    np.testing.assert_array_equal(m1[i][m0[i] == 0], 0.0)


def test_jax_env_demo_rows_weigh_each_turn_by_its_kind(tmp_path):
  from agent_rl.eval.evaluate import episode_config
  from agent_rl.train import sft
  from agent_rl.train.setup import build
  c = tiny_config(sft_steps=1)
  c.sft.num_demos, c.rollout.max_turns = 8, 4
  setup = build(c, str(tmp_path))
  ecfg = episode_config(c, setup.tokenizer)
  plain = sft.demo_rows(c, setup, ecfg, str(tmp_path))
  c.sft.action_balance = 1.0
  weighted = sft.demo_rows(c, setup, ecfg, str(tmp_path))
  assert plain.tokens.shape[0] == 8
  np.testing.assert_array_equal(np.asarray(plain.tokens), np.asarray(weighted.tokens))
  _check_rows(setup.tokenizer, plain, weighted, 4, 1.0)


def test_host_demo_rows_weigh_each_turn_by_its_kind_over_every_chunk():
  """Host demos are replayed in chunks of the pool's size (data/host_demos.py); each chunk's
  plans come back row-aligned, and the kinds are counted over all of them."""
  from agent_rl.envs.host.pool import GamePool
  from agent_rl.envs.host.text_env import TextHostEnv
  from agent_rl.envs.host.toy import KeyRoomGame
  from agent_rl.tokenizers import ByteTokenizer
  from agent_rl.train.sft import balanced
  tok = ByteTokenizer()
  env = TextHostEnv(GamePool(KeyRoomGame, 3, workers=0), tok, obs_len=48)
  batches, st, _ = host_demos(env, tok, 7, 40)
  assert len(batches) == 3 and [len(p) for p in st["plans"]] == [3, 3, 1]
  c = base_config()
  c.sft.action_balance = 0.5
  cat = lambda bs, f: np.concatenate([np.asarray(getattr(b, f)) for b in bs])  # noqa: E731
  plain = types.SimpleNamespace(**{f: cat(batches, f) for f in
                                   ("tokens", "loss_mask", "turn_index")})
  weighted = types.SimpleNamespace(loss_mask=cat(balanced(c, batches, st["plans"], 4),
                                                 "loss_mask"))
  acts = [_actions_of(tok, plain.tokens[i], plain.loss_mask[i], plain.turn_index[i], 4)
          for i in range(7)]
  assert acts == [p[:4] for ps in st["plans"] for p in ps]
  _check_rows(tok, plain, weighted, 4, 0.5)


def test_sft_loss_is_weighted_and_its_nll_is_not():
  from agent_rl.train.sft import make_sft_loss
  rng = np.random.default_rng(2)
  lp = -rng.random((3, 10)).astype(np.float32)
  mask = (rng.random((3, 10)) < 0.5) * rng.choice([0.5, 1.0, 3.0], size=(3, 10))
  mb = types.SimpleNamespace(tokens=None, position=None, attention_mask=None, agent=None,
                             loss_mask=jnp.asarray(mask, jnp.float32))
  apply = lambda *a, **k: types.SimpleNamespace(logprobs=jnp.asarray(lp))  # noqa: E731
  loss, m = make_sft_loss(apply)(None, mb, None)
  np.testing.assert_allclose(float(loss), (mask * -lp).sum() / mask.sum(), rtol=1e-5)
  on = mask > 0
  np.testing.assert_allclose(float(m["sft/nll"]), (-lp)[on].mean(), rtol=1e-5)
  assert float(m["sft/num_tokens"]) == on.sum()


@pytest.mark.parametrize("value,plans", [(1.5, "expert"), (-0.1, "expert"),
                                         (0.5, "route_agreement")])
def test_bad_settings_name_the_field(value, plans):
  c = base_config()
  c.sft.action_balance, c.sft.plans = value, plans
  with pytest.raises(ValueError, match=r"sft\.action_balance"):
    validate(c)
