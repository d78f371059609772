"""MiniShop's generated catalogue: categories, product types, attributes, options, prices.

A small WebShop (Yao et al. 2022, arXiv:2207.01206): each product has WebShop's fields
(`asin`, `product_category` "top › sub › type", `query`, `Title`/`name`, `Attributes`,
`BulletPoints` (features), `Description`, `options` {kind: values}, `price`), generated from
a fixed taxonomy with a seeded NumPy generator, so a catalogue is a pure function of
`(num_products, seed)`. Every product has two option kinds: slot 0 is color, flavor or scent
(per type), slot 1 is size (WebShop's only exact-match option, EXACT_MATCH_OPTS = ["size"]).
All text is lower case except ASINs; words are `[a-z0-9]+` runs (`words`), the tokenization
of both the BM25 index and the search queries.

`Catalogue.arrays` holds what jitted code needs (attribute/option ids per product, prices in
cents); the strings stay on the host and become pre-tokenized pieces (pages.py).
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

KINDS = ("color", "flavor", "scent", "size")   # option kind names; "size" is always slot 1
NUM_KINDS = 2                                  # option slots per product

# WebShop's normalize.py COLOR_SET, restricted to the colors used here (same order):
# normalize_color returns the first of these contained in the value.
COLOR_SET = ("beige", "black", "blue", "brown", "gold", "gray", "green", "ivory", "navy",
             "orange", "pink", "purple", "red", "silver", "teal", "white", "yellow")

_COLORS_A = ("black", "white", "navy", "gray", "beige", "brown")
_COLORS_B = ("red", "blue", "green", "pink", "purple", "yellow", "teal", "orange")
_COLORS_C = ("black", "silver", "gold", "white", "blue", "ivory")
_FLAVORS = ("vanilla", "chocolate", "strawberry", "mango", "caramel", "mint", "lemon")
_SCENTS = ("lavender", "citrus", "unscented", "coconut", "eucalyptus", "rosewood")
_CLOTH = ("small", "medium", "large", "x-large", "xx-large")
_SHOE = ("size 7", "size 8", "size 9", "size 10", "size 11")
_PACK = ("pack of 1", "pack of 2", "pack of 4", "pack of 6", "pack of 12")
_OUNCE = ("4 ounce", "8 ounce", "12 ounce", "16 ounce", "32 ounce")
_INCH = ("14 inch", "18 inch", "20 inch", "22 inch", "24 inch")
_DEVICE = ("one size", "standard", "compact", "travel size")

# (top category, subcategory, product type, option kind, kind values, sizes, attribute pool)
TYPES = (
    ("beauty", "hair care", "clip-in hair extension", "color", _COLORS_A, _INCH,
     ("natural looking", "heat resistant", "tangle free", "easy to apply", "long lasting")),
    ("beauty", "hair care", "hair dryer brush", "color", _COLORS_B, _DEVICE,
     ("fast drying", "low noise", "ionic technology", "easy to clean", "lightweight design")),
    ("beauty", "skin care", "face moisturizer", "scent", _SCENTS, _OUNCE,
     ("paraben free", "cruelty free", "for sensitive skin", "oil free", "hyaluronic acid")),
    ("beauty", "skin care", "body wash", "scent", _SCENTS, _OUNCE,
     ("sulfate free", "cruelty free", "for dry skin", "natural ingredients", "long lasting")),
    ("beauty", "makeup", "lipstick", "color", _COLORS_B, _PACK,
     ("long lasting", "cruelty free", "matte finish", "moisturizing formula", "smudge proof")),
    ("beauty", "makeup", "eyeshadow palette", "color", _COLORS_B, _PACK,
     ("highly pigmented", "cruelty free", "easy to blend", "long lasting", "travel friendly")),
    ("fashion", "women clothing", "yoga pants", "color", _COLORS_A, _CLOTH,
     ("high waist", "moisture wicking", "machine washable", "tummy control", "quick drying")),
    ("fashion", "women clothing", "summer dress", "color", _COLORS_B, _CLOTH,
     ("short sleeve", "machine washable", "loose fit", "soft fabric", "pockets included")),
    ("fashion", "men clothing", "dress shirt", "color", _COLORS_A, _CLOTH,
     ("long sleeve", "wrinkle free", "slim fit", "button down", "machine washable")),
    ("fashion", "men clothing", "hiking shorts", "color", _COLORS_A, _CLOTH,
     ("quick drying", "elastic waist", "zipper pockets", "water resistant", "lightweight design")),
    ("fashion", "shoes", "running shoes", "color", _COLORS_A, _SHOE,
     ("non slip", "breathable mesh", "arch support", "lightweight design", "memory foam")),
    ("fashion", "shoes", "rain boots", "color", _COLORS_B, _SHOE,
     ("waterproof", "non slip", "rubber sole", "easy to clean", "ankle height")),
    ("grocery", "snacks", "protein bar", "flavor", _FLAVORS, _PACK,
     ("gluten free", "low sugar", "high protein", "non gmo", "keto friendly")),
    ("grocery", "snacks", "trail mix", "flavor", _FLAVORS, _OUNCE,
     ("gluten free", "non gmo", "resealable bag", "no artificial flavors", "high protein")),
    ("grocery", "beverages", "cold brew coffee", "flavor", _FLAVORS, _OUNCE,
     ("low sugar", "ready to drink", "non gmo", "dairy free", "bold taste")),
    ("grocery", "beverages", "herbal tea", "flavor", _FLAVORS, _PACK,
     ("caffeine free", "organic", "non gmo", "individually wrapped", "no artificial flavors")),
    ("electronics", "audio", "wireless earbuds", "color", _COLORS_C, _DEVICE,
     ("noise cancelling", "long battery life", "water resistant", "fast charging", "touch control")),
    ("electronics", "audio", "bluetooth speaker", "color", _COLORS_C, _DEVICE,
     ("water resistant", "long battery life", "deep bass", "easy to carry", "fast charging")),
    ("electronics", "accessories", "phone case", "color", _COLORS_B, _DEVICE,
     ("shockproof", "slim fit", "wireless charging compatible", "easy to install", "scratch resistant")),
    ("electronics", "accessories", "usb charging cable", "color", _COLORS_C, _PACK,
     ("fast charging", "braided nylon", "tangle free", "long lasting", "easy to carry")),
    ("home", "kitchen", "chef knife", "color", _COLORS_C, _INCH,
     ("stainless steel", "dishwasher safe", "ergonomic handle", "razor sharp", "easy to clean")),
    ("home", "kitchen", "nonstick frying pan", "color", _COLORS_A, _INCH,
     ("dishwasher safe", "oven safe", "induction compatible", "easy to clean", "even heating")),
    ("home", "bedding", "memory foam pillow", "color", _COLORS_A, _DEVICE,
     ("machine washable", "hypoallergenic", "neck support", "cooling gel", "easy to clean")),
    ("home", "bedding", "scented candle", "scent", _SCENTS, _OUNCE,
     ("soy wax", "long lasting", "natural ingredients", "gift ready", "clean burning")),
)
BRANDS = ("lumora", "velora", "kestrel", "brisa", "ondine", "marlo", "tavora", "zenwick",
          "halden", "corvix", "ameli", "sorrel", "pennant", "quillon", "rivoli", "stellan")
MODIFIERS = ("classic", "premium", "essential", "deluxe", "everyday", "signature", "ultra",
             "original")
EXTRAS = ("one year warranty", "satisfaction guaranteed", "ships in a gift box",
          "designed in california", "award winning design")


def words(text: str) -> list[str]:
  """The word tokenization of index and queries: lower-cased `[a-z0-9]+` runs."""
  return re.findall(r"[a-z0-9]+", text.lower())


def nouns(catalogue_nouns: frozenset, title: str) -> list[str]:
  """Nouns of a title: its words in the noun lexicon (brands and type nouns).

  WebShop's get_type_reward keeps spaCy's NOUN/PROPN tokens of the names; the generated
  titles are brand (a proper noun) + modifier (adjective) + product type, so the lexicon of
  brand and type words tags them exactly without a parser.
  """
  return [w for w in words(title) if w in catalogue_nouns]


@dataclasses.dataclass(frozen=True)
class Product:
  """One product in WebShop's fields (price in cents; options {kind: [values]}, 2 kinds)."""
  asin: str
  category: str
  product_category: str
  query: str
  type_id: int
  brand: str
  title: str
  attributes: tuple
  features: tuple
  description: str
  options: tuple          # ((kind, (values...)), (kind, (values...)))
  price: int              # cents

  @property
  def name(self) -> str:
    return self.title

  def as_dict(self) -> dict:
    """WebShop's product dict (goal.py's keys)."""
    return {"asin": self.asin, "category": self.category, "query": self.query,
            "product_category": self.product_category, "name": self.title, "Title": self.title,
            "Attributes": list(self.attributes), "BulletPoints": list(self.features),
            "Description": self.description, "options": {k: list(v) for k, v in self.options},
            "price": self.price / 100}


class Catalogue:
  """`num_products` generated products plus their vocabularies and jit-side arrays.

  attributes: every attribute phrase (ids index it); values: every option value string
  (distinct across kinds; `value_kind[v]` its kind name); arrays (numpy):
    prod_attrs [P, MA] int32 (-1 pad), prod_n_attrs [P], prod_opts [P, 2, MV] int32 value ids
    (-1 pad), prod_n_opts [P, 2], price [P] int32 cents.
  """

  def __init__(self, num_products: int = 300, seed: int = 0, attrs_per_product: int = 3,
               max_option_values: int = 4):
    if num_products < 10:
      raise ValueError(f"MiniShop num_products must be >= 10, got {num_products}")
    if not 1 <= attrs_per_product <= 5:
      raise ValueError(f"MiniShop attrs_per_product must be in [1, 5], got {attrs_per_product}")
    if not 1 <= max_option_values <= 5:
      raise ValueError(f"MiniShop max_option_values must be in [1, 5], got {max_option_values}")
    rng = np.random.default_rng(seed)
    self.attributes = tuple(sorted({a for t in TYPES for a in t[6]}))
    values = []
    for t in TYPES:
      values += [(t[3], v) for v in t[4]] + [("size", s) for s in t[5]]
    self.values = tuple(dict.fromkeys(v for _, v in values))
    kind_of = {}
    for k, v in values:
      if kind_of.setdefault(v, k) != k:
        raise ValueError(f"option value {v!r} is used by two kinds")
    self.value_kind = tuple(kind_of[v] for v in self.values)
    self.noun_lexicon = frozenset(BRANDS) | frozenset(
        w for t in TYPES for w in words(t[2]) if w not in ("in", "usb"))
    a_index = {a: i for i, a in enumerate(self.attributes)}
    v_index = {v: i for i, v in enumerate(self.values)}
    products, asins = [], set()
    alphabet = np.array(list("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"))
    for i in range(num_products):
      ti = i % len(TYPES) if i < len(TYPES) else int(rng.integers(len(TYPES)))
      top, sub, kind_type, kind, kvals, sizes, pool = TYPES[ti]
      while True:
        asin = "B0" + "".join(rng.choice(alphabet, 4))
        if asin not in asins:
          asins.add(asin)
          break
      brand = str(rng.choice(BRANDS))
      modifier = str(rng.choice(MODIFIERS))
      attrs = tuple(str(a) for a in rng.choice(pool, attrs_per_product, replace=False))
      extra = str(rng.choice(EXTRAS))
      n0 = int(rng.integers(1, min(max_option_values, len(kvals)) + 1))
      n1 = int(rng.integers(1, min(max_option_values, len(sizes)) + 1))
      v0 = tuple(str(v) for v in rng.choice(kvals, n0, replace=False))
      v1 = tuple(sorted((str(v) for v in rng.choice(sizes, n1, replace=False)), key=sizes.index))
      title = f"{brand} {modifier} {kind_type}"
      desc = (f"this {kind_type} from {brand} is {', '.join(attrs[:-1])}"
              f"{' and ' if len(attrs) > 1 else ''}{attrs[-1]}. {extra}.")
      products.append(Product(
          asin=asin, category=top, product_category=f"{top} › {sub} › {kind_type}",
          query=kind_type, type_id=ti, brand=brand, title=title, attributes=attrs,
          features=attrs + (extra,), description=desc, options=((kind, v0), ("size", v1)),
          price=int(rng.integers(500, 15000))))
    self.products = tuple(products)
    p, ma, mv = num_products, attrs_per_product, max_option_values
    self.max_attrs, self.max_values = ma, mv
    pa = np.full((p, ma), -1, np.int32)
    po = np.full((p, NUM_KINDS, mv), -1, np.int32)
    pn = np.zeros((p, NUM_KINDS), np.int32)
    for i, prod in enumerate(products):
      pa[i, :len(prod.attributes)] = [a_index[a] for a in prod.attributes]
      for k, (_, vals) in enumerate(prod.options):
        po[i, k, :len(vals)] = [v_index[v] for v in vals]
        pn[i, k] = len(vals)
    self.arrays = dict(prod_attrs=pa, prod_n_attrs=np.full((p,), ma, np.int32), prod_opts=po,
                       prod_n_opts=pn, price=np.array([x.price for x in products], np.int32))
    self.seed = int(seed)

  def __len__(self) -> int:
    return len(self.products)
