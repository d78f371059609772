"""Multi-agent rollouts: K agents' LoRA adapters on one base in one batched forward, vs one model
per agent stepped one after another (what frameworks that keep a model per role do).

Same run, same policy sizes, every turn decodes exactly `--max_tokens` tokens (no stop token),
so both sides generate the same number of tokens:
- staggered (K = 4 roles, `envs.make("roles", offset_by_task=True)`: different episodes are at
  different roles in the same turn): the multi-LoRA rollout runs all N rows in one forward per
  token (`agents.routing`, per-row adapters); the baseline runs agent k's merged model
  (base + its adapter) over its N/K rows, k = 0..K-1 in sequence: K rollouts of N/K episodes.
- sequential (2 roles, no offset: every episode is at the same role in a turn, solver ->
  verifier): a model-per-role framework runs only the acting model over all N rows each turn,
  i.e. one plain rollout of N episodes; the multi-LoRA rollout does the same rows plus the
  adapters' products, so ~1x is expected (reported, not tuned).
- both report `batching_gain` (the baseline over one plain model on all N rows: what batching
  the rows alone buys on this device) and `lora_overhead` (the multi-LoRA rollout over that
  plain one: the adapters' products and gathers), so ratio = batching_gain / lora_overhead.
- memory: params + optimizer (AdamW) bytes per additional agent, LoRA rank 16 on every
  projection vs a full copy, for the qwen2.5-0.5b preset, from the optimizer states the
  learners build (`lora_learner.freeze_base(adamw).init` vs `adamw.init`, shapes only).

    python benchmarks/multi_agent.py [--repeats 3] [--out benchmarks/results/multi_agent.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent_rl import envs, models  # noqa: E402
from agent_rl.agents import params as P  # noqa: E402
from agent_rl.agents.routing import rollout_policy  # noqa: E402
from agent_rl.models.lora import TARGETS, LoraConfig, merge  # noqa: E402
from agent_rl.rollout.compiled import make_rollout  # noqa: E402
from agent_rl.rollout.episode import EpisodeConfig  # noqa: E402
from agent_rl.rollout.layout import chat_pieces  # noqa: E402
from agent_rl.rollout.policy import Policy  # noqa: E402
from agent_rl.rollout.sampler import SamplerConfig  # noqa: E402
from agent_rl.tokenizers import ByteTokenizer  # noqa: E402


def _timed(fn, repeats):
  jax.block_until_ready(fn(0))  # compile
  secs = []
  for r in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(r + 1))
    secs.append(time.perf_counter() - t0)
  return float(np.median(secs))


def _models(k: int, rank: int, vocab: int):
  """A tiny LoRA policy with k distinct adapters: (cfg, lm graphdef, stacked lm params,
  [merged params of agent j], plain graphdef)."""
  cfg = models.get_preset("tiny", vocab_size=vocab,
                          lora=LoraConfig(rank=rank, targets=TARGETS))
  make = lambda seed: models.Transformer(cfg, rngs=nnx.Rngs(seed))
  gd, stacked = nnx.split(P.stacked_factory(lambda s: _Holder(make(s)), "lora", k, 0)().lm)
  # B starts at zero: make the adapters non-trivial so the agents really differ
  stacked = jax.tree_util.tree_map_with_path(
      lambda p, x: x + 0.02 * jax.random.normal(jax.random.key(len(str(p))), x.shape)
      if P.is_adapter((jax.tree_util.DictKey("lm"),) + p) else x, stacked)
  plain_cfg = models.get_preset("tiny", vocab_size=vocab)
  plain_gd, plain_state = nnx.split(models.Transformer(plain_cfg, rngs=nnx.Rngs(0)))

  def merged_state(j):  # agent j's base + adapter folded into plain weights
    st = jax.tree.map(lambda x: x, plain_state)
    nnx.replace_by_pure_dict(st, merge(cfg, P.select_agent("lora", stacked, j, lm_only=True))[1])
    return st
  merged = [merged_state(j) for j in range(k)]
  return cfg, plain_cfg, gd, stacked, plain_gd, merged


class _Holder(nnx.Module):
  """`.lm` around a Transformer, so stacked_factory's paths match an ActorCritic's."""
  def __init__(self, lm):
    self.lm = lm


def _rollout_fn(policy, env, cfg, pieces, params, tasks):
  roll = make_rollout(policy, env, cfg, pieces)
  return lambda seed: roll(params, tasks, jax.random.key(seed))


def bench(args) -> dict:
  tok = ByteTokenizer()
  k = args.agents
  cfg, plain_cfg, gd, stacked, plain_gd, merged = _models(k, args.rank, tok.vocab_size)
  sampler = SamplerConfig(temperature=1.0, max_tokens=args.max_tokens, stop_tokens=())
  ecfg = EpisodeConfig(sampler=sampler, max_turns=args.turns, group_size=1, history="windowed",
                       window_turns=1)
  n = args.episodes
  base_kw = dict(base="sokoban", base_kwargs={"dim_room": (6, 6), "num_boxes": 1,
                                              "max_steps": 100})
  out = {}
  for name, roles, offset in (("staggered", k, True), ("sequential", 2, False)):
    env = envs.make("roles", tokenizer=tok, roles=tuple(f"agent{j}" for j in range(roles)),
                    offset_by_task=offset, **base_kw)
    pieces = chat_pieces(tok, "Play.")  # a short prompt: byte-level instructions are long
    tasks = jax.jit(jax.vmap(env.sample_task))(jax.random.split(jax.random.key(0), n))
    lora_pol = rollout_policy("lora", cfg, gd, k)
    lo = _timed(_rollout_fn(lora_pol, env, ecfg, pieces, stacked, tasks), args.repeats)
    plain = Policy.from_model(plain_cfg, plain_gd)
    if name == "staggered":  # K models, each over its N/K rows, one after another
      sub = [jax.tree.map(lambda x: x[j * n // k:(j + 1) * n // k], tasks) for j in range(k)]
      fns = [_rollout_fn(plain, env, ecfg, pieces, merged[j], sub[j]) for j in range(k)]
      base = _timed(lambda s: [f(s) for f in fns], args.repeats)
    # One plain model over all N rows: what batching alone buys (base / one_model) and what
    # the per-row adapters cost on top (multi_lora / one_model).
    one = _timed(_rollout_fn(plain, env, ecfg, pieces, merged[0], tasks), args.repeats)
    if name == "sequential":  # only the acting model runs, over all N rows
      base = one
    out[name] = dict(roles=roles, episodes=n, multi_lora_s=lo, per_agent_models_s=base,
                     one_plain_model_all_rows_s=one,
                     multi_lora_episodes_per_s=n / lo, per_agent_models_episodes_per_s=n / base,
                     ratio=base / lo, batching_gain=base / one, lora_overhead=lo / one)
    print(name, json.dumps(out[name]), flush=True)
  out["memory_0.5b"] = memory(args.rank)
  return out


def memory(rank: int) -> dict:
  """Params + AdamW state bytes of one more agent: rank-r adapters vs a full copy (0.5B)."""
  import optax
  from agent_rl.train import lora_learner
  cfg = models.get_preset("qwen2.5-0.5b", lora=LoraConfig(rank=rank, targets=TARGETS))
  params = nnx.split(nnx.eval_shape(lambda: _Holder(models.Transformer(cfg, rngs=nnx.Rngs(0)))))[1]
  adam = optax.adamw(1e-5)
  adapters = [x for p, x in jax.tree_util.tree_leaves_with_path(params) if P.is_adapter(p)]
  base = [x for p, x in jax.tree_util.tree_leaves_with_path(params) if not P.is_adapter(p)]
  nbytes = lambda xs: sum(int(x.size) * x.dtype.itemsize for x in xs)
  lora_opt = lora_learner.state_bytes(jax.eval_shape(lora_learner.freeze_base(adam).init, params))
  full_opt = lora_learner.state_bytes(jax.eval_shape(
      adam.init, jax.tree.map(lambda x: x, {"lm": nnx.split(nnx.eval_shape(
          lambda: models.Transformer(models.get_preset("qwen2.5-0.5b"), rngs=nnx.Rngs(0))))[1]})))
  lora_agent = nbytes(adapters) + lora_opt
  full_agent = nbytes(base) + full_opt
  return dict(rank=rank, adapter_param_bytes=nbytes(adapters), adapter_opt_bytes=lora_opt,
              full_param_bytes=nbytes(base), full_opt_bytes=full_opt,
              lora_agent_bytes=lora_agent, full_agent_bytes=full_agent,
              fraction=lora_agent / full_agent)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--agents", type=int, default=4)
  ap.add_argument("--episodes", type=int, default=64)
  ap.add_argument("--turns", type=int, default=3)
  ap.add_argument("--max_tokens", type=int, default=32)
  ap.add_argument("--rank", type=int, default=16)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                "multi_agent.json"))
  args = ap.parse_args()
  res = dict(benchmark="multi_agent", device=str(jax.devices()[0]), platform=platform.platform(),
             config=vars(args), **bench(args))
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(res, f, indent=1)
  print(json.dumps({k: (v["ratio"] if isinstance(v, dict) and "ratio" in v else v)
                    for k, v in res.items() if k in ("staggered", "sequential")}))
  print("memory fraction", res["memory_0.5b"]["fraction"])


if __name__ == "__main__":
  main()
