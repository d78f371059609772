"""MiniShop's pages as text, in WebShop's text observation mode (Yao et al. 2022, the page
text with " [SEP] " between elements, as verl-agent's WebShop env shows it):

    search   Instruction: [SEP] <goal> [SEP] Search
    results  Instruction: [SEP] <goal> [SEP] Back to Search [SEP] Page 1 (Total results: 50)
             [SEP] Next > [SEP] B0K3QX [SEP] <title> [SEP] $12.34 [SEP] ... (10 items)
    item     Instruction: [SEP] <goal> [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] red
             [SEP] blue [SEP] size [SEP] small [SEP] <title> [SEP] Price: $12.34 [SEP]
             Rating: N.A. [SEP] Description [SEP] Features [SEP] Buy Now
    desc     ... [SEP] Back to Search [SEP] < Prev [SEP] <description>
    features ... [SEP] Back to Search [SEP] < Prev [SEP] <bullet> [SEP] <bullet> ...

With `list_actions` the page ends with " [SEP] Actions: " and the page's valid actions
(`search[...]`, or `click[...]` for each clickable), as verl-agent lists admissible actions.
Every page is a fixed list of slots holding piece ids (a product's result row, title block,
description and bullets are one piece each, tokenized once), rendered by PieceTable.
`Layout.slots(...)` gives `(ids [S], mask [S])` for a state; host text joins the pieces.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import Text
from agent_rl.envs.render import PieceTable, int_pieces
from agent_rl.envs.minishop.catalogue import TYPES, Catalogue

SEARCH_PAGE, RESULTS_PAGE, ITEM_PAGE, DESC_PAGE, FEAT_PAGE = range(5)
BUTTONS = ("back to search", "next >", "< prev", "description", "features", "buy now")
BACK, NEXT, PREV, DESC, FEAT, BUY = range(len(BUTTONS))
LEADS = ("i need ", "i am looking for ", "i want to buy ")
PAGE_SIZE = 10   # WebShop's results per page (the default of MiniShop.page_size)
_SEP = " [SEP] "


def _article(phrase: str) -> str:
  return ("an " if phrase[0] in "aeio" else "a ") + phrase   # "a usb ...", "an eyeshadow ..."


def price_text(cents: int) -> str:
  return f"${cents // 100}.{cents % 100:02d}"


class Layout:
  """Pieces and slot layout of a catalogue's pages (host tables, jit-static via its digest)."""

  def __init__(self, tokenizer, cat: Catalogue, goal_attrs: int, results: int, list_actions: bool,
               page_size: int = PAGE_SIZE):
    self.cat, self.goal_attrs, self.k, self.list_actions = cat, goal_attrs, results, list_actions
    self.page_size = page_size
    prods = cat.products
    kinds = sorted({k for p in prods for k, _ in p.options})
    self.rows = [f"{_SEP}{p.asin}{_SEP}{p.title}{_SEP}{price_text(p.price)}" for p in prods]
    self.items = [f"{_SEP}{p.title}{_SEP}Price: {price_text(p.price)}{_SEP}Rating: N.A.{_SEP}"
                  f"Description{_SEP}Features{_SEP}Buy Now" for p in prods]
    self.descs = [f"{_SEP}{p.description}" for p in prods]
    self.feats = ["".join(_SEP + f for f in p.features) for p in prods]
    self.priv = [f"Target product: {p.asin}{_SEP}{p.title}{_SEP}attributes: "
                 f"{', '.join(p.attributes)}{_SEP}options: " for p in prods]
    self.types = [_article(t[2]) for t in TYPES]
    fixed = (["Instruction: [SEP] ", " which is ", " and ", ", and size: ",
              ", and price lower than ", _SEP, ", ", "Search", "Back to Search [SEP] Page ",
              " (Total results: ", ")", " [SEP] < Prev", " [SEP] Next >",
              "Back to Search [SEP] < Prev"] + [str(d) for d in range(10)] + list(LEADS)
             + [f", with {k}: " for k in kinds if k != "size"] + [_SEP + k for k in kinds]
             + [f"{10 * i}.00 dollars" for i in range(1, 100)])
    acts = [" [SEP] Actions: search[...]", " [SEP] Actions: click[back to search]",
            ", click[< prev]", ", click[next >]", ", click[description], click[features], "
            "click[buy now]"]
    self.values = list(cat.values)
    pieces = (fixed + list(cat.attributes) + self.values + [_SEP + v for v in self.values]
              + self.types + self.rows + self.items + self.descs + self.feats + self.priv
              + (acts + [f", click[{p.asin.lower()}]" for p in prods]
                 + [f", click[{v}]" for v in self.values] if list_actions else []))
    seen = dict.fromkeys(pieces)
    self.table = PieceTable(tokenizer, list(seen))
    pid = self.table.id
    self.id = pid
    self.digit_ids = np.array([pid(str(d)) for d in range(10)], np.int32)
    self.attr_ids = np.array([pid(a) for a in cat.attributes], np.int32)
    self.value_ids = np.array([pid(v) for v in self.values], np.int32)
    self.sep_value_ids = np.array([pid(_SEP + v) for v in self.values], np.int32)
    self.type_ids = np.array([pid(t) for t in self.types], np.int32)
    self.prod_type = np.array([p.type_id for p in prods], np.int32)
    self.row_ids = np.array([pid(r) for r in self.rows], np.int32)
    self.item_ids = np.array([pid(r) for r in self.items], np.int32)
    self.desc_ids = np.array([pid(r) for r in self.descs], np.int32)
    self.feat_ids = np.array([pid(r) for r in self.feats], np.int32)
    self.priv_ids = np.array([pid(r) for r in self.priv], np.int32)
    self.lead_ids = np.array([pid(x) for x in LEADS], np.int32)
    self.price_ids = np.array([pid(f"{10 * i}.00 dollars") for i in range(1, 100)], np.int32)
    self.kind_names = kinds
    self.prod_kind_with = np.array([[pid(f", with {k}: ") if k != "size" else pid(", and size: ")
                                     for k, _ in p.options] for p in prods], np.int32)
    self.prod_kind_label = np.array([[pid(_SEP + k) for k, _ in p.options] for p in prods], np.int32)
    if list_actions:
      self.act_ids = np.array([pid(a) for a in acts], np.int32)
      self.act_asin = np.array([pid(f", click[{p.asin.lower()}]") for p in prods], np.int32)
      self.act_value = np.array([pid(f", click[{v}]") for v in self.values], np.int32)
    spec = []
    task = jax.ShapeDtypeStruct((), jnp.int32)
    jax.eval_shape(lambda t, g, o, pg, r: self.slots(
        _Goal(t, g, o, t, t), pg, t, r, t, t, jnp.zeros((2, cat.max_values), jnp.int32),
        jnp.zeros((2,), jnp.int32), spec), task, jax.ShapeDtypeStruct((goal_attrs,), jnp.int32),
        jax.ShapeDtypeStruct((2,), jnp.int32), task, jax.ShapeDtypeStruct((results,), jnp.int32))
    widths = np.array([int(self.table.lengths[c].max()) for c, _ in spec], np.int32)
    tags = np.array([t for _, t in spec], np.int32)
    self.obs_len = int(widths[tags == -1].sum() + max(widths[tags == k].sum() for k in range(5))
                       + widths[tags == 5].sum())
    # Flat gather/scatter plan: element e copies token col[e] of the piece in slot[e].
    self._slot = np.repeat(np.arange(len(widths)), widths).astype(np.int32)
    self._col = np.concatenate([np.arange(w) for w in widths]).astype(np.int32)

  def slots(self, task, page, page_no, results, n_results, item, prod_opts, prod_n_opts,
            spec=None):
    """`(ids [S], mask [S])`: the page's pieces. Every page kind has its own slots (masked off
    on other pages) so each slot's width is the longest piece it can hold."""
    ids, mask = [], []
    pad = jnp.asarray

    def add(i, m, cands, tag):
      i = jnp.atleast_1d(jnp.asarray(i, jnp.int32))
      ids.append(i)
      mask.append(jnp.broadcast_to(jnp.asarray(m, bool), i.shape))
      if spec is not None:
        spec.extend([(np.atleast_1d(np.asarray(cands, np.int32)), tag)] * i.shape[0])

    p, pz, mv = self.id, self.page_size, self.cat.max_values
    # instruction (tag -1: on every page)
    ga = task.attrs
    add(p("Instruction: [SEP] "), True, p("Instruction: [SEP] "), -1)
    add(pad(self.lead_ids)[task.lead], True, self.lead_ids, -1)
    add(pad(self.type_ids)[pad(self.prod_type)[task.product]], True, self.type_ids, -1)
    for j in range(self.goal_attrs):
      add(p(" which is ") if j == 0 else p(" and "), ga[j] >= 0, [p(" which is "), p(" and ")], -1)
      add(pad(self.attr_ids)[jnp.maximum(ga[j], 0)], ga[j] >= 0, self.attr_ids, -1)
    with_ids = pad(self.prod_kind_with)[task.product]
    for k in range(2):
      add(with_ids[k], task.options[k] >= 0, self.prod_kind_with.ravel(), -1)
      add(pad(self.value_ids)[jnp.maximum(task.options[k], 0)], task.options[k] >= 0,
          self.value_ids, -1)
    add(p(", and price lower than "), True, p(", and price lower than "), -1)
    add(pad(self.price_ids)[jnp.clip(task.price_upper // 10 - 1, 0, 98)], True, self.price_ids, -1)
    add(p(_SEP), True, p(_SEP), -1)
    # search page
    add(p("Search"), page == SEARCH_PAGE, p("Search"), SEARCH_PAGE)
    # results page
    on = page == RESULTS_PAGE
    start = page_no * pz
    shown = jax.lax.dynamic_slice(results, (start,), (pz,))
    row_live = (start + jnp.arange(pz)) < n_results
    has_prev, has_next = page_no > 0, start + pz < n_results
    n_ids, n_mask = int_pieces(n_results, pad(self.digit_ids), 2)
    add(p("Back to Search [SEP] Page "), on, p("Back to Search [SEP] Page "), RESULTS_PAGE)
    add(pad(self.digit_ids)[(page_no + 1) % 10], on, self.digit_ids, RESULTS_PAGE)
    add(p(" (Total results: "), on, p(" (Total results: "), RESULTS_PAGE)
    add(n_ids, on & n_mask, self.digit_ids, RESULTS_PAGE)
    add(p(")"), on, p(")"), RESULTS_PAGE)
    add(p(" [SEP] < Prev"), on & has_prev, p(" [SEP] < Prev"), RESULTS_PAGE)
    add(p(" [SEP] Next >"), on & has_next, p(" [SEP] Next >"), RESULTS_PAGE)
    add(pad(self.row_ids)[jnp.maximum(shown, 0)], on & row_live, self.row_ids, RESULTS_PAGE)
    # item page
    on = page == ITEM_PAGE
    labels = pad(self.prod_kind_label)[item]
    add(p("Back to Search [SEP] < Prev"), on, p("Back to Search [SEP] < Prev"), ITEM_PAGE)
    for k in range(2):
      add(labels[k], on, self.prod_kind_label.ravel(), ITEM_PAGE)
      add(pad(self.sep_value_ids)[jnp.maximum(prod_opts[k], 0)],
          on & (jnp.arange(mv) < prod_n_opts[k]), self.sep_value_ids, ITEM_PAGE)
    add(pad(self.item_ids)[item], on, self.item_ids, ITEM_PAGE)
    # description and features pages
    for kind, table in ((DESC_PAGE, self.desc_ids), (FEAT_PAGE, self.feat_ids)):
      add(p("Back to Search [SEP] < Prev"), page == kind, p("Back to Search [SEP] < Prev"), kind)
      add(pad(table)[item], page == kind, table, kind)
    if self.list_actions:   # tag 5: counted in full for obs_len
      a = pad(self.act_ids)
      on_res, on_item = page == RESULTS_PAGE, page == ITEM_PAGE
      sub = (page == DESC_PAGE) | (page == FEAT_PAGE)
      add(a[0], page == SEARCH_PAGE, self.act_ids[0], 5)
      add(a[1], page != SEARCH_PAGE, self.act_ids[1], 5)
      add(a[2], (on_res & has_prev) | on_item | sub, self.act_ids[2], 5)
      add(a[3], on_res & has_next, self.act_ids[3], 5)
      add(pad(self.act_asin)[jnp.maximum(shown, 0)], on_res & row_live, self.act_asin, 5)
      live = (jnp.arange(mv)[None, :] < prod_n_opts[:, None]).reshape(-1)
      add(pad(self.act_value)[jnp.maximum(prod_opts.reshape(-1), 0)], on_item & live,
          self.act_value, 5)
      add(a[4], on_item, self.act_ids[4], 5)
    return jnp.concatenate(ids), jnp.concatenate(mask)

  def render(self, ids, mask) -> Text:
    """Tokens `[obs_len]` of slots: one gather and one scatter of sum(slot widths) tokens
    (each slot's width is its longest candidate piece; cheaper than render.compact's
    position x slot comparison at these lengths)."""
    toks = jnp.asarray(self.table.tokens)
    m = toks.shape[1]
    lens = jnp.where(mask, jnp.asarray(self.table.lengths)[ids], 0)
    starts = jnp.cumsum(lens) - lens
    slot, col = jnp.asarray(self._slot), jnp.asarray(self._col)
    vals = toks.reshape(-1)[ids[slot] * m + col]
    # dropped elements get distinct out-of-range positions, so every index is unique
    pos = jnp.where(col < lens[slot], starts[slot] + col, self.obs_len + jnp.arange(col.shape[0]))
    out = jnp.full((self.obs_len,), self.table.pad_id, jnp.int32).at[pos].set(
        vals, mode="drop", unique_indices=True)
    return Text(tokens=out, length=jnp.minimum(jnp.sum(lens), self.obs_len).astype(jnp.int32))

  def text(self, ids, mask) -> str:
    """Host text of slots (what `render` decodes to with the project tokenizers)."""
    return "".join(self.table.pieces[int(i)] for i, m in zip(np.asarray(ids), np.asarray(mask)) if m)


@struct.dataclass
class _Goal:
  """The task fields the instruction reads (shape-only stand-in while sizing the layout)."""
  product: jax.Array
  attrs: jax.Array
  options: jax.Array
  price_upper: jax.Array
  lead: jax.Array
