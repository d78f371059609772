"""Sampled episodes as text: what the agent saw and did, turn by turn.

`render_episodes(batch, tokenizer)` turns an EpisodeBatch into readable text (prompt, each
turn's action, the observation that followed, reward, success) for the report and the
metric sinks (TensorBoard text, wandb table, episodes.jsonl). It reads only the batch's
token layout (rollout/episode.py), so it works for both history layouts:

  concatenated  one row = first + obs_0 + header, action_0, turn_prefix + obs_1 + header,
                action_1, ...: action t is `turn_index == t`; the context run after it is
                the observation that followed turn t.
  windowed      row = T samples of `segment_len` slots; sample t = a context (first + the
                window of past turns + turn_prefix + obs_t + header) then action t. The
                observation that followed turn t - 1 is the tail of sample t's context,
                after its last `turn_prefix` (or after the previous action without pieces).

Tokens are decoded, never re-tokenized; with `pieces` the constant chat markers around
observations are stripped so the text reads as the env wrote it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import numpy as np

from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.rollout.layout import PromptPieces


def _strip(ids: list[int], prefix: Sequence[int], suffix: Sequence[int]) -> list[int]:
  if prefix and ids[:len(prefix)] == list(prefix):
    ids = ids[len(prefix):]
  if suffix and len(ids) >= len(suffix) and ids[len(ids) - len(suffix):] == list(suffix):
    ids = ids[:len(ids) - len(suffix)]
  return ids


def _last_index_of(ids: list[int], sub: Sequence[int]) -> int:
  """Start of the last occurrence of `sub` in `ids`, or -1."""
  k = len(sub)
  if k == 0:
    return -1
  for s in range(len(ids) - k, -1, -1):
    if ids[s:s + k] == list(sub):
      return s
  return -1


@dataclasses.dataclass
class _Turns:
  """One episode's token ids: the prompt, each valid turn's action, and the context that
  followed turn t (None where the batch holds none, e.g. after the last turn)."""
  prompt: list[int]
  actions: list[list[int]]
  after: list[Optional[list[int]]]


def _concat_turns(tok, ti, real, n_turns: int) -> _Turns:
  pos = np.arange(tok.shape[0])
  ctx = real & (ti == -1)
  starts = [pos[ti == t] for t in range(n_turns)]
  if n_turns == 0 or starts[0].size == 0:
    return _Turns([int(x) for x in tok[ctx]], [[] for _ in range(n_turns)], [None] * n_turns)
  prompt = tok[ctx & (pos < starts[0][0])]
  actions, after = [], []
  for t in range(n_turns):
    act = starts[t]
    actions.append([int(x) for x in tok[act]])
    if act.size == 0:
      after.append(None)
      continue
    nxt = next((s[0] for s in starts[t + 1:] if s.size), tok.shape[0])
    run = tok[ctx & (pos > act[-1]) & (pos < nxt)]
    after.append([int(x) for x in run] if run.size else None)
  return _Turns([int(x) for x in prompt], actions, after)


def _window_turns(tok, ti, real, n_turns: int, seg: int, turn_prefix) -> _Turns:
  ctxs, actions = [], []
  for t in range(n_turns):
    sl = slice(t * seg, (t + 1) * seg)
    s_tok, s_ti, s_real = tok[sl], ti[sl], real[sl]
    ctxs.append([int(x) for x in s_tok[s_real & (s_ti == -1)]])
    actions.append([int(x) for x in s_tok[s_ti == t]])
  after: list[Optional[list[int]]] = []
  for t in range(n_turns):
    if t + 1 >= n_turns:
      after.append(None)
      continue
    ctx = ctxs[t + 1]
    cut = _last_index_of(ctx, turn_prefix)
    if cut < 0:  # no pieces given (or the marker is absent): after the previous action
      a = _last_index_of(ctx, actions[t])
      cut = a + len(actions[t]) if a >= 0 else 0
    after.append(ctx[cut:] or None)
  return _Turns(ctxs[0] if ctxs else [], actions, after)


def episode_turns(batch: EpisodeBatch, i: int, pieces: Optional[PromptPieces] = None) -> _Turns:
  """The token ids of episode `i`, split into prompt / actions / following contexts."""
  n_turns = int(np.asarray(batch.valid[i]).sum())
  tok = np.asarray(batch.tokens[i])
  ti = np.asarray(batch.turn_index[i])
  real = (np.ones(tok.shape, bool) if batch.attention_mask is None
          else np.asarray(batch.attention_mask[i]).astype(bool))
  if batch.segment_len:
    return _window_turns(tok, ti, real, n_turns, batch.segment_len,
                         pieces.turn_prefix if pieces is not None else ())
  return _concat_turns(tok, ti, real, n_turns)


def _stop_ids(tokenizer: Any) -> set[int]:
  stops = {tokenizer.eos_id}
  try:  # the chat stop token the sampler stops at (rollout episode_config)
    stops.add(tokenizer.special("<|im_end|>"))
  except KeyError:
    pass
  return stops


def render_episode(batch: EpisodeBatch, tokenizer: Any, i: int,
                   pieces: Optional[PromptPieces] = None) -> str:
  """Text of episode `i` of `batch` (see the module docstring)."""
  turns = episode_turns(batch, i, pieces)
  reward = np.asarray(batch.reward[i], np.float64)
  valid = np.asarray(batch.valid[i]).astype(bool)
  success = np.asarray(batch.success[i]).astype(bool)
  done = np.asarray(batch.done[i]).astype(bool)
  valid_action = np.asarray(batch.valid_action[i]).astype(bool)
  n_turns = int(valid.sum())
  solved = bool(success[valid].any())
  ret = float((reward * valid).sum())
  stops = _stop_ids(tokenizer)
  header, prefix = (pieces.header, pieces.turn_prefix) if pieces is not None else ((), ())
  dec = lambda ids: tokenizer.decode(ids).strip("\n")
  lines = [f"episode {i} (task {int(np.asarray(batch.group_id[i]))}): "
           f"{'solved' if solved else 'not solved'}, return {ret:.3f}, {n_turns} turns",
           "[prompt]", dec(_strip(turns.prompt, (), header))]
  for t in range(n_turns):
    act = turns.actions[t]
    if act and act[-1] in stops:
      act = act[:-1]
    flags = [f"reward {reward[t]:+.3f}"]
    if not valid_action[t]:
      flags.append("invalid action")
    if success[t]:
      flags.append("success")
    if done[t]:
      flags.append("done")
    lines += [f"[turn {t}] action: {dec(act)!r}  ({', '.join(flags)})"]
    if turns.after[t] is not None:
      lines += ["[observation]", dec(_strip(turns.after[t], prefix, header))]
  return "\n".join(lines)


def render_episodes(batch: EpisodeBatch, tokenizer: Any, num: int = 3,
                    pieces: Optional[PromptPieces] = None,
                    episodes: Optional[Sequence[int]] = None) -> list[str]:
  """Texts of the first `num` episodes of `batch` (or of the indices in `episodes`).

  batch: an EpisodeBatch (`tokens [N, L]`, turn fields `[N, T]`), device or host arrays.
  tokenizer: has `decode(ids) -> str`, `eos_id` and `special(name)`.
  pieces: the run's PromptPieces; strips chat markers (and locates observations in the
    windowed layout). Returns a list of `min(num, N)` strings (len(episodes) with indices).
  """
  if not isinstance(batch, EpisodeBatch):
    raise TypeError(f"render_episodes: batch must be an EpisodeBatch, got {type(batch).__name__}")
  n = batch.num_episodes
  if episodes is None:
    if num < 0:
      raise ValueError(f"render_episodes: num must be >= 0, got {num}")
    episodes = range(min(num, n))
  bad = [int(e) for e in episodes if not 0 <= int(e) < n]
  if bad:
    raise ValueError(f"render_episodes: episode indices {bad} outside [0, {n})")
  return [render_episode(batch, tokenizer, int(e), pieces) for e in episodes]


def held_out_episodes(policy, params, env, pieces: PromptPieces, ecfg, tokenizer, *,
                      num_tasks: int, seed: int, num: int = 3, greedy: bool = True,
                      place=lambda x: x, slice_tasks: int = 0) -> list[str]:
  """Rendered greedy episodes on the held-out eval tasks (`config.eval.seed`).

  Runs the same rollout program as `evaluate`'s greedy pass (same config and shapes, so
  the compiled executable is reused) and renders its first `num` episodes: the report's
  "before" and "after" show the same held-out tasks that `eval/success` scores. With
  `slice_tasks` (`config.eval.slice_tasks`) only the first slices that hold `num` episodes
  roll out, as `evaluate` rolls them (its memory, its episodes).
  """
  from agent_rl.envs.tasks import eval_tasks
  from agent_rl.eval.evaluate import rollout_in_slices
  import jax

  g_cfg = dataclasses.replace(ecfg, group_size=1, gate=None, search=None,
                              sampler=dataclasses.replace(ecfg.sampler, greedy=greedy))
  env = env.for_eval() if callable(getattr(env, "for_eval", None)) else env  # host envs
  tasks = eval_tasks(env, num_tasks, seed)
  if slice_tasks:
    take = min(num_tasks, slice_tasks * -(-max(num, 1) // slice_tasks))
    tasks = jax.tree.map(lambda a: a[:take], tasks)
  batch = rollout_in_slices(policy, params, env, tasks, jax.random.key(seed), g_cfg, pieces,
                            slice_tasks, place)
  if jax.process_count() > 1:  # rows live on several hosts: gather them (collective)
    from jax.experimental import multihost_utils
    batch = multihost_utils.process_allgather(batch, tiled=True)
  return render_episodes(jax.device_get(batch), tokenizer, num=num, pieces=pieces)


def config_episodes(c, policy, params, setup, ecfg, place, num: int) -> list[str]:
  """`held_out_episodes` on a run's held-out panel (`config.eval`, the setup's env, prompt
  pieces and tokenizer): the run's report and `train.evaluate --episodes` render the same."""
  return held_out_episodes(policy, params, setup.env, setup.pieces, ecfg, setup.tokenizer,
                           num_tasks=c.eval.num_tasks, seed=c.eval.seed, num=num,
                           greedy=c.eval.greedy, place=place,
                           slice_tasks=c.eval.get("slice_tasks", 0))
