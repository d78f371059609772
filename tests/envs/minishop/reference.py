"""Plain-Python MiniShop: the world's rules written directly from WebShop (Yao et al. 2022)
and its `web_agent_site/engine/goal.py` (princeton-nlp/WebShop), without JAX.

`PyMiniShop(catalogue, ...)` plays one episode on strings: `reset(goal) -> obs`,
`step(turn_text) -> (obs, reward, done, info)`. `get_reward` is goal.py's get_reward on
WebShop product dicts (`Product.as_dict()`), with thefuzz's token_set_ratio and
normalize.py's normalize_color (ports in agent_rl.envs.minishop.reward, themselves checked
against thefuzz's documented values) and spaCy's noun filter replaced by the catalogue's
noun lexicon. Benchmarks import this module as the unbatched reference world.
"""
from __future__ import annotations

import collections
import math
import re

from agent_rl.envs.minishop.catalogue import Catalogue, nouns
from agent_rl.envs.minishop.reward import normalize_color, token_set_ratio

EXACT_MATCH_OPTS = ["size"]
SEP = " [SEP] "
LEADS = ("i need ", "i am looking for ", "i want to buy ")
SCALE = 1 << 14


# -- goal.py ----------------------------------------------------------------------------------
def get_type_reward(purchased_product, goal, lexicon):
  query_match = purchased_product['query'] == goal['query']
  purchased_product_category = [x.strip() for x in purchased_product['product_category'].split('›')]
  goal_product_category = [x.strip() for x in goal['product_category'].split('›')]
  category_match = len(set(purchased_product_category) & set(goal_product_category)) >= 2
  purchased_type_parse = nouns(lexicon, purchased_product['name'])
  desired_type_parse = nouns(lexicon, goal['name'])
  n_intersect_type = len(set(purchased_type_parse) & set(desired_type_parse))
  if len(desired_type_parse) == 0:
    title_score = 0.2
  else:
    title_score = n_intersect_type / len(desired_type_parse)
  r_type = 1.0
  match = query_match or category_match or title_score > 0.2
  if not match:
    r_type = 0.5
  if title_score < 0.1:
    r_type = 0.1
  if title_score == 0.0:
    r_type = 0.0
  return dict(r_type=r_type, query_match=query_match, category_match=category_match,
              title_score=title_score)


def get_attribute_reward(purchased_product, goal):
  purchased_attrs = purchased_product['Attributes']
  goal_attrs = goal['attributes']
  num_attr_matches = 0
  for g_attr in goal_attrs:
    matched = False
    for p_attr in purchased_attrs:
      score = token_set_ratio(p_attr, g_attr)
      if score > 85:
        num_attr_matches += 1
        matched = True
        break
    if (not matched and (
        g_attr in purchased_product['Title'].lower() or
        g_attr in ' '.join(purchased_product['BulletPoints']).lower() or
        g_attr in purchased_product['Description'].lower())):
      num_attr_matches += 1
      matched = True
  r_attr = num_attr_matches / len(goal_attrs)
  return r_attr, num_attr_matches


def get_option_reward(purchased_product, goal_options, purchased_options):
  purchased_options = {k: normalize_color(v) for k, v in purchased_options.items()}
  goal_options = [normalize_color(o) for o in goal_options]
  num_option_matches = 0
  for p_option_k, p_option_v in purchased_options.items():
    matched = False
    if p_option_k.lower() in EXACT_MATCH_OPTS:
      if p_option_v in goal_options:
        num_option_matches += 1
        matched = True
    else:
      for g_option in goal_options:
        score = token_set_ratio(g_option, p_option_v)
        if score > 85:
          num_option_matches += 1
          matched = True
          break
    if (not matched and (
        p_option_v in purchased_product['Title'].lower() or
        p_option_v in ' '.join(purchased_product['BulletPoints']).lower() or
        p_option_v in purchased_product['Description'].lower())):
      num_option_matches += 1
  r_option = num_option_matches / len(goal_options) if len(goal_options) > 0 else None
  return r_option, num_option_matches


def get_reward(purchased_product, goal, price, options, lexicon):
  r_type_dict = get_type_reward(purchased_product, goal, lexicon)
  r_price = (price <= goal['price_upper']) if goal['price_upper'] > 0 else None
  r_att, num_attr_matches = get_attribute_reward(purchased_product, goal)
  r_option, num_option_matches = get_option_reward(
      purchased_product,
      list(goal['goal_options'].values()) if isinstance(goal['goal_options'], dict)
      else goal['goal_options'], options)
  total_reward = ((num_attr_matches + num_option_matches + r_price)
                  / (len(goal['attributes']) + len(goal['goal_options']) + 1))
  total_reward *= r_type_dict['r_type']
  return total_reward


# -- the world --------------------------------------------------------------------------------
def tokenize(text: str) -> list[str]:
  return re.findall(r"[a-z0-9]+", text.lower())


class BM25:
  """Lucene BM25 (Pyserini's k1=0.9, b=0.4) over the products, weights in SCALE fixed point."""

  def __init__(self, cat: Catalogue, k1: float = 0.9, b: float = 0.4):
    docs = []
    for p in cat.products:
      opts = " ".join(v for _, vals in p.options for v in vals)
      docs.append(tokenize(" ".join([p.title, p.description, " ".join(p.features), opts])))
    n, avgdl = len(docs), sum(len(d) for d in docs) / len(docs)
    df = collections.Counter(t for d in docs for t in set(d))
    self.weight = collections.defaultdict(dict)   # term -> {doc: int weight}
    self.float_weight = collections.defaultdict(dict)
    for j, d in enumerate(docs):
      for t, tf in collections.Counter(d).items():
        idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
        w = idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
        self.float_weight[t][j] = w
        self.weight[t][j] = int(round(w * SCALE))
    self.n = n

  def scores(self, query_words, fixed=True):
    table = self.weight if fixed else self.float_weight
    s = [0] * self.n
    for t in query_words:
      for j, w in table.get(t, {}).items():
        s[j] += w
    return s

  def search(self, query_words, k):
    s = self.scores(query_words)
    ranked = sorted((j for j in range(self.n) if s[j] > 0), key=lambda j: (-s[j], j))
    return ranked[:k]


def price_text(cents):
  return f"${cents // 100}.{cents % 100:02d}"


class PyMiniShop:
  """One MiniShop episode on strings (the rules of agent_rl/envs/minishop, restated)."""

  def __init__(self, cat: Catalogue, *, max_steps=15, num_results=50, max_words=16,
               max_answer_bytes=128, max_bytes=384, list_actions=False, bm25=None,
               weights=(1.0, 0.0, -0.1), page_size=10):
    self.pz = page_size
    self.cat, self.max_steps, self.k = cat, max_steps, num_results
    self.max_words, self.max_answer, self.max_bytes = max_words, max_answer_bytes, max_bytes
    self.list_actions, self.weights = list_actions, weights
    self.bm25 = bm25 or BM25(cat)
    self.by_asin = {p.asin.lower(): i for i, p in enumerate(cat.products)}

  # goal: dict(product, attrs [str], options [str, str], price_upper (dollars), lead)
  def reset(self, goal):
    self.goal = goal
    self.page, self.page_no, self.results, self.item = "search", 0, [], 0
    self.selected = {}
    self.steps, self.done, self.score = 0, False, 0.0
    return self.obs()

  def instruction(self):
    g, p = self.goal, self.cat.products[self.goal["product"]]
    kind_type = p.query
    text = LEADS[g["lead"]] + ("an " if kind_type[0] in "aeio" else "a ") + kind_type
    for j, a in enumerate(g["attrs"]):
      text += (" which is " if j == 0 else " and ") + a
    (k0, _), _ = p.options
    text += f", with {k0}: {g['options'][0]}, and size: {g['options'][1]}"
    return f"Instruction: [SEP] {text}, and price lower than {g['price_upper']}.00 dollars [SEP] "

  def obs(self):
    out = self.instruction()
    p = self.cat.products[self.item]
    shown = self.results[self.page_no * self.pz:(self.page_no + 1) * self.pz]
    has_prev, has_next = self.page_no > 0, (self.page_no + 1) * self.pz < len(self.results)
    if self.page == "search":
      out += "Search"
    elif self.page == "results":
      out += f"Back to Search [SEP] Page {self.page_no + 1} (Total results: {len(self.results)})"
      out += " [SEP] < Prev" * has_prev + " [SEP] Next >" * has_next
      for j in shown:
        q = self.cat.products[j]
        out += f"{SEP}{q.asin}{SEP}{q.title}{SEP}{price_text(q.price)}"
    elif self.page == "item":
      out += "Back to Search [SEP] < Prev"
      for kind, vals in p.options:
        out += SEP + kind + "".join(SEP + v for v in vals)
      out += (f"{SEP}{p.title}{SEP}Price: {price_text(p.price)}{SEP}Rating: N.A.{SEP}"
              f"Description{SEP}Features{SEP}Buy Now")
    elif self.page == "desc":
      out += "Back to Search [SEP] < Prev" + SEP + p.description
    else:
      out += "Back to Search [SEP] < Prev" + "".join(SEP + f for f in p.features)
    if self.list_actions:
      if self.page == "search":
        out += " [SEP] Actions: search[...]"
      else:
        out += " [SEP] Actions: click[back to search]"
        if (self.page == "results" and has_prev) or self.page in ("item", "desc", "features"):
          out += ", click[< prev]"
        if self.page == "results":
          out += ", click[next >]" * has_next
          out += "".join(f", click[{self.cat.products[j].asin.lower()}]" for j in shown)
        if self.page == "item":
          out += "".join(f", click[{v}]" for _, vals in p.options for v in vals)
          out += ", click[description], click[features], click[buy now]"
    return out

  def parse(self, turn: str):
    """(kind, argument) of a well-formed turn, else None."""
    b = turn.encode("utf-8")[:self.max_bytes]
    o = b.find(b"<answer>")
    if o < 0:
      return None
    c = b.find(b"</answer>", o + 8)
    if c < 0 or c - (o + 8) > self.max_answer:
      return None
    s = b[o + 8:c].strip().lower()
    for kind in (b"search[", b"click["):
      if s.startswith(kind) and s.endswith(b"]") and len(s) >= len(kind) + 1:
        arg = s[len(kind):-1]
        if kind == b"search[":
          words = re.findall(rb"[a-z0-9]+", arg)
          return ("search", [w.decode() for w in words]) if words else None
        return "click", arg.strip().decode("utf-8", "replace")
    return None

  def purchase(self):
    """get_reward of buying the current item with the current options."""
    g = self.cat.products[self.goal["product"]]
    p = self.cat.products[self.item]
    goal = {"query": g.query, "product_category": g.product_category, "name": g.name,
            "attributes": self.goal["attrs"], "goal_options": self.goal["options"],
            "price_upper": self.goal["price_upper"]}
    return get_reward(p.as_dict(), goal, p.price / 100, dict(self.selected), self.cat.noun_lexicon)

  def progress(self):
    """The search heuristic: the would-be score on an item page, the score once done."""
    if self.done:
      return self.score
    return self.purchase() if self.page in ("item", "desc", "features") else 0.0

  def step(self, turn: str):
    if self.done:
      return self.obs(), 0.0, True, dict(valid=False, success=self.score >= 1, score=self.score,
                                         terms=[0.0, 0.0, 0.0], truncated=False,
                                         progress=self.progress())
    act = self.parse(turn)
    valid, bought, s = True, False, 0.0
    p = self.cat.products[self.item]
    shown = self.results[self.page_no * self.pz:(self.page_no + 1) * self.pz]
    values = {v: k for k, (_, vals) in enumerate(p.options) for v in vals}
    if act is None:
      valid = False
    elif act[0] == "search":
      if self.page == "search":
        self.results = self.bm25.search(act[1][:self.max_words], self.k)
        self.page, self.page_no = "results", 0
      else:
        valid = False
    else:
      name = act[1]
      if name == "back to search" and self.page != "search":
        self.page = "search"
      elif (self.page == "results" and name == "next >"
            and (self.page_no + 1) * self.pz < len(self.results)):
        self.page_no += 1
      elif self.page == "results" and name == "< prev" and self.page_no > 0:
        self.page_no -= 1
      elif self.page == "results" and name in self.by_asin and self.by_asin[name] in shown:
        self.page, self.item, self.selected = "item", self.by_asin[name], {}
      elif self.page == "item" and name == "< prev":
        self.page = "results"
      elif self.page == "item" and name == "description":
        self.page = "desc"
      elif self.page == "item" and name == "features":
        self.page = "features"
      elif self.page in ("desc", "features") and name == "< prev":
        self.page = "item"
      elif self.page == "item" and name in values:
        self.selected[p.options[values[name]][0]] = name
      elif self.page == "item" and name == "buy now":
        bought = True
        s = self.purchase()
        self.score, self.done = s, True
      else:
        valid = False
    self.steps += 1
    truncated = not self.done and self.steps >= self.max_steps
    self.done = self.done or truncated
    terms = [s, float(bought and s >= 1), float(not valid)]
    reward = sum(t * w for t, w in zip(terms, self.weights))
    return self.obs(), reward, self.done, dict(valid=valid, success=self.score >= 1,
                                               score=self.score, terms=terms, truncated=truncated,
                                               progress=self.progress())
