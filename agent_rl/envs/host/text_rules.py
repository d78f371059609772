"""The text rules of a host game's turn (text_env.py's `TextHostEnv` applies them): how a
command is read out of the model's action text (`ACTION_FORMATS`: "answer", "raw"), what the
agent reads (`present`: the game's text and its admissible commands; the invalid-action and
failed-game texts), the state hash, and the game seed of a reset key. Model text is only
compared and passed to the game, never evaluated."""
from __future__ import annotations

import hashlib
from typing import Optional

import numpy as np

from agent_rl.envs.host.game import GameObs
from agent_rl.registry import Registry

ACTION_FORMATS = Registry("host action format")
ASCII_SPACE = " \t\n\r\x0b\x0c"


@ACTION_FORMATS.register("answer")
def answer_command(text: str, max_answer_bytes: int = 256) -> Optional[str]:
  """The command of `<answer>cmd</answer>` (envs/actions.py's rule, one action), or None."""
  i = text.find("<answer>")
  if i < 0:
    return None
  j = text.find("</answer>", i + len("<answer>"))
  if j < 0:
    return None
  content = text[i + len("<answer>"):j]
  if len(content.encode("utf-8")) > max_answer_bytes:
    return None
  cmd = content.split("||")[0].strip(ASCII_SPACE)
  return cmd or None


@ACTION_FORMATS.register("raw")
def raw_command(text: str, max_answer_bytes: int = 256) -> Optional[str]:
  """The first non-empty line of the action text (stripped), or None."""
  for line in text.splitlines():
    cmd = line.strip(ASCII_SPACE)
    if cmd:
      return cmd if len(cmd.encode("utf-8")) <= max_answer_bytes else None
  return None


INVALID_TEXT = {"answer": "Invalid action. Reply with one command as <answer>command</answer>.",
                "raw": "Invalid action. Reply with one command."}
FAILED_TEXT = "The game stopped responding; this episode has ended."
PLAN_PREFIX = "Expert plan: "  # privileged_plans


def present(obs: GameObs, admissible: bool) -> str:
  """The observation as the agent reads it: the game's text, then (admissible) the list."""
  text = obs.text.strip()
  if admissible and obs.admissible:
    text += ("\nYour admissible actions of the current situation are: ["
             + ", ".join(f"'{a}'" for a in obs.admissible) + "].")
  return text


def state_hash(obs: GameObs, presented: str, agent: Optional[int] = None) -> int:
  """BLAKE2b of the game's state key (else the presented text), with who acts next when the
  game is played by several agents (the same game state read by another agent differs)."""
  data = obs.state_key if obs.state_key is not None else presented.encode("utf-8")
  if agent is not None and obs.state_key is not None:
    data += b"|agent=%d" % agent
  return int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "little")


def reset_seed(key_data: np.ndarray) -> int:
  """A game seed in [0, 2**31 - 1) from a reset key's uint32 data `[2]` (the range every
  package's seeding accepts, numpy's RandomState included)."""
  return (int(key_data[0]) << 32 | int(key_data[1])) % (2 ** 31 - 1)
