"""config.tokenizer.env_symbols: the env's `tokenizer_symbols` (MiniShop's item ids) become single
tokens of the tokenizer a run trains, the env still parses and plays with it, and an env without
symbols is an error naming the field."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import envs
from agent_rl.envs.base import Text
from agent_rl.envs.tasks import sample_tasks
from agent_rl.train.setup import build_tokenizer, env_symbols
from configs.gigpo_minishop import get_config


def _config(on: bool):
  c = get_config("tiny")
  c.env.kwargs.num_products = 60   # a small catalogue: a quick corpus
  c.env.kwargs.num_results = 20
  c.tokenizer.env_symbols = on
  return c


def _turn(tok, text, width=48):
  ids = tok.encode(text)[:width]
  arr = np.zeros((width,), np.int32)
  arr[:len(ids)] = ids
  return Text(tokens=jnp.asarray(arr), length=jnp.int32(len(ids)))


def test_item_ids_are_one_token_and_plans_replay(tmp_path):
  c = _config(True)
  assert get_config("tiny").tokenizer.env_symbols  # MiniShop's tiny sets it
  tok = build_tokenizer(c, str(tmp_path / "on"))
  plain = build_tokenizer(_config(False), str(tmp_path / "off"))
  ids = env_symbols(c)
  assert len(ids) == 60 and len(set(ids)) == 60
  for a in ids:
    assert len(tok.encode(a)) == 1 and tok.decode(tok.encode(a)) == a
    assert tok.decode(tok.encode(f"<answer>click[{a}]</answer>")) == f"<answer>click[{a}]</answer>"
  assert np.mean([len(plain.encode(a)) for a in ids]) >= 4   # without: digits split, ~6 pieces
  # The env renders and parses with the new tokenizer: expert plans replay to success.
  env = envs.make(c.env.name, tokenizer=tok, **dict(c.env.kwargs))
  reset, step = jax.jit(env.reset), jax.jit(env.step)
  tasks = sample_tasks(env, range(6))
  for i in range(6):
    task = jax.tree.map(lambda x: x[i], tasks)
    state, obs = reset(jax.random.key(i), task)
    page = tok.decode(np.asarray(obs.tokens)[:int(obs.length)])
    for a in env.solve(task):
      state, obs, _, _, info = step(state, _turn(tok, f"<answer>{a}</answer>"))
      assert bool(info["valid_action"]), (i, a)
      if a.startswith("search["):
        page = tok.decode(np.asarray(obs.tokens)[:int(obs.length)])
        assert any(x in page and len(tok.encode(x)) == 1 for x in ids)  # ids on the page
    assert bool(info["success"]) and bool(state.done)


def test_vocabulary_too_small_for_the_symbols_names_the_field(tmp_path):
  c = _config(True)
  c.tokenizer.vocab_size = 300   # 60 ids + 256 byte pieces + specials do not fit
  with pytest.raises(ValueError, match="config.tokenizer.vocab_size"):
    build_tokenizer(c, str(tmp_path))


def test_env_without_symbols_names_the_field(tmp_path):
  c = _config(True)
  c.env.name, c.env.kwargs = "sokoban", type(c.env.kwargs)()
  with pytest.raises(ValueError, match="config.tokenizer.env_symbols"):
    build_tokenizer(c, str(tmp_path))
  c.env.name = "host:textworld"
  with pytest.raises(ValueError, match="config.tokenizer.env_symbols"):
    env_symbols(c)
