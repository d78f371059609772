"""Tool results as observation tokens: per-result token budgets and concatenation, in the graph.

Search-R1 feeds each retrieved passage back as "Doc i(Title: ...) text" inside
`<information>`; long results are cut to a token budget so the context stays bounded
(`max_obs_length` in its generation config). Here results are pre-tokenized rows (a passage
table `[P, M]`), so truncation is a length clip and rendering is one gather-compaction
(`render.compact`). One example per call; vmap for batches.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from agent_rl.envs.base import Text
from agent_rl.envs.render import compact


def truncate(text: Text, budget: int | jax.Array, pad_id: int) -> Text:
  """`text` cut to its first `budget` tokens (positions past the new length hold pad_id)."""
  n = jnp.minimum(text.length, budget).astype(jnp.int32)
  keep = jnp.arange(text.tokens.shape[-1]) < n
  return Text(tokens=jnp.where(keep, text.tokens, pad_id).astype(jnp.int32), length=n)


def concat(texts: Sequence[Text], out_len: int, pad_id: int) -> Text:
  """Texts joined in order into `[out_len]` tokens (cut at out_len)."""
  width = max(t.tokens.shape[-1] for t in texts)
  rows = [jnp.pad(jnp.asarray(t.tokens, jnp.int32), (0, width - t.tokens.shape[-1]),
                  constant_values=pad_id) for t in texts]
  out, n = compact(jnp.stack(rows), jnp.stack([jnp.asarray(t.length, jnp.int32) for t in texts]),
                   out_len, pad_id)
  return Text(tokens=out, length=n)


def render_results(tokens: jax.Array, lengths: jax.Array, rows: jax.Array, budget: int,
                   out_len: int, pad_id: int, sep: Text | None = None) -> Text:
  """Results `rows [k] int32` (-1 = none) of a pre-tokenized table `tokens [P, M]`,
  `lengths [P]`, each cut to `budget` tokens, joined (with `sep` after each) into `[out_len]`."""
  toks = jnp.asarray(tokens)[jnp.maximum(rows, 0)]                        # [k, M]
  lens = jnp.where(rows >= 0, jnp.minimum(jnp.asarray(lengths)[jnp.maximum(rows, 0)], budget), 0)
  if sep is not None:
    m = max(toks.shape[1], sep.tokens.shape[-1])
    toks = jnp.pad(toks, ((0, 0), (0, m - toks.shape[1])), constant_values=pad_id)
    s = jnp.pad(jnp.asarray(sep.tokens, jnp.int32), (0, m - sep.tokens.shape[-1]),
                constant_values=pad_id)
    toks = jnp.stack([toks, jnp.broadcast_to(s, toks.shape)], axis=1).reshape(-1, m)
    lens = jnp.stack([lens, jnp.where(rows >= 0, sep.length, 0)], axis=1).reshape(-1)
  out, n = compact(toks, lens, out_len, pad_id)
  return Text(tokens=out, length=n)
