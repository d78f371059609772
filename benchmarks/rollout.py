"""Rollout throughput: the compiled loop vs the host-bridge loop, same env and policy.

Tiny policy (`get_preset("tiny")`, random init) on Sokoban 6x6 / 1 box, 16 tasks x G=8
episodes, 5 turns, <= 32 tokens per turn. The host-bridge side drives the same jitted
prefill/decode steps with the env stepped from Python per turn (`JaxHostEnv`), which is how
Python-env frameworks (verl-agent, RAGEN) run; the compiled side is one jitted program.
Reports episodes/s and generated tokens/s for both, their ratio, compile times, and the
host loop's split of wall time into generation (decode), observation prefill and env.

    python benchmarks/rollout.py [--repeats 3] [--out benchmarks/results/rollout.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def _tokenizer(tmp: str):
  """A small sentencepiece vocabulary trained on Sokoban-style text (rooms, answers, prompt)."""
  from agent_rl.tokenizers import Tokenizer, train_tokenizer
  texts = []
  glyph_rows = ["#" * 6, "#_OXP#", "#__√S#", "#_X__#", "#O___#"]
  for i in range(200):
    texts.append("\n".join(glyph_rows[(i + j) % 5] for j in range(6)) + "\n")
    texts.append(f"<answer>{['Up', 'Down', 'Left', 'Right'][i % 4]}</answer>")
  texts.append("You are solving Sokoban. Push every box (X) onto a target (O); boxes can be "
               "pushed, not pulled. Symbols: # wall, _ floor, O target, X box, √ box on target, "
               "P you, S you on target. Actions: Up, Down, Left, Right. Answer with up to 1 "
               "action(s) separated by ||, e.g. <answer>Up || Left</answer>. system user "
               "assistant You are a helpful agent.")
  path = os.path.join(tmp, "sokoban.model")
  train_tokenizer(texts * 5, path, 384)
  return Tokenizer.load(path)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--tasks", type=int, default=16)
  ap.add_argument("--group", type=int, default=8)
  ap.add_argument("--turns", type=int, default=5)
  ap.add_argument("--max_tokens", type=int, default=32)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "rollout.json"))
  args = ap.parse_args()

  from agent_rl.envs.sokoban import Sokoban
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  from agent_rl.rollout.bridge import HostRollout, JaxHostEnv
  from agent_rl.rollout.compiled import make_rollout
  from agent_rl.rollout.episode import EpisodeConfig
  from agent_rl.rollout.layout import chat_pieces
  from agent_rl.rollout.policy import Policy
  from agent_rl.rollout.sampler import SamplerConfig

  with tempfile.TemporaryDirectory() as tmp:
    tok = _tokenizer(tmp)
  env = Sokoban(tokenizer=tok, dim_room=(6, 6), num_boxes=1)
  mcfg = get_preset("tiny", vocab_size=tok.vocab_size)
  graphdef, params = nnx.split(Transformer(mcfg, rngs=nnx.Rngs(0)))
  policy = Policy.from_model(mcfg, graphdef)
  pieces = chat_pieces(tok, env.instruction)
  from agent_rl.tokenizers.chat import stop_ids
  stop = stop_ids(tok)
  cfg = EpisodeConfig(sampler=SamplerConfig(temperature=1.0, max_tokens=args.max_tokens,
                                            stop_tokens=stop),
                      max_turns=args.turns, group_size=args.group)
  tasks = jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.PRNGKey(0), args.tasks))
  n = args.tasks * args.group

  def bench(fn, label):
    t0 = time.perf_counter()
    batch, m = jax.block_until_ready(fn(params, tasks, jax.random.PRNGKey(100)))
    first = time.perf_counter() - t0
    secs, toks, splits = [], [], []
    for r in range(args.repeats):
      t0 = time.perf_counter()
      batch, m = jax.block_until_ready(fn(params, tasks, jax.random.PRNGKey(r)))
      secs.append(time.perf_counter() - t0)
      toks.append(float(m["rollout/gen_tokens"]))
      if hasattr(fn, "timings"):
        splits.append(dict(fn.timings))
    s = float(np.median(secs))
    out = dict(first_call_s=first, median_s=s, episodes_per_s=n / s,
               gen_tokens_per_s=float(np.mean(toks)) / s, gen_tokens=float(np.mean(toks)),
               turns_mean=float(m["rollout/turns_mean"]),
               decode_steps=float(m["rollout/decode_steps"]))
    if splits:
      out["split_s"] = {k: float(np.median([sp[k] for sp in splits])) for k in splits[0]}
    print(label, json.dumps(out, indent=1))
    return out

  compiled = bench(make_rollout(policy, env, cfg, pieces), "compiled")
  host = bench(HostRollout(policy, JaxHostEnv(env), cfg, pieces), "host_bridge")
  result = dict(
      benchmark="rollout", device=str(jax.devices()[0]), platform=platform.platform(),
      config=dict(env="sokoban 6x6 1 box", tasks=args.tasks, group=args.group, turns=args.turns,
                  max_tokens=args.max_tokens, model="tiny", vocab=tok.vocab_size,
                  params=mcfg.num_params(), episodes=n, repeats=args.repeats),
      compiled=compiled, host_bridge=host,
      speedup_compiled_over_host=host["median_s"] / compiled["median_s"])
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps({k: result[k] for k in ("device", "speedup_compiled_over_host")}))


if __name__ == "__main__":
  main()
