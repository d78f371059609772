"""Lexical search over the catalogue: BM25 (Lucene's variant, as WebShop's pyserini index).

WebShop (Yao et al. 2022) retrieves with Pyserini's Lucene BM25 (k1 = 0.9, b = 0.4) over
each product's text; here the documents are the title, description, bullet points and option
values, tokenized by `catalogue.words`. The BM25 weights, the fixed-point ranking and the
bisection top-k are the shared ones (`agent_rl/envs/bm25.py`); a catalogue is small, so its
per-(term, product) weights are one dense `[T, P]` matrix and a query's scores an exact
integer sum of gathered rows (`SCALE` units per point).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.bm25 import SCALE, check_range, key_bits, quantize, rank, top_keys  # noqa: F401
from agent_rl.envs.bm25 import dense_weights
from agent_rl.envs.minishop.catalogue import Catalogue, words


def document(product) -> str:
  """The indexed text of a product (WebShop indexes title, description, bullets, options)."""
  opts = " ".join(v for _, vals in product.options for v in vals)
  return " ".join([product.title, product.description, " ".join(product.features), opts])


@struct.dataclass
class BM25Index:
  """weights: [T, P] int32 fixed-point BM25 weight of term t in product p (terms sorted)."""
  weights: jax.Array


def build_index(cat: Catalogue, k1: float = 0.9, b: float = 0.4) -> tuple[tuple[str, ...], np.ndarray]:
  """(terms, weights [T, P] float64) of the catalogue's documents."""
  return dense_weights([words(document(p)) for p in cat.products], k1, b)


def scores(index: BM25Index, term_ids: jax.Array) -> jax.Array:
  """`[P] int32` fixed-point BM25 scores of a query `term_ids [Q]` (-1 = no term)."""
  rows = index.weights[jnp.maximum(term_ids, 0)]                        # [Q, P]
  return jnp.sum(jnp.where(term_ids[:, None] >= 0, rows, 0), axis=0, dtype=jnp.int32)


def search(index: BM25Index, term_ids: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """Top-k products of a query: `(results [k] int32 (-1 past n), n int32)`."""
  return rank(scores(index, term_ids), k)
