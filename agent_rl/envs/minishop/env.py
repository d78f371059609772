"""MiniShop: a WebShop-like shopping environment in pure JAX (Yao et al. 2022, arXiv:2207.01206).

The agent reads an instruction ("i need a clip-in hair extension which is natural looking,
with color: black, and size: 18 inch, and price lower than 40.00 dollars") and acts on
WebShop's pages: `search[keywords]` on the search page -> result pages (10 items, Next >,
< Prev) ranked by BM25 over the catalogue (retrieval.py), `click[ASIN]` -> item page
(options, Description, Features), `click[option]` selects an option, `click[< prev]` /
`click[back to search]` navigate, `click[buy now]` ends the episode with WebShop's score
(reward.py). A turn is `<answer>search[...]</answer>` or `<answer>click[...]</answer>`
(parse.py); a malformed turn, or a click on something not on the page, is an invalid action:
nothing changes and it costs a step. Episodes end at Buy Now or after `max_steps` steps
(base.step_limit, `info["truncated"]`; WebShop runs use 15).

Reward terms (weights `reward_weights`, default (1, 0, -0.1)):
    score    WebShop's purchase score in [0, 1] on the Buy Now step (the papers' "score")
    success  1 on a Buy Now scoring 1 (the papers' "success rate")
    format   1 if the turn was an invalid action
`info["success"]` is the episode state (bought with score 1), `info["score"]` the episode's
score so far (0 until bought). The jitted step composes public pure functions that can be
timed separately: `parse` (turn -> ParsedAction), `retrieve` (query terms -> ranked results),
`transition` (page dynamics), `purchase_score` (WebShop's score), `render` (state -> Text).
Also: `progress(state)` (search heuristic: the would-be score of the current item and
options), `privileged_text(task)` (hindsight teachers: target ASIN, title, attributes,
options), `solve(task)` (expert plan) and `episode_texts(task)` (pages along the expert plan,
a tokenizer corpus). Tests: tests/envs/minishop (plain-Python world in reference.py).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import ENVS, Text, fingerprint, step_limit, validate_fields
from agent_rl.envs.byte_scan import ByteTable, WordTable
from agent_rl.envs.minishop import pages, parse as parse_lib, retrieval, reward
from agent_rl.envs.minishop.catalogue import TYPES, Catalogue, words

REWARD_NAMES = ("score", "success", "format")
NB = len(pages.BUTTONS)


@struct.dataclass
class MiniShopTask:
  """A goal: target `product` int32, `attrs [GA]` int32 attribute ids (-1 pad), `options [2]`
  int32 value ids, `price_upper` int32 dollars (a multiple of 10), `lead` int32 wording."""
  product: jax.Array
  attrs: jax.Array
  options: jax.Array
  price_upper: jax.Array
  lead: jax.Array


@struct.dataclass
class MiniShopState:
  task: MiniShopTask
  page: jax.Array        # int32 pages.*_PAGE
  page_no: jax.Array     # int32 result page (0-based)
  results: jax.Array     # [K] int32 ranked product ids (-1 past n_results)
  n_results: jax.Array   # int32
  query: jax.Array       # [Q] int32 BM25 term ids of the last search (-1 pad)
  item: jax.Array        # int32 product of the item page
  selected: jax.Array    # [2] int32 chosen value per option slot (-1 none)
  steps: jax.Array       # int32
  done: jax.Array        # bool
  score: jax.Array       # f32 score of the purchase (0 before)


@functools.lru_cache(maxsize=8)
def _world(num_products, seed, attrs_per_product, max_option_values, k1, b):
  """Catalogue, score tables and BM25 index (host; cached: the tables take a moment)."""
  cat = Catalogue(num_products, seed, attrs_per_product, max_option_values)
  terms, w = retrieval.build_index(cat, k1, b)
  return cat, reward.build_tables(cat), terms, w


@ENVS.register("minishop")
@dataclasses.dataclass(frozen=True)
class MiniShop:
  """`make("minishop", tokenizer=tok, num_products=300, max_steps=15)`."""
  tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)
  num_products: int = 300
  catalogue_seed: int = 0
  attrs_per_product: int = 3
  max_option_values: int = 4
  goal_attrs: int = 2
  num_results: int = 50
  page_size: int = pages.PAGE_SIZE
  max_steps: int = 15
  max_words: int = 16
  max_answer_bytes: int = 128
  max_bytes: int = 384
  list_actions: bool = False
  bm25_k1: float = 0.9
  bm25_b: float = 0.4
  reward_weights: tuple = (1.0, 0.0, -0.1)
  layout: pages.Layout = dataclasses.field(init=False, repr=False, compare=False)
  bytes_: ByteTable = dataclasses.field(init=False, repr=False)
  _digest: str = dataclasses.field(init=False, repr=False)

  reward_names = REWARD_NAMES

  def __post_init__(self):
    validate_fields(self, REWARD_NAMES, ("attrs_per_product", "max_option_values", "goal_attrs",
                                         "max_steps", "max_words", "max_answer_bytes", "max_bytes"))
    if self.goal_attrs > self.attrs_per_product:
      raise ValueError(f"MiniShop.goal_attrs={self.goal_attrs} exceeds attrs_per_product="
                       f"{self.attrs_per_product}")
    if not 1 <= self.page_size <= self.num_results:
      raise ValueError(f"MiniShop.page_size must be in [1, num_results={self.num_results}], "
                       f"got {self.page_size}")
    if (self.num_results > 99 or self.num_results % self.page_size
        or self.num_results // self.page_size > 9):
      raise ValueError(f"MiniShop.num_results must be a multiple of page_size={self.page_size}, "
                       f"at most 99 and 9 pages, got {self.num_results}")
    if self.num_products < self.num_results:
      raise ValueError(f"MiniShop.num_products={self.num_products} is below num_results="
                       f"{self.num_results}")
    if self.max_bytes < self.max_answer_bytes + 17:
      raise ValueError(f"MiniShop.max_bytes={self.max_bytes} cannot hold the tags around "
                       f"max_answer_bytes={self.max_answer_bytes}")
    if not (self.bm25_k1 > 0 and 0 <= self.bm25_b <= 1):
      raise ValueError(f"MiniShop BM25 needs bm25_k1 > 0 and 0 <= bm25_b <= 1, got "
                       f"{self.bm25_k1}, {self.bm25_b}")
    cat, tables, terms, w = _world(self.num_products, self.catalogue_seed, self.attrs_per_product,
                                   self.max_option_values, float(self.bm25_k1), float(self.bm25_b))
    retrieval.check_range(retrieval.quantize(w), self.max_words)
    layout = pages.Layout(self.tokenizer, cat, self.goal_attrs, self.num_results, self.list_actions,
                          self.page_size)
    clicks = list(pages.BUTTONS) + [p.asin.lower() for p in cat.products] + list(cat.values)
    sets = dict(layout=layout, bytes_=ByteTable(self.tokenizer), catalogue=cat, tables=tables,
                terms=terms, term_index={t: i for i, t in enumerate(terms)},
                index=retrieval.BM25Index(weights=retrieval.quantize(w)),
                clicks=WordTable(clicks), term_table=WordTable(terms),
                _digest=layout.table._digest)
    for k, v in sets.items():
      object.__setattr__(self, k, v)

  @property
  def obs_len(self) -> int:
    return self.layout.obs_len

  @property
  def tokenizer_symbols(self) -> tuple:
    """The catalogue's item ids ("B09VM3"), for a tokenizer that keeps each one a single token
    (config tokenizer.env_symbols): a tiny policy then copies an id from the results page as one
    token; split into six, it named an id on the page in 15 of 120 clicks after 300 SFT steps."""
    return tuple(p.asin for p in self.catalogue.products)

  @property
  def instruction(self) -> str:
    return ("You are shopping in MiniShop, a web store. Follow the instruction on the page to "
            "find and buy the right product with the right options. Actions: search[keywords] "
            "on the search page; click[name] for something clickable on the current page: an "
            "item id such as B0K3QX, an option value, Next >, < Prev, Back to Search, "
            "Description, Features, Buy Now. Give one action in <answer> </answer>, e.g. "
            "<answer>search[red running shoes]</answer> or <answer>click[buy now]</answer>.")

  # -- tasks ----------------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> MiniShopTask:
    """A goal in WebShop's style: product, 1..goal_attrs of its attributes, one value per option
    slot, price bound max of two of the 4 multiples of 10 above the price (goal.py)."""
    arr = self.catalogue.arrays
    ma, ga = self.attrs_per_product, self.goal_attrs
    # One uniform draw feeds every choice (a single threefry call keeps compiles short).
    u = jax.random.uniform(key, (5 + ma,))

    def pick(x, size):  # int in [0, size) from x ~ U[0, 1)
      return jnp.minimum(jnp.floor(x * size).astype(jnp.int32), size - 1)

    p = pick(u[0], self.num_products)
    n = 1 + pick(u[1], ga)
    pos = jnp.sort(jnp.where(jnp.arange(ga) < n, jnp.argsort(u[5:])[:ga], ma))
    attrs = jnp.where(pos < ma, jnp.asarray(arr["prod_attrs"])[p, jnp.minimum(pos, ma - 1)], -1)
    n_opts = jnp.asarray(arr["prod_n_opts"])[p]
    opts = jnp.asarray(arr["prod_opts"])[p, jnp.arange(2), pick(u[2:4], n_opts)]
    base = jnp.asarray(arr["price"])[p] // 1000 + 1
    # goal.py: the larger of two distinct draws from the 4 multiples of 10 above the price;
    # of the 6 pairs, 1 / 2 / 3 have their larger member at offset 1 / 2 / 3.
    hi = jnp.asarray([1, 2, 2, 3, 3, 3], jnp.int32)[pick(u[4], 6)]
    lead = pick(jnp.mod(u[4] * 6, 1.0), len(pages.LEADS))
    return MiniShopTask(product=p.astype(jnp.int32), attrs=attrs.astype(jnp.int32),
                        options=opts.astype(jnp.int32), price_upper=(10 * (base + hi)).astype(jnp.int32),
                        lead=lead.astype(jnp.int32))

  # -- pure pieces of the step ----------------------------------------------------------------
  def parse(self, action: Text) -> parse_lib.ParsedAction:
    return parse_lib.parse_action(self.bytes_, action, self.clicks, self.term_table,
                                  self.max_words, self.max_bytes, self.max_answer_bytes)

  def retrieve(self, terms: jax.Array) -> tuple[jax.Array, jax.Array]:
    """BM25 top-`num_results` of a query's term ids `[Q]`: `(results [K], n)`."""
    return retrieval.search(jax.tree.map(jnp.asarray, self.index), terms, self.num_results)

  def transition(self, state: MiniShopState, act: parse_lib.ParsedAction, results, n_results):
    """Page dynamics: `(state', valid, bought)` for a parsed action and the search's results."""
    arr = self.catalogue.arrays
    page, c, pz = state.page, act.click, self.page_size
    on = lambda pg: page == pg
    button = lambda b: act.valid & (act.kind == parse_lib.CLICK) & (c == b)
    prod = c - NB
    value = c - NB - self.num_products
    is_prod = act.valid & (act.kind == parse_lib.CLICK) & (prod >= 0) & (prod < self.num_products)
    is_value = act.valid & (act.kind == parse_lib.CLICK) & (value >= 0)
    start = state.page_no * pz
    shown = jax.lax.dynamic_slice(state.results, (start,), (pz,))
    shown_live = start + jnp.arange(pz) < state.n_results
    search = act.valid & (act.kind == parse_lib.SEARCH) & on(pages.SEARCH_PAGE)
    pick = on(pages.RESULTS_PAGE) & is_prod & jnp.any(shown_live & (shown == prod))
    nxt = on(pages.RESULTS_PAGE) & button(pages.NEXT) & (start + pz < state.n_results)
    prv = on(pages.RESULTS_PAGE) & button(pages.PREV) & (state.page_no > 0)
    back = ~on(pages.SEARCH_PAGE) & button(pages.BACK)
    item_prev = on(pages.ITEM_PAGE) & button(pages.PREV)
    to_desc = on(pages.ITEM_PAGE) & button(pages.DESC)
    to_feat = on(pages.ITEM_PAGE) & button(pages.FEAT)
    sub_prev = (on(pages.DESC_PAGE) | on(pages.FEAT_PAGE)) & button(pages.PREV)
    buy = on(pages.ITEM_PAGE) & button(pages.BUY)
    opts = jnp.asarray(arr["prod_opts"])[state.item]                          # [2, MV]
    live_opt = jnp.arange(opts.shape[1])[None, :] < jnp.asarray(arr["prod_n_opts"])[state.item][:, None]
    slot_hit = jnp.any(live_opt & (opts == value), axis=1)                   # [2]
    choose = on(pages.ITEM_PAGE) & is_value & jnp.any(slot_hit)
    valid = (search | pick | nxt | prv | back | item_prev | to_desc | to_feat | sub_prev | buy
             | choose) & ~state.done
    new_page = jnp.select(
        [search, pick, back, item_prev, to_desc, to_feat, sub_prev],
        [pages.RESULTS_PAGE, pages.ITEM_PAGE, pages.SEARCH_PAGE, pages.RESULTS_PAGE,
         pages.DESC_PAGE, pages.FEAT_PAGE, pages.ITEM_PAGE], page)
    page_no = jnp.where(search, 0, state.page_no + nxt.astype(jnp.int32) - prv.astype(jnp.int32))
    selected = jnp.where(pick, -1, jnp.where(choose & slot_hit, value, state.selected))
    new = state.replace(
        page=jnp.where(valid, new_page, page).astype(jnp.int32),
        page_no=jnp.where(valid, page_no, state.page_no).astype(jnp.int32),
        results=jnp.where(valid & search, results, state.results),
        n_results=jnp.where(valid & search, n_results, state.n_results),
        query=jnp.where(valid & search, act.terms, state.query),
        item=jnp.where(valid & pick, prod, state.item).astype(jnp.int32),
        selected=jnp.where(valid, selected, state.selected).astype(jnp.int32))
    return new, valid, valid & buy

  def purchase_score(self, task: MiniShopTask, product, selected) -> jax.Array:
    """WebShop's score (reward.score) of buying `product` with `selected [2]` for `task`."""
    return reward.score(self.tables, task.product, task.attrs, task.options, task.price_upper,
                        product, selected)

  def progress(self, state: MiniShopState) -> jax.Array:
    """f32 in [0, 1] for search heuristics (rollout/search.py `env_progress`): the score that
    buying the current item with the current options would get on an item page (or its
    Description / Features pages), the purchase's score once done, else 0."""
    on_item = ((state.page == pages.ITEM_PAGE) | (state.page == pages.DESC_PAGE)
               | (state.page == pages.FEAT_PAGE))
    now = self.purchase_score(state.task, state.item, state.selected)
    return jnp.where(state.done, state.score, jnp.where(on_item, now, 0.0)).astype(jnp.float32)

  def page_pieces(self, state: MiniShopState) -> tuple[jax.Array, jax.Array]:
    """`(ids [S], mask [S])`: the pieces of the state's page."""
    arr = self.catalogue.arrays
    return self.layout.slots(state.task, state.page, state.page_no, state.results,
                             state.n_results, state.item, jnp.asarray(arr["prod_opts"])[state.item],
                             jnp.asarray(arr["prod_n_opts"])[state.item])

  def render(self, state: MiniShopState) -> Text:
    """Observation tokens `[obs_len]` of a state."""
    return self.layout.render(*self.page_pieces(state))

  # -- contract -------------------------------------------------------------------------------
  def reset(self, key: jax.Array, task: MiniShopTask):
    del key  # the task fixes the start
    state = self.initial_state(task)
    return state, self.render(state)

  def initial_state(self, task: MiniShopTask) -> MiniShopState:
    """The search page of a task (what `reset` renders)."""
    k, q = self.num_results, self.max_words
    return MiniShopState(task=task, page=jnp.int32(pages.SEARCH_PAGE), page_no=jnp.int32(0),
                          results=jnp.full((k,), -1, jnp.int32), n_results=jnp.int32(0),
                          query=jnp.full((q,), -1, jnp.int32), item=jnp.int32(0),
                          selected=jnp.full((2,), -1, jnp.int32), steps=jnp.int32(0),
                          done=jnp.bool_(False), score=jnp.float32(0))

  def step(self, state: MiniShopState, action: Text):
    act = self.parse(action)
    results, n = self.retrieve(act.terms)
    new, valid, bought = self.transition(state, act, results, n)
    live = ~state.done
    s = jnp.where(bought, self.purchase_score(state.task, state.item, state.selected), 0.0)
    steps, done, truncated = step_limit(state.steps, 1, live, bought, state.done, self.max_steps)
    new = new.replace(steps=steps, done=done, score=jnp.where(bought, s, state.score))
    win = bought & (s >= 1.0)
    terms = jnp.stack([s, win, live & ~valid]).astype(jnp.float32)
    info = {"success": new.score >= 1.0, "valid_action": valid, "state_hash": self.state_hash(new),
            "reward_terms": terms, "truncated": truncated, "score": new.score}
    reward_ = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    return new, self.render(new), reward_, done, info

  def state_hash(self, state: MiniShopState) -> jax.Array:
    """uint32 fingerprint of (goal, page, result page, query, item, selections, done)."""
    t = state.task
    return fingerprint(t.product, t.attrs, t.options, t.price_upper, t.lead, state.page,
                       state.page_no, state.query, state.item, state.selected, state.done)

  def privileged_text(self, task: MiniShopTask) -> Text:
    """Hindsight text for TRIAL-style teachers: the target's ASIN, title, attributes, options."""
    lay = self.layout
    ids = jnp.stack([jnp.asarray(lay.priv_ids)[task.product],
                     jnp.asarray(lay.value_ids)[jnp.maximum(task.options[0], 0)],
                     jnp.int32(lay.id(", ")),
                     jnp.asarray(lay.value_ids)[jnp.maximum(task.options[1], 0)]])
    mask = jnp.stack([jnp.bool_(True), task.options[0] >= 0,
                      (task.options[0] >= 0) & (task.options[1] >= 0), task.options[1] >= 0])
    return lay.table.render(ids, self.privileged_len, mask)

  @property
  def privileged_len(self) -> int:
    L, lay = self.layout.table.lengths, self.layout
    return int(L[lay.priv_ids].max() + 2 * L[lay.value_ids].max() + L[lay.id(", ")])

  # -- host side ------------------------------------------------------------------------------
  def render_text(self, state_or_task) -> str:
    """Host text of a state's page (a task: its first page); equals decode(render(state))."""
    state = state_or_task
    if isinstance(state, MiniShopTask):
      state = self.initial_state(state)
    return self.layout.text(*_pieces(self, state))

  def episode_texts(self, task: MiniShopTask, action_len: int = 128) -> list[str]:
    """Page texts along the expert plan: a tokenizer corpus covering result and item pages
    (titles, options), which `render_text(task)` (the search page) alone does not show."""
    state = jax.tree.map(jnp.asarray, self.initial_state(task))
    texts = [self.render_text(state)]
    for a in self.solve(task):
      ids = list(self.tokenizer.encode(f"<answer>{a}</answer>"))[:action_len]
      toks = np.full((action_len,), self.tokenizer.pad_id, np.int32)
      toks[:len(ids)] = ids
      state = _step(self, state, Text(tokens=jnp.asarray(toks), length=jnp.int32(len(ids))))
      texts.append(self.render_text(state))
    return texts

  def solve(self, task: MiniShopTask) -> list[str]:
    """Expert plan: search with the goal's words (else the target's title), page to the first
    result that scores 1 with the goal's options, click it, pick the options, buy."""
    cat, tb = self.catalogue, self.tables
    g = int(task.product)
    attrs = [cat.attributes[a] for a in np.asarray(task.attrs) if a >= 0]
    opts = [int(v) for v in np.asarray(task.options)]
    queries = [" ".join([TYPES[cat.products[g].type_id][2]] + attrs), cat.products[g].title]
    w = np.asarray(self.index.weights)
    arr = cat.arrays
    for q in queries:
      ids = [self.term_index[t] for t in words(q)[:self.max_words] if t in self.term_index]
      s = w[ids].sum(axis=0)
      ranked = sorted(range(len(s)), key=lambda d: (-int(s[d]), d))
      ranked = [d for d in ranked if s[d] > 0][:self.num_results]
      for r, d in enumerate(ranked):
        vals = [list(arr["prod_opts"][d, k, :arr["prod_n_opts"][d, k]]) for k in range(2)]
        sel = [v if v in vals[k] else -1 for k, v in enumerate(opts)]
        if _np_score(tb, task, d, sel) < 1.0:
          continue
        plan = ([f"search[{q}]"] + ["click[next >]"] * (r // self.page_size)
                + [f"click[{cat.products[d].asin}]"]
                + [f"click[{cat.values[v]}]" for v in sel if v >= 0] + ["click[buy now]"])
        if len(plan) <= self.max_steps:
          return plan
    raise RuntimeError(f"MiniShop solver found no plan for target product {g}")


def _np_score(tb: reward.ScoreTables, task, d: int, sel) -> float:
  """reward.score on the host for the solver (numpy, one candidate)."""
  ga = [int(a) for a in np.asarray(task.attrs) if a >= 0]
  go = [int(v) for v in np.asarray(task.options) if v >= 0]
  attr = sum(bool(tb.attr_hit[a, d]) for a in ga)
  opt = sum(bool(any(tb.opt_match[u, w] for w in go) or tb.opt_text[u, d]) for u in sel if u >= 0)
  price = int(tb.price[d] <= int(task.price_upper) * 100)
  return float(tb.r_type[d, int(task.product)]) * (attr + opt + price) / (len(ga) + len(go) + 1)


@functools.partial(jax.jit, static_argnums=0)
def _pieces(env, state):
  return env.page_pieces(state)


@functools.partial(jax.jit, static_argnums=0)
def _step(env, state, action):
  return env.step(state, action)[0]
