"""Implicit world modeling (IWM) on a host game's early experience (Zhang et al. 2025, "Agent
Learning via Early Experience", arXiv 2510.08558, §4.2).

Early experience: at each expert state s_t of a demonstration the agent takes other actions
a^j, and the game's next states s^j are recorded, with no reward. IWM fits the policy to
predict them, L_IWM = -sum_j log p(s^j | s_t, a^j) (the next-token loss on s^j), as a first
stage before imitation on the expert's own turns (the paper's two-stage recipe: here the
first `sft.iwm_steps` of the `sft.steps` draw IWM rows, train/phases.py).

    found, failed = game_transitions(env, starts, plans, traces, k, num_turns, chunk)
    rows, stats = iwm_rows(tokenizer, chat_pieces(tokenizer, IWM_INSTRUCTION), turn_end,
                           found, like=demo_rows)               # Minibatch [N, W]

Choices where the paper is model-specific or silent (written here so they can be changed):
- The alternatives are `sft.iwm_alternatives` of the game's admissible commands at s_t other
  than the expert's, uniform without replacement, seeded by (chunk, demo row, turn): like the
  demo tasks (train/sft.py's DEMO_SEED_BASE), the same for every run seed. The paper
  samples them from the initial policy; a pretrained instruct model shown the admissible list
  proposes from that set, and a policy trained from scratch proposes text the game does not
  parse, so the admissible set is the support in both cases. A game that exposes no
  admissible commands is refused (error naming `sft.iwm_alternatives`).
- s^j comes from a replay, a fresh reset at the demo's start and the plan's first t commands
  then a^j (pool op "replay", in the workers): a game's state cannot be copied out of it.
- A row is one chat exchange in the run's prompt format (`rollout.layout.chat_pieces`): the
  user message is `IWM_INSTRUCTION` then "Observation: s_t" and "Action: a^j", the assistant
  message s^j; the loss covers s^j and its turn end only. States are the observation texts on
  one line (`world_model.game_state_text`), as SPA's host-game turns. A row that does not fit
  the SFT rows' width has its s_t cut from the end; one whose s^j alone does not fit is left
  out (both counted).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax.numpy as jnp
import numpy as np

from agent_rl.data.world_model import game_state_text
from agent_rl.objective.minibatch import Minibatch
from agent_rl.tokenizers.padded import pack_prompt_completion

IWM_INSTRUCTION = "Predict the game's next observation after the action."


@dataclasses.dataclass(frozen=True)
class Transition:
  """One step of early experience: the observation before, the action, the one after."""
  state: str
  action: str
  next_state: str


def alternatives(admissible: Sequence[str], expert: str, k: int,
                 rng: np.random.Generator) -> list[str]:
  """Up to `k` of the admissible commands other than `expert` (ignoring case, as the env's
  admissible check does, text_env.py), uniform without replacement (sorted first, so the draw
  does not depend on the game's listing order); case variants of one command count once, as
  their first spelling in sorted order."""
  spelling: dict = {}
  for a in sorted(admissible):
    spelling.setdefault(a.lower(), a)
  pool = sorted(a for low, a in spelling.items() if low != expert.lower())
  if not pool:
    return []
  pick = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
  return [pool[i] for i in sorted(pick)]


def game_transitions(env, starts, plans, traces, k: int, num_turns: int,
                     chunk: int) -> tuple[list[Transition], int]:
  """Early experience of demo games: for each game i, turn t < min(len(plan), num_turns) and
  alternative a^j (`alternatives`, rng seeded by (chunk, i, t)), the observation after the
  plan's first t commands and a^j. Returns (transitions in (game, turn, alternative) order,
  the number of replays that failed and were left out).

  env: a TextHostEnv; starts: its games' (task_id, seed); plans: their expert plans; traces:
  their observations along the plans (`TextHostEnv.observation_traces`, GameObs lists)."""
  branch, prefixes, items = [], [], []
  for i, (start, plan, trace) in enumerate(zip(starts, plans, traces)):
    for t in range(min(len(plan), num_turns)):
      obs = trace[t]
      if obs.admissible is None:
        raise ValueError("config.sft.iwm_alternatives: the game exposes no admissible commands "
                         "(GameObs.admissible) to draw early experience from")
      rng = np.random.default_rng((chunk, i, t))
      for a in alternatives(obs.admissible, plan[t], k, rng):
        branch.append((obs.text, a))
        prefixes.append(start)
        items.append(list(plan[:t]) + [a])
  after = env.replayed_observations(prefixes, items)
  out = [Transition(game_state_text(s), a, game_state_text(o.text))
         for (s, a), o in zip(branch, after) if o is not None]
  return out, sum(o is None for o in after)


def iwm_rows(tokenizer, pieces, turn_end: int, transitions: Sequence[Transition],
             like: Minibatch) -> tuple[Optional[Minibatch], dict]:
  """IWM rows `[N, W]` (W: the width of `like`, the SFT demo rows; their dtypes too): tokens
  `pieces.first + enc("Observation: s\\nAction: a") + pieces.header + enc(s') + [turn_end]`,
  the loss mask on s' and the turn end. pieces: the `PromptPieces` of `IWM_INSTRUCTION`
  (`chat_pieces(tokenizer, IWM_INSTRUCTION)`). Returns (rows, or None when none fits;
  {rows, state_cut, dropped})."""
  width, pad_id = like.tokens.shape[1], pieces.pad_id
  first, header = list(pieces.first), list(pieces.header)
  rows, cut, dropped = [], 0, 0
  for tr in transitions:
    action = tokenizer.encode(f"\nAction: {tr.action}")
    target = tokenizer.encode(tr.next_state) + [turn_end]
    state = tokenizer.encode(f"Observation: {tr.state}")
    room = width - len(first) - len(action) - len(header) - len(target)
    if room <= 0:
      dropped += 1
      continue
    if len(state) > room:
      state, cut = state[:room], cut + 1
    prompt = first + state + action + header
    rows.append((prompt, target))
  stats = dict(rows=len(rows), state_cut=cut, dropped=dropped)
  if not rows:
    return None, stats
  n = len(rows)
  tokens, position, attend, turn = pack_prompt_completion(rows, width, pad_id)
  mb = Minibatch(
      tokens=jnp.asarray(tokens, like.tokens.dtype),
      position=jnp.asarray(position, like.position.dtype),
      attention_mask=jnp.asarray(attend, like.attention_mask.dtype),
      loss_mask=jnp.asarray(turn == 0, like.loss_mask.dtype),
      turn_index=jnp.asarray(turn, like.turn_index.dtype),
      old_logprobs=jnp.zeros((n, width), like.old_logprobs.dtype),
      advantages=jnp.zeros((n, width), like.advantages.dtype),
      agent=None if like.agent is None else jnp.zeros((n,), like.agent.dtype))
  return mb, stats
