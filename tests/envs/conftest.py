"""Shared fixtures for env tests: a tiny character-level tokenizer (independent of sentencepiece)."""
import numpy as np
import pytest

SPECIALS = ("<answer>", "</answer>", "<think>", "</think>")


class CharTokenizer:
  """id 0 = pad; then the specials as single tokens; then one token per character."""
  pad_id, bos_id, eos_id = 0, 0, 0

  def __init__(self, extra_chars: str = "√\n\t"):
    chars = [chr(c) for c in range(32, 127)] + list(extra_chars)
    self.vocab = ["<pad>"] + list(SPECIALS) + chars
    self.index = {p: i for i, p in enumerate(self.vocab)}

  @property
  def vocab_size(self):
    return len(self.vocab)

  def special(self, name):
    return self.index[name]

  def encode(self, text):
    out, i = [], 0
    while i < len(text):
      for s in SPECIALS:
        if text.startswith(s, i):
          out.append(self.index[s])
          i += len(s)
          break
      else:
        out.append(self.index[text[i]])
        i += 1
    return out

  def decode(self, ids):
    return "".join(self.vocab[int(i)] for i in np.asarray(ids).reshape(-1) if int(i) != 0)

  def byte_table(self):
    rows = [b""] + [p.encode("utf-8") for p in self.vocab[1:]]
    k = max(len(r) for r in rows)
    table = np.zeros((len(rows), k), np.uint8)
    for i, r in enumerate(rows):
      table[i, :len(r)] = np.frombuffer(r, np.uint8)
    return table, np.array([len(r) for r in rows], np.int32)


@pytest.fixture(scope="session")
def char_tok():
  return CharTokenizer()


@pytest.fixture(scope="session")
def sp_tok(tmp_path_factory):
  """A small sentencepiece tokenizer trained on Sokoban/FrozenLake text (agent_rl.tokenizers)."""
  tokenizers = pytest.importorskip("agent_rl.tokenizers")
  import jax
  from agent_rl.envs import frozenlake, sokoban
  texts = []
  for name, env in (("sokoban", sokoban.Sokoban(tokenizer=CharTokenizer())),
                    ("frozenlake", frozenlake.FrozenLake(tokenizer=CharTokenizer()))):
    tasks = jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.key(0), 40))
    for i in range(40):
      texts.append(env.render_text(jax.tree.map(lambda x: np.asarray(x[i]), tasks)))
    texts.append(env.instruction)
  texts += ["<answer>Up || Left</answer>", "<answer>Right</answer>", "<answer>Down || Down</answer>"] * 20
  path = str(tmp_path_factory.mktemp("tok") / "env.model")
  tokenizers.train_tokenizer(texts, path, vocab_size=400, hard_vocab_limit=False)
  return tokenizers.Tokenizer.load(path)
