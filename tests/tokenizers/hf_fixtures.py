"""Tiny Hugging Face tokenizer directories built locally (nothing is downloaded), one per family.

`hf_dir(style, template=None)` trains once per process on `corpus()` and caches the
directory; `template` names an entry of agent_rl.tokenizers.templates.TEMPLATES to write as
the chat template instead of the family's own.
"""
import json
import os
import random
import tempfile

from agent_rl.tokenizers import templates
from agent_rl.tokenizers.hf_train import train_hf_tokenizer

WORDS = ["the", "box", "is", "at", "up", "down", "left", "right", "wall", "goal", "player",
         "Push", "You", "are", "éclair", "naïve", "日本語", "🙂", "Ωmega", "<answer>", "</answer>",
         "||", "#_P", "_O#", "(3, 4).", "12", "2048", "\t", "  ", "\n", "\n\n", "don't", "it's"]
PADS = {"llama3": "<|end_of_text|>"}   # Llama-3 ships without a pad token
_CACHE: dict = {}
_DIRS: list = []  # TemporaryDirectory objects: removed when the test process exits


def corpus(n: int = 400, seed: int = 0) -> list[str]:
  rng = random.Random(seed)
  return ["".join(rng.choice(WORDS) + rng.choice([" ", "", " ", "\n"]) for _ in range(24))
          for _ in range(n)]


def hf_dir(style: str, template: str | None = None, vocab_size: int = 700) -> str:
  key = (style, template, vocab_size)
  if key not in _CACHE:
    _DIRS.append(tempfile.TemporaryDirectory(prefix=f"hf_{style}_"))
    out = os.path.join(_DIRS[-1].name, "tok")
    src = None if template is None else templates.TEMPLATES[template]
    _CACHE[key] = train_hf_tokenizer(corpus(), out, vocab_size, style=style, chat_template=src)
  return _CACHE[key]


def edited_copy(src: str, dst: str, file: str, edit) -> str:
  """A copy of directory `src` at `dst` whose JSON `file` is passed through `edit(dict)`
  (return None from edit to delete the file)."""
  os.makedirs(dst, exist_ok=True)
  for name in os.listdir(src):
    with open(os.path.join(src, name), encoding="utf-8") as f:
      text = f.read()
    if name == file:
      new = edit(json.loads(text))
      if new is None:
        continue
      text = json.dumps(new, ensure_ascii=False)
    with open(os.path.join(dst, name), "w", encoding="utf-8") as f:
      f.write(text)
  return dst
