"""WebShop's purchase score (Yao et al. 2022, §3.2; web_agent_site/engine/goal.py `get_reward`).

    score = r_type * (num_attr_matches + num_option_matches + r_price)
                   / (|goal attributes| + |goal options| + 1)

r_type (get_type_reward): 1 if the purchased product matches the goal product's type (same
`query`, or >= 2 shared `product_category` levels, or title_score > 0.2), else 0.5; then 0.1
if title_score < 0.1 and 0 if title_score == 0, where title_score is the fraction of the goal
name's nouns found in the purchased name. An attribute matches (get_attribute_reward) when
fuzz.token_set_ratio with one of the product's Attributes is > 85 or it is a substring of the
title, bullet points or description; a purchased option (get_option_reward) matches when it is
exactly a goal option (size) or fuzzily one (token_set_ratio > 85, after normalize_color), or
a substring of the product text. r_price = price <= price_upper. Success = score 1.

The string matching depends only on (goal attribute, product), (purchased value, goal value)
and (value, product), so the host evaluates it once per pair into boolean tables and the
jitted score is a handful of gathers (`ScoreTables`, `score`).
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.minishop.catalogue import COLOR_SET, Catalogue, nouns

EXACT_MATCH_OPTS = ("size",)


def _process(s: str) -> str:
  """thefuzz's default processor (utils.full_process): non-alphanumerics to spaces, lower, strip."""
  return re.sub(r"(?ui)\W", " ", s).lower().strip()


def _indel(a: str, b: str) -> int:
  """Insert/delete edit distance = len(a) + len(b) - 2 * LCS(a, b)."""
  prev = [0] * (len(b) + 1)
  for ca in a:
    cur = [0]
    for j, cb in enumerate(b):
      cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
    prev = cur
  return len(a) + len(b) - 2 * prev[-1]


def _norm(dist: int, lensum: int) -> float:
  return 100.0 * (1.0 - dist / lensum) if lensum else 0.0


def token_set_ratio(s1: str, s2: str) -> int:
  """thefuzz.fuzz.token_set_ratio (rapidfuzz's algorithm on processed strings, rounded)."""
  a, b = set(_process(s1).split()), set(_process(s2).split())
  if not a or not b:
    return 0
  inter, ab, ba = a & b, a - b, b - a
  if inter and (not ab or not ba):
    return 100
  ab_s, ba_s, sect = " ".join(sorted(ab)), " ".join(sorted(ba)), " ".join(sorted(inter))
  sect_ab = len(sect) + bool(sect) + len(ab_s)
  sect_ba = len(sect) + bool(sect) + len(ba_s)
  result = _norm(_indel(ab_s, ba_s), sect_ab + sect_ba)
  if sect:
    result = max(result, _norm(bool(sect) + len(ab_s), len(sect) + sect_ab),
                 _norm(bool(sect) + len(ba_s), len(sect) + sect_ba))
  return int(round(result))


def normalize_color(value: str) -> str:
  """WebShop normalize.py: the first COLOR_SET color contained in the value, else the value."""
  for c in COLOR_SET:
    if c in value:
      return c
  return value


@struct.dataclass
class ScoreTables:
  """Host-evaluated matching tables of a catalogue (P products, A attributes, V values).

  r_type [P, P] f32: get_type_reward of (purchased, goal product); attr_hit [A, P] bool: goal
  attribute a matches product p; opt_match [V, V] bool: purchased value u matches goal value w;
  opt_text [V, P] bool: value v is a substring of product p's text; price [P] int32 cents.
  """
  r_type: jax.Array
  attr_hit: jax.Array
  opt_match: jax.Array
  opt_text: jax.Array
  price: jax.Array


def type_reward(query_match: bool, category_match: bool, title_score: float) -> float:
  """get_type_reward's r_type from its three signals."""
  r = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
  if title_score < 0.1:
    r = 0.1
  if title_score == 0.0:
    r = 0.0
  return r


def _type_table(cat: Catalogue) -> np.ndarray:
  """`[P, P]` r_type of (purchased, goal product)."""
  cats = [{x.strip() for x in p.product_category.split("›")} for p in cat.products]
  names = [set(nouns(cat.noun_lexicon, p.name)) for p in cat.products]
  cache = {}
  out = np.zeros((len(cat),) * 2, np.float32)
  for i, p in enumerate(cat.products):
    for j, g in enumerate(cat.products):
      key = (p.type_id, g.type_id, p.brand == g.brand)   # all r_type depends on here
      if key not in cache:
        ts = len(names[i] & names[j]) / len(names[j]) if names[j] else 0.2
        cache[key] = type_reward(p.query == g.query, len(cats[i] & cats[j]) >= 2, ts)
      out[i, j] = cache[key]
  return out


def build_tables(cat: Catalogue) -> ScoreTables:
  n = len(cat)
  texts = [(p.title.lower(), " ".join(p.features).lower(), p.description.lower())
           for p in cat.products]
  r_type = _type_table(cat)
  ratio = {}
  attr_hit = np.zeros((len(cat.attributes), n), bool)
  for a, ga in enumerate(cat.attributes):
    for j, p in enumerate(cat.products):
      fuzzy = False
      for pa in p.attributes:
        if (pa, ga) not in ratio:
          ratio[pa, ga] = token_set_ratio(pa, ga)
        fuzzy |= ratio[pa, ga] > 85
      attr_hit[a, j] = fuzzy or any(ga in t for t in texts[j])
  normed = [normalize_color(v) for v in cat.values]
  if len(set(normed)) != len(normed):
    raise ValueError("normalize_color merges two option values of the catalogue")
  opt_match = np.zeros((len(cat.values),) * 2, bool)
  for u, pu in enumerate(normed):
    exact = cat.value_kind[u].lower() in EXACT_MATCH_OPTS
    for w, gw in enumerate(normed):
      opt_match[u, w] = pu == gw if exact else token_set_ratio(gw, pu) > 85
  # substring tests are per field, as goal.py does (a match across a field boundary is none)
  opt_text = np.array([[any(pu in t for t in texts[j]) for j in range(n)] for pu in normed])
  return ScoreTables(r_type=r_type, attr_hit=attr_hit, opt_match=opt_match, opt_text=opt_text,
                     price=np.asarray(cat.arrays["price"], np.int32))


def score(tables: ScoreTables, goal_product: jax.Array, goal_attrs: jax.Array,
          goal_opts: jax.Array, price_upper: jax.Array, product: jax.Array,
          selected: jax.Array) -> jax.Array:
  """WebShop's score of buying `product` with options `selected` for a goal (one example).

  goal_attrs: [GA] int32 attribute ids (-1 pad); goal_opts: [K] int32 value ids (-1 pad);
  price_upper: int32 dollars; product: int32; selected: [K] int32 value ids (-1 = not chosen,
  absent from WebShop's purchased options). Returns f32 in [0, 1].
  """
  t = jax.tree.map(jnp.asarray, tables)
  ga = goal_attrs >= 0
  attr = jnp.sum(ga & t.attr_hit[jnp.maximum(goal_attrs, 0), product], dtype=jnp.int32)
  go = goal_opts >= 0
  sel = selected >= 0
  fuzzy = jnp.any(t.opt_match[jnp.maximum(selected, 0)][:, jnp.maximum(goal_opts, 0)]
                  & go[None, :], axis=1)
  hit = sel & (fuzzy | t.opt_text[jnp.maximum(selected, 0), product])
  opt = jnp.sum(hit, dtype=jnp.int32)
  r_price = (t.price[product] <= price_upper * 100).astype(jnp.int32)
  denom = jnp.sum(ga, dtype=jnp.int32) + jnp.sum(go, dtype=jnp.int32) + 1
  return (t.r_type[product, goal_product] * (attr + opt + r_price) / denom).astype(jnp.float32)
