"""Tool calls in the compiled env vs a host tool server (issue 19, "Benchmark").

KB-SearchQA at batch 1,024 over a ~10,000-passage collection: one jitted, vmapped
`env.step` of search turns (parse the `<search>` call, BM25 top-3 in JAX, the PiCA signal,
render `<information>` with per-result truncation) against what Search-R1-style frameworks
do on the host: per turn, regex-parse the call (Search-R1's `postprocess_predictions`), send
the query to a retrieval server, here `bm25s` (Lucene BM25, same k1/b) one query a request,
format `Doc i(Title: ..) ..` and tokenize the observation. Also timed: `bm25s` retrieving
the whole batch in one call (the best a host server can do), and the env's retrieval alone.
Top-k agreement: the env's ranked top-3 vs `bm25s`' on the same queries (ties broken to the
lower passage index on both sides; differences are near-ties under the fixed-point scores).

    python benchmarks/tools.py [--batch 1024] [--entities 4900] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_io import write_json  # noqa: E402
from timing import best_seconds  # noqa: E402

from agent_rl.envs.base import Text  # noqa: E402
from agent_rl.envs.kb_search_qa import KBSearchQA, KBTask  # noqa: E402
from agent_rl.envs.kb_search_qa.world import words  # noqa: E402
from agent_rl.tokenizers import ByteTokenizer  # noqa: E402

SEARCH_R1 = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)


def _turns(tok, strs, length):
  toks = np.full((len(strs), length), tok.pad_id, np.int32)
  lens = np.zeros((len(strs),), np.int32)
  for i, s in enumerate(strs):
    ids = tok.encode(s)[:length]
    toks[i, :len(ids)], lens[i] = ids, len(ids)
  return Text(tokens=jnp.asarray(toks), length=jnp.asarray(lens))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=1024)
  ap.add_argument("--entities", type=int, default=4900)
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "tools.json"))
  args = ap.parse_args()
  import bm25s

  tok = ByteTokenizer()
  t0 = time.perf_counter()
  env = KBSearchQA(tokenizer=tok, num_entities=args.entities, num_questions=args.batch,
                   result_tokens=64, max_arg_bytes=96)
  build_s = time.perf_counter() - t0
  world, n = env.world, args.batch
  rng = np.random.default_rng(0)
  # Search turns: gold sub-queries of the batch's questions, some with a think prefix.
  queries = [q.queries[rng.integers(len(q.queries))] for q in world.questions[:n]]
  strs = [(f"<think>I need to look this up.</think>" if i % 3 == 0 else "") + f"<search>{q}</search>"
          for i, q in enumerate(queries)]
  action = _turns(tok, strs, 128)
  tasks = KBTask(question=jnp.arange(n, dtype=jnp.int32))
  reset = jax.jit(jax.vmap(env.reset))
  state, _ = reset(jax.random.split(jax.random.key(0), n), tasks)
  step = jax.jit(jax.vmap(env.step))
  t0 = time.perf_counter()
  jax.block_until_ready(step(state, action))
  compile_s = time.perf_counter() - t0
  env_s = best_seconds(step, state, action, repeats=args.repeats)
  parse = jax.jit(jax.vmap(lambda t: (lambda c: env.query_terms(c.arg, c.arg_len))(env.fmt.parse(t))))
  term_ids = parse(action)
  retrieve = jax.jit(jax.vmap(env.retrieve))
  retr_s = best_seconds(retrieve, term_ids, repeats=args.repeats)
  ours, ours_n = (np.asarray(x) for x in retrieve(term_ids))

  # Host tool server: bm25s over the same documents, one request per query.
  docs = [words(f"{t} {x}") for t, x in world.passages]
  ret = bm25s.BM25(method="lucene", k1=env.bm25_k1, b=env.bm25_b)
  ret.index(docs, show_progress=False)
  titles = world.passages

  def host_turn(text):
    m = SEARCH_R1.search(text)
    q = words(m.group(2).strip())[:env.max_query_words] if m and m.group(1) == "search" else []
    q = [w for w in q if w in ret.vocab_dict] or [docs[0][0]]
    res, _ = ret.retrieve([q], k=env.top_k, show_progress=False, n_threads=1)
    body = "".join(f"Doc {i + 1}(Title: {titles[d][0]}) {titles[d][1]}\n" for i, d in enumerate(res[0]))
    return res[0], tok.encode(f"\n\n<information>{body}</information>\n\n")

  host_turn(strs[0])
  best = float("inf")
  for _ in range(max(1, args.repeats // 2)):
    t = time.perf_counter()
    host = [host_turn(s) for s in strs]
    best = min(best, time.perf_counter() - t)
  host_s = best
  qtok = [[w for w in words(q)[:env.max_query_words] if w in ret.vocab_dict] for q in queries]
  t = time.perf_counter()
  ret.retrieve(qtok, k=env.top_k, show_progress=False, n_threads=1)
  host_batch_s = time.perf_counter() - t

  # Agreement of the ranked top-k (bm25s scores; ties to the lower index, as ours).
  same, near = 0, 0
  for i, q in enumerate(qtok):
    s = np.asarray(ret.get_scores(q), np.float64)
    order = sorted(range(len(docs)), key=lambda d: (-s[d], d))[:env.top_k]
    mine = [int(d) for d in ours[i][:int(ours_n[i])]]
    if mine == [d for d in order if s[d] > 0]:
      same += 1
    elif np.allclose(np.sort(s[mine])[::-1], s[order][:len(mine)], atol=2 * len(q) / env.index.scale):
      near += 1
  host_same = sum([int(d) for d in ours[i][:int(ours_n[i])]] == [int(d) for d in host[i][0]]
                  for i in range(n))
  result = {
      "machine": platform.machine(), "backend": jax.default_backend(), "cpus": os.cpu_count(),
      "batch": n, "passages": len(docs), "terms": len(env.terms), "top_k": env.top_k,
      "index": {"dense_terms": int(env.index.head.shape[0]), "postings_width": int(env.index.post_doc.shape[1]),
                "scale": env.index.scale},
      "env_build_s": round(build_s, 2), "env_step_compile_s": round(compile_s, 2),
      "env_steps_per_s": round(n / env_s, 1), "env_retrieval_queries_per_s": round(n / retr_s, 1),
      "host_server_turns_per_s": round(n / host_s, 1),
      "host_bm25s_batched_queries_per_s": round(n / host_batch_s, 1),
      "speedup_env_vs_host_server": round(host_s / env_s, 1),
      "speedup_env_vs_host_batched_retrieval_only": round(host_batch_s / env_s, 2),
      "topk_identical": same, "topk_near_tie": near, "topk_other": n - same - near,
      "topk_identical_to_bm25s_retrieve": host_same,
      "note": ("env step = parse + BM25 top-k + PiCA signal + render, one jitted vmapped call; "
               "host = regex parse + bm25s per query + format + tokenize, one query per request"),
  }
  write_json(args.out, result)


if __name__ == "__main__":
  main()
