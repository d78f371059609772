"""Text I/O of the jitted envs with a Qwen-size vocabulary vs a small one (issue 17, section 6).

Small: the 384-piece sentencepiece vocabulary of the tiny runs (trained on Sokoban text).
Large: a synthetic byte-level BPE with Qwen2's 151,643 pieces (+ its 5 added tokens), written
as a hub-format tokenizer.json (`agent_rl.tokenizers.synthetic_byte_level`) and loaded with
`load_hf`. Measures, on this machine's CPU:
  * host set-up: writing/loading the vocabulary, `byte_table()`, and the token-automaton build
    of the Sokoban action rule (4 words) at max_actions 1, 2, 3 (target <= 2 s);
  * per-step cost at batch 1024: the action parser (automaton and byte scanner) on 64-token
    turns, and a whole Sokoban `env.step` (parse + dynamics + grid render), median of repeats
    (target: large within 2x of small). The two vocabularies are timed in alternation, round
    by round, and the ratio is the median of per-round ratios (the machine is shared).

    python benchmarks/text_io.py [--repeats 30] [--out benchmarks/results/text_io.json]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rollout import _tokenizer as small_tokenizer  # noqa: E402  (the tiny runs' vocabulary)
from results_io import write_json  # noqa: E402

TURNS = ["<answer>Up</answer>", "<think>the box is left of me</think><answer>Left || Down</answer>",
         "<answer>up || up || right</answer>", "I go <answer>Right</answer> now", "<answer>jump</answer>",
         "no answer at all, just text that rambles on for a while", "<answer> down </answer>"]


def _call_s(fn, args, calls=5):
  """Seconds per call, averaged over `calls` back-to-back calls (compiled beforehand)."""
  t = time.perf_counter()
  for _ in range(calls):
    out = fn(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - t) / calls


def _paired(cases, repeats):
  """Times each case in turn, `repeats` rounds: the machine is shared, so the large/small
  ratio is taken per round (both measured within a second of each other) and its median kept."""
  for fn, args in cases.values():
    jax.block_until_ready(fn(*args))
  times = {k: [] for k in cases}
  for _ in range(repeats):
    for k, (fn, args) in cases.items():
      times[k].append(_call_s(fn, args))
  return {k: np.asarray(v) for k, v in times.items()}


def _turns(tok, batch, length):
  toks = np.full((batch, length), tok.pad_id, np.int32)
  lens = np.zeros((batch,), np.int32)
  for b in range(batch):
    ids = tok.encode(TURNS[b % len(TURNS)])[:length]
    toks[b, :len(ids)], lens[b] = ids, len(ids)
  return toks, lens


def prepare(tok, name, args, rows):
  """Host set-up timings into rows; returns the jitted (parse, scan, env step) cases."""
  from agent_rl.data.demos import sample_tasks
  from agent_rl.envs import token_parse
  from agent_rl.envs.actions import ActionParser
  from agent_rl.envs.base import Text
  from agent_rl.envs.sokoban import Sokoban
  t = time.perf_counter()
  table, lengths = tok.byte_table()
  rows[f"{name}.byte_table_s"] = time.perf_counter() - t
  rows[f"{name}.vocab"] = int(len(lengths))
  words = [b"up", b"down", b"left", b"right"]
  for a in (1, 2, 3):
    best = None
    for _ in range(3):
      t = time.perf_counter()
      auto = token_parse.build(table, lengths, words, [0, 1, 2, 3], a)
      dt = time.perf_counter() - t
      best = dt if best is None else min(best, dt)
    rows[f"{name}.automaton_build_s.max_actions={a}"] = best
    rows[f"{name}.automaton_shape.max_actions={a}"] = None if auto is None else list(auto.next.shape)
  toks, lens = _turns(tok, args.batch, args.length)
  text = Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))
  parser = ActionParser(tok, {"up": 0, "down": 1, "left": 2, "right": 3}, max_actions=2,
                        max_answer_bytes=96)
  assert parser.automaton is not None, name
  fast, slow = jax.jit(jax.vmap(parser)), jax.jit(jax.vmap(parser.scan))
  a, b = fast(text), slow(text)
  assert np.array_equal(np.asarray(a.ids), np.asarray(b.ids)), "automaton != scanner"
  env = Sokoban(tokenizer=tok, max_actions=2)
  tasks = sample_tasks(env, range(args.batch))
  keys = jax.random.split(jax.random.key(0), args.batch)
  state, _ = jax.jit(jax.vmap(env.reset))(keys, tasks)
  rows[f"{name}.obs_len"] = int(env.obs_len)
  return {f"{name}.parse_automaton_s": (fast, (text,)), f"{name}.parse_scanner_s": (slow, (text,)),
          f"{name}.env_step_s": (jax.jit(jax.vmap(env.step)), (state, text))}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=30)
  ap.add_argument("--batch", type=int, default=1024)
  ap.add_argument("--length", type=int, default=64)
  ap.add_argument("--vocab", type=int, default=151_643)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "text_io.json"))
  args = ap.parse_args()
  from agent_rl.tokenizers import load_hf, synthetic_byte_level
  rows: dict = {"batch": args.batch, "turn_tokens": args.length, "repeats": args.repeats,
                "platform": platform.platform(), "cpus": os.cpu_count(), "jax": jax.__version__,
                "backend": jax.default_backend()}
  with tempfile.TemporaryDirectory() as tmp:
    cases = prepare(small_tokenizer(tmp), "small", args, rows)
    t = time.perf_counter()
    d = synthetic_byte_level(os.path.join(tmp, "qwen_size"), args.vocab, words=[
        "up", "down", "left", "right", "Up", "Down", "Left", "Right", "answer", "<answer>",
        "</answer>", "think", "||"])
    rows["large.write_tokenizer_json_s"] = time.perf_counter() - t
    t = time.perf_counter()
    big = load_hf(d)
    rows["large.load_hf_s"] = time.perf_counter() - t
    cases.update(prepare(big, "large", args, rows))
  fast = {k: v for k, v in cases.items() if "scanner" not in k}
  times = _paired(fast, args.repeats)
  times.update(_paired({k: v for k, v in cases.items() if "scanner" in k}, 3))
  for k, v in times.items():
    rows[k] = float(np.median(v))
  for k in ("parse_automaton_s", "env_step_s"):
    ratio = times[f"large.{k}"] / times[f"small.{k}"]
    rows[f"ratio.{k}.large_over_small.median"] = float(np.median(ratio))
    rows[f"ratio.{k}.large_over_small.iqr"] = [float(np.percentile(ratio, 25)),
                                               float(np.percentile(ratio, 75))]
  write_json(args.out, rows, indent=2)


if __name__ == "__main__":
  main()
