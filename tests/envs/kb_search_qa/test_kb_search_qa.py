"""KB-SearchQA vs plain-Python references: BM25 against `bm25s`, EM/F1 against Search-R1's
normalization, questions against the passages' own facts (and their depth, `min_hops`), expert
plans replayed through the jitted step, the PiCA / CARL signals, the tool budget, and
hypothesis-fuzzed turns."""
import collections
import functools
import re
import string

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agent_rl import envs
from agent_rl.envs import bm25
from agent_rl.envs.kb_search_qa import KBSearchQA, KBTask, answer as ans
from agent_rl.envs.kb_search_qa.world import World, words
import batched
from batched import vstep
from conftest import CharTokenizer
from tools.test_format import ref_parse

TOK = CharTokenizer()
A_LEN = 80
ENV = KBSearchQA(tokenizer=TOK, num_entities=120, num_questions=96, result_tokens=200)
N = 16


def turns(strs, a_len=A_LEN):
  return batched.texts(TOK, strs, a_len)


@functools.partial(jax.jit, static_argnums=0)
def vreset(env, tasks):
  return jax.vmap(env.reset)(jax.random.split(jax.random.key(0), tasks.question.shape[0]), tasks)


def decode(text, i):
  return TOK.decode(np.asarray(text.tokens[i])[:int(text.length[i])])


# -- Search-R1 normalization (verl/utils/reward_score/qa_em.py), written out ------------------
def normalize_answer(s):
  s = s.lower()
  s = "".join(ch for ch in s if ch not in set(string.punctuation))
  s = re.sub(r"\b(a|an|the)\b", " ", s)
  return " ".join(s.split())


def ref_em_f1(pred, gold):
  p, g = normalize_answer(pred), normalize_answer(gold)
  em = float(p == g)
  common = collections.Counter(p.split()) & collections.Counter(g.split())
  same = sum(common.values())
  if same == 0:
    return em, 0.0
  prec, rec = same / len(p.split()), same / len(g.split())
  return em, 2 * prec * rec / (prec + rec)


@functools.lru_cache(maxsize=None)
def _scorer(max_bytes, max_words, width):
  def f(b, n, gold):
    return ans.em_f1(ans.normalized_words(b, n, max_words, width), gold)
  return jax.jit(jax.vmap(f, in_axes=(0, 0, None)))


def check_em(preds, gold):
  width = 16
  g = jax.tree.map(lambda x: jnp.asarray(x[0]), ans.gold_table([gold], 8, width))
  b = np.zeros((len(preds), 64), np.uint8)
  n = np.zeros((len(preds),), np.int32)
  for i, p in enumerate(preds):
    e = p.encode()[:64]
    b[i, :len(e)], n[i] = np.frombuffer(e, np.uint8), len(e)
  em, f1 = _scorer(64, 24, width)(jnp.asarray(b), jnp.asarray(n), g)
  for i, p in enumerate(preds):
    want = ref_em_f1(p.encode()[:64].decode("utf-8", "ignore"), gold)
    assert (float(em[i]), round(float(f1[i]), 5)) == (want[0], round(want[1], 5)), (p, gold, want)


def test_em_f1_cases():
  check_em(["Paris", " the  PARIS. ", "paris france", "a paris", "Pa-ris", "france paris paris",
            "", "...", "theparis", "an the a", "Paris\x1cFrance"], "Paris")
  check_em(["The Red Harbor", "red harbor", "harbor red", "the red", "red red harbor harbor",
            "", "", "", "", "", ""], "The Red Harbor")     # same batch shape: one compile


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["the", "a", "an", "red", "Red", "harbor", "HARBOR",
                                          " ", "  ", ".", ",", "-", "'", "\t", "\n", "x", "1995",
                                          "an.", "(the)"]), max_size=10).map("".join),
                min_size=8, max_size=8),
       st.sampled_from(["The Red Harbor", "red", "1995", "Red Harbor Red"]))
def test_em_f1_fuzz(preds, gold):
  check_em(preds, gold)


# -- retrieval ------------------------------------------------------------------------------
def test_bm25_matches_bm25s():
  bm25s = pytest.importorskip("bm25s")
  world, terms, index = ENV.world, ENV.terms, ENV.index
  docs = [words(f"{t} {x}") for t, x in world.passages]
  ret = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
  ret.index(docs, show_progress=False)
  t_index = {t: i for i, t in enumerate(terms)}
  rng = np.random.default_rng(0)
  queries = [list(rng.choice(terms, rng.integers(1, 7))) for _ in range(30)]
  queries += [words(s) for q in world.questions[:20] for s in q.queries]
  ids = np.full((len(queries), ENV.max_query_words), -1, np.int32)
  for i, q in enumerate(queries):
    ids[i, :len(q[:ENV.max_query_words])] = [t_index[t] for t in q[:ENV.max_query_words]]
  scores = np.asarray(jax.jit(jax.vmap(lambda t: bm25.sparse_scores(index, t)))(jnp.asarray(ids)))
  res, n = jax.jit(jax.vmap(ENV.retrieve))(jnp.asarray(ids))
  agree = 0
  for i, q in enumerate(queries):
    theirs = np.asarray(ret.get_scores(q[:ENV.max_query_words]), np.float64)
    np.testing.assert_allclose(scores[i, :len(theirs)] / index.scale, theirs,
                               atol=len(q) / index.scale + 1e-5)
    got = [int(r) for r in np.asarray(res[i])[:int(n[i])]]
    # plain-Python ranking of the fixed-point scores: descending, ties to the lower index
    want = sorted((d for d in range(len(docs)) if scores[i][d] > 0), key=lambda d: (-scores[i][d], d))
    assert got == want[:ENV.top_k]
    order = sorted(range(len(docs)), key=lambda d: (-theirs[d], d))[:ENV.top_k]
    agree += got == [d for d in order if theirs[d] > 0]
    assert theirs[got].min(initial=np.inf) >= np.sort(theirs)[-ENV.top_k] - 2 * len(q) / index.scale
  assert agree >= len(queries) - 2   # top-k equal to bm25s' but for near-ties under quantization


def test_sparse_index_matches_dense():
  docs = [words(f"{t} {x}") for t, x in ENV.world.passages]
  terms, w = bm25.dense_weights(docs, 0.9, 0.4)
  assert terms == ENV.terms
  dense = bm25.quantize(w, ENV.index.scale)
  rng = np.random.default_rng(1)
  ids = rng.integers(-1, len(terms), (20, ENV.max_query_words)).astype(np.int32)
  got = np.asarray(jax.jit(jax.vmap(lambda t: bm25.sparse_scores(ENV.index, t)))(jnp.asarray(ids)))
  want = np.stack([dense[[t for t in row if t >= 0]].sum(axis=0) for row in ids])
  assert got.shape[1] % bm25.BLOCK == 0 and got.shape[1] - len(docs) < bm25.BLOCK
  np.testing.assert_array_equal(got[:, :len(docs)], want)
  assert not got[:, len(docs):].any()   # the padding documents never score


# -- world ----------------------------------------------------------------------------------
FACT = re.compile(r"^(.*?) (is a film directed by|was born in the city of|works for the company|"
                  r"is headquartered in|is a city in the country|was released in the year|"
                  r"was born in the year|was founded in the year) (.*)\.$")


def test_questions_follow_the_passages():
  """Every answer is reached by following the gold facts, read back from the passage text."""
  world = ENV.world
  facts = [FACT.match(x).groups() for _, x in world.passages]
  hops = collections.Counter()
  for q in world.questions:
    assert 1 <= len(q.facts) <= 4 and len(q.queries) == len(q.facts)
    hops[(q.kind, len(q.facts))] += 1
    f = [facts[i] for i in q.facts]
    for (s, _, _), sub in zip(f, q.queries):
      assert sub.startswith(s)
    if q.kind == "bridge":
      assert f[0][0] in q.text
      for a, b in zip(f, f[1:]):
        assert a[2] == b[0]
      assert f[-1][2] == q.answer
    else:
      a, b = re.match(r"Which \w+ has .*?, (.*) or (.*)\?$", q.text).groups()
      years = [int(x[2]) for x in f[-2:]]
      if len(f) == 4:
        assert (f[0][0], f[1][0]) == (a, b) and (f[0][2], f[1][2]) == (f[2][0], f[3][0])
      else:
        assert (f[0][0], f[1][0]) == (a, b)
      assert q.answer == (a if years[0] < years[1] else b)
    assert ("Known facts" in world.prompt(q)) == q.parametric
  assert {h for _, h in hops} == {1, 2, 3, 4} and hops[("compare", 2)] and hops[("compare", 4)]


# -- the env --------------------------------------------------------------------------------
def test_registered_and_expert_plans_succeed():
  env = envs.make("kb_search_qa", tokenizer=TOK, num_entities=120, num_questions=96, result_tokens=200)
  assert env == ENV and hash(env) == hash(ENV)
  qs = np.arange(32)   # every hop count and kind (question i has 1 + i % 4 facts)
  for chunk in np.array_split(qs, len(qs) // N):
    chunk = np.resize(chunk, N)
    tasks = KBTask(question=jnp.asarray(chunk, jnp.int32))
    state, obs = vreset(ENV, tasks)
    for i, q in enumerate(chunk):
      assert decode(obs, i) == ENV.render_text(ENV.task_from_index(int(q)))
    plans = [ENV.solve(ENV.task_from_index(int(q))) for q in chunk]
    hits = np.zeros(N, int)
    for t in range(max(map(len, plans))):
      acts = [p[t] if t < len(p) else "<answer>late</answer>" for p in plans]
      state, obs, reward, done, info = vstep(ENV, state, turns(acts))
      for i, p in enumerate(plans):
        if t < len(p) - 1:   # a gold search: results shown, the next gold fact among them
          assert bool(info["step_mask"][i]) and bool(info["tool_call"][i])
          text = decode(obs, i)
          assert text.startswith("\n\n<information>Doc 1(Title: ") and text.endswith("</information>\n\n")
          hits[i] += bool(info["gold_hit"][i])
          assert float(info["prm_score"][i]) == 1.0 - bool(info["gold_hit"][i])
    assert np.asarray(info["success"]).all() and np.asarray(state.done).all()
    assert (hits >= np.array([len(p) - 1 for p in plans]) - 1).all()


def test_signals_budget_and_errors():
  q = next(i for i, x in enumerate(ENV.world.questions) if len(x.facts) >= 2 and not x.parametric)
  qq = ENV.world.questions[q]
  tasks = KBTask(question=jnp.full((N,), q, jnp.int32))
  state, _ = vreset(ENV, tasks)
  script = [f"<search>{qq.queries[1]}</search>",     # not the next hop's fact (hop 2 first)
            f"<search>{qq.queries[0]}</search>",     # the next hop: a hit
            "<search>zzz unknown words</search>", "<search>x</search>",
            "<search>over budget</search>"]
  want_hit = []
  for t, a in enumerate(script):
    state, obs, reward, done, info = vstep(ENV, state, turns([a] * N))
    want_hit.append(bool(info["gold_hit"][0]))
    if t == 2:
      assert decode(obs, 0) == "\n\n<information>No results.\n</information>\n\n"
  assert want_hit[1] and not want_hit[0]
  assert int(state.searches[0]) == 4 and bool(info["fatal"][0]) and bool(info["tool_error"][0])
  assert decode(obs, 0) == "\n\n<information>error: tool budget of 4 calls spent</information>\n\n"
  assert bool(done[0]) and bool(info["truncated"][0]) and not bool(info["success"][0])
  np.testing.assert_allclose(np.asarray(info["reward_terms"][0]), [0, 0, 1])
  # parametric flag and malformed turns
  state, _ = vreset(ENV, tasks)
  state, obs, reward, done, info = vstep(ENV, state, turns(["<search>unclosed"] * N))
  assert decode(obs, 0) == "\n\n<information>error: unclosed <search> tag</information>\n\n"
  assert bool(info["fatal"][0]) and not bool(info["step_mask"][0]) and float(info["prm_score"][0]) == 0
  assert bool(info["parametric"][0]) == qq.parametric and int(info["hops"][0]) == len(qq.facts)
  # a finished episode stays as it is
  s2, *_ = vstep(ENV, state, turns([f"<answer>{qq.answer}</answer>"] * N))
  s3, _, r3, d3, i3 = vstep(ENV, s2, turns([f"<answer>{qq.answer}</answer>"] * N))
  assert float(s2.em[0]) == 1.0 and float(r3[0]) == 0.0 and not bool(i3["answered"][0])
  np.testing.assert_array_equal(np.asarray(i3["state_hash"]), np.asarray(jax.vmap(ENV.state_hash)(s2)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "<think>",
                                          "</think>", "the", " ", "Paris", "<", ">", "/", "1995",
                                          "\n", "zz"]), max_size=12).map("".join), min_size=N, max_size=N))
def test_fuzzed_turns_never_raise(strs):
  tasks = KBTask(question=jnp.arange(N, dtype=jnp.int32))
  state, _ = vreset(ENV, tasks)
  state, obs, reward, done, info = vstep(ENV, state, turns(strs))
  assert np.isfinite(np.asarray(reward)).all() and (np.asarray(obs.length) <= ENV.obs_len).all()
  for i, s in enumerate(strs):
    if bool(info["answered"][i]):
      gold = ENV.world.questions[i].answer
      kind, arg, err = ref_parse(s.encode(), ("search", "answer"), ENV.max_arg_bytes, ENV.max_bytes)
      assert (kind, err) == (1, 0)
      assert float(info["em"][i]) == ref_em_f1(arg.decode(), gold)[0]
    else:
      assert float(reward[i]) == 0.0


def test_construction_errors():
  with pytest.raises(ValueError, match="tokenizer"):
    KBSearchQA()
  with pytest.raises(ValueError, match="top_k"):
    KBSearchQA(tokenizer=TOK, num_entities=120, num_questions=8, top_k=0)
  with pytest.raises(ValueError, match="max_hops"):
    KBSearchQA(tokenizer=TOK, num_entities=120, num_questions=8, max_hops=5)
  with pytest.raises(ValueError, match="reward_weights"):
    KBSearchQA(tokenizer=TOK, num_entities=120, num_questions=8, reward_weights=(1.0,))


def test_top_keys_few_matches_bisection():
  rng = np.random.default_rng(3)
  keys = jnp.asarray(np.stack([rng.permutation(5000)[:300] for _ in range(6)]).astype(np.int32))
  for k in (1, 3):
    a = jax.jit(jax.vmap(lambda x: bm25.top_keys_few(x, k)))(keys)
    b = jax.jit(jax.vmap(lambda x: bm25.top_keys(x, k)))(keys)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), -np.sort(-np.asarray(keys), axis=1)[:, :k])


@pytest.mark.parametrize("p", [bm25.BLOCK * 9, bm25.BLOCK * 3, 300])
def test_rank_matches_a_sort(p):
  """bm25.rank (two-level when P is whole blocks and more than k of them, else one level) vs
  sorting (-score, index) in Python, zero scores dropped; many ties, and all-zero rows."""
  rng = np.random.default_rng(p)
  scores = rng.integers(0, 4, (40, p)) * (rng.random((40, p)) < rng.random((40, 1)))
  scores[0] = 0
  scores[1, -1] = 5        # the best document in the last block
  scores[2, :] = 2         # every document ties
  for k in (1, 3, 8):
    res, n = jax.jit(jax.vmap(lambda s: bm25.rank(s, k)))(jnp.asarray(scores, jnp.int32))
    for row, got, m in zip(scores, np.asarray(res), np.asarray(n)):
      want = [d for d in sorted(range(p), key=lambda d: (-row[d], d)) if row[d] > 0][:k]
      assert list(got[:m]) == want and m == len(want) and (got[m:] == -1).all()


def test_kb_min_hops_fixes_the_question_depth():
  dflt, two = World(60, 0, 24, 0.0, 3), World(60, 0, 24, 0.0, 3, min_hops=2)
  assert [len(q.facts) for q in dflt.questions] == [1 + i % 3 for i in range(24)]
  assert [len(q.facts) for q in two.questions] == [2 + i % 2 for i in range(24)]
  with pytest.raises(ValueError, match="min_hops must be in"):
    World(60, 0, 8, 0.0, 2, min_hops=3)
  env = KBSearchQA(tokenizer=TOK, num_entities=60, num_questions=32, max_hops=2, min_hops=2,
                   max_searches=2, max_turns=3, parametric_frac=0.0)
  plans = [env.solve(env.task_from_index(i)) for i in range(8)]
  assert all(len(p) == 3 and p[-1].startswith("<answer>") for p in plans), plans
