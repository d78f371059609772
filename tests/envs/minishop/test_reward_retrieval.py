"""MiniShop's WebShop score vs the plain-Python port of goal.py's get_reward, and its BM25
(scores and ranking) vs the `bm25s` package (Lucene variant) and the plain-Python index."""
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.envs.minishop import reward, retrieval
from agent_rl.envs.minishop.catalogue import words
from agent_rl.envs.minishop.env import _world
from minishop.reference import BM25, get_reward

CAT_ARGS = (120, 0, 3, 4, 0.9, 0.4)


@pytest.fixture(scope="module")
def world():
  return _world(*CAT_ARGS)


def test_token_set_ratio_and_normalize_color():
  # thefuzz's README example and hand-computed rapidfuzz values (Indel-normalized).
  assert reward.token_set_ratio("fuzzy was a bear", "fuzzy fuzzy was a bear") == 100
  assert reward.token_set_ratio("pack of 1", "pack of 12") == 95    # max(94.7, 87.5, 82.4)
  assert reward.token_set_ratio("red", "blue") == 29                # 100 * (1 - 5 / 7)
  assert reward.token_set_ratio("Long-Lasting", "long lasting") == 100
  assert reward.token_set_ratio("", "x") == 0
  # normalize.py's own test suite, on the colors this catalogue's COLOR_SET keeps
  assert reward.normalize_color("navy blue") == "blue"              # first in COLOR_SET order
  assert reward.normalize_color("webshop") == "webshop"
  assert reward.normalize_color("") == ""


def test_score_matches_webshop_get_reward(world):
  cat, tables, _, _ = world
  rng = random.Random(0)
  n = 600
  cases = []
  for _ in range(n):
    g = rng.randrange(len(cat))
    p = rng.randrange(len(cat)) if rng.random() < 0.5 else g
    pool = list(cat.products[g].attributes) if rng.random() < 0.6 else list(cat.attributes)
    attrs = rng.sample(pool, rng.randint(1, 3))
    prod = cat.products[p]
    goal_vals = [rng.choice(cat.products[g].options[k][1]) if rng.random() < 0.7
                 else rng.choice(cat.values) for k in range(2)]
    n_goal_opts = rng.choice([2, 2, 1])
    sel = [rng.choice(prod.options[k][1]) if rng.random() < 0.75 else None for k in range(2)]
    upper = rng.choice([10 * i for i in range(1, 20)])
    cases.append((g, p, attrs, goal_vals[:n_goal_opts], sel, upper))
  a_index = {a: i for i, a in enumerate(cat.attributes)}
  v_index = {v: i for i, v in enumerate(cat.values)}
  arrays = dict(
      goal_product=np.array([c[0] for c in cases], np.int32),
      goal_attrs=np.array([[a_index[a] for a in c[2]] + [-1] * (3 - len(c[2])) for c in cases], np.int32),
      goal_opts=np.array([[v_index[v] for v in c[3]] + [-1] * (2 - len(c[3])) for c in cases], np.int32),
      price_upper=np.array([c[5] for c in cases], np.int32),
      product=np.array([c[1] for c in cases], np.int32),
      selected=np.array([[-1 if v is None else v_index[v] for v in c[4]] for c in cases], np.int32))
  got = np.asarray(jax.jit(jax.vmap(lambda **kw: reward.score(tables, **kw)))(**arrays))
  want = []
  for g, p, attrs, goal_vals, sel, upper in cases:
    gp, pp = cat.products[g], cat.products[p]
    goal = dict(query=gp.query, product_category=gp.product_category, name=gp.name,
                attributes=attrs, goal_options=goal_vals, price_upper=upper)
    options = {pp.options[k][0]: v for k, v in enumerate(sel) if v is not None}
    want.append(get_reward(pp.as_dict(), goal, pp.price / 100, options, cat.noun_lexicon))
  np.testing.assert_allclose(got, np.array(want), atol=1e-6)
  assert (np.array(want) == 1).sum() >= 5 and len(set(np.round(want, 4))) > 10


def test_bm25_matches_bm25s(world):
  bm25s = pytest.importorskip("bm25s")
  cat, _, terms, w = world
  docs = [words(retrieval.document(p)) for p in cat.products]
  ret = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
  ret.index(docs, show_progress=False)
  ref = BM25(cat)
  rng = random.Random(1)
  queries = [rng.sample(terms, rng.randint(1, 6)) for _ in range(40)]
  queries += [words(p.title) for p in cat.products[:10]]
  index = retrieval.BM25Index(weights=jnp.asarray(retrieval.quantize(w)))
  t_index = {t: i for i, t in enumerate(terms)}
  for q in queries:
    theirs = np.asarray(ret.get_scores(q), np.float64)
    ours = w[[t_index[t] for t in q]].sum(axis=0)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ref.scores(q, fixed=False), theirs, rtol=1e-5, atol=1e-5)
    ids = jnp.asarray([t_index[t] for t in q] + [-1] * (16 - len(q)), jnp.int32)
    fixed = np.asarray(retrieval.scores(index, ids))
    np.testing.assert_allclose(fixed / retrieval.SCALE, theirs, atol=len(q) / retrieval.SCALE)
    res, n = retrieval.search(index, ids, 50)
    res = [int(r) for r in np.asarray(res)[:int(n)]]
    assert res == ref.search(q, 50)                               # exact, ties to lower index
    top = theirs[res]
    assert (np.diff(top) <= 1e-3).all()                           # ranked by bm25s' scores
    rest = np.delete(theirs, res)
    assert len(res) == 50 or (rest <= 0).all()
    if len(res) == 50 and len(rest):
      assert rest.max() <= top[-1] + 1e-3                          # nothing better left out


def test_unknown_and_repeated_query_words(world):
  cat, _, terms, w = world
  index = retrieval.BM25Index(weights=jnp.asarray(retrieval.quantize(w)))
  t = terms.index("lipstick")
  once = np.asarray(retrieval.scores(index, jnp.asarray([t, -1, -1], jnp.int32)))
  twice = np.asarray(retrieval.scores(index, jnp.asarray([t, t, -1], jnp.int32)))
  np.testing.assert_array_equal(twice, 2 * once)
  assert BM25(cat).scores(["lipstick", "xyzzy"]) == list(once)
