"""The policy decoder: pre-norm transformer faithful to Qwen2/Qwen2.5, Llama-3, Qwen3, Gemma 3.

Architecture of Touvron et al., 2023 (Llama) as used by Qwen2 (Yang et al., 2024,
arXiv:2407.10671): embedding -> N x [x + attn(rms(x)); x + swiglu(rms(x))] -> rms -> lm_head.
Qwen3 adds q/k norms; Gemma 3 (arXiv:2503.19786) also scales the embedding by sqrt(E), norms
each sublayer's output before its residual add, uses GeGLU and interleaves sliding-window
layers (their own RoPE base) with global ones. Each block knows its layer type; the masks
and RoPE tables are built once per call and per type, and shared by the blocks of that type.
Positions are explicit (left/right padding and multi-turn appends keep correct RoPE phases).
`apply` runs one of three paths (full / cached block / decode); the functional API in
`agent_rl.models.inference` wraps them over `(graphdef, state)`.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models import lora
from agent_rl.models.attention import Attention, BlockMask
from agent_rl.models.cache import KVCache
from agent_rl.models.config import ModelConfig, rope_inv_freq
from agent_rl.models.dense import dense
from agent_rl.models.layers import MLP, Embed, RMSNorm, dense_init, make_param, rope_cos_sin
from agent_rl.parallel.rules import constrain


class Block(nnx.Module):
  """x + attn(attn_norm(x)), then x + mlp(mlp_norm(x)); with `cfg.post_norms` each sublayer
  output goes through its own norm (post_attn_norm, post_mlp_norm) before the add.

  layer_type: 'full' or 'sliding' (selects the mask and RoPE table the caller passes).
  """

  def __init__(self, cfg: ModelConfig, layer_type: str = "full", *, rngs: nnx.Rngs):
    kw = dict(dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype, rngs=rngs)
    norm = lambda: RMSNorm(cfg.hidden, eps=cfg.rms_eps, plus_one=cfg.norm_plus_one, **kw)
    self.layer_type = layer_type
    self.post_norms = cfg.post_norms
    self.attn_norm = norm()
    self.attn = Attention(cfg, rngs=rngs)
    self.mlp_norm = norm()
    self.mlp = MLP(cfg.hidden, cfg.intermediate, activation=cfg.mlp_activation,
                   lora_cfg=cfg.lora, **kw)
    if cfg.post_norms:
      self.post_attn_norm = norm()
      self.post_mlp_norm = norm()

  def add_attn(self, x: jax.Array, y: jax.Array) -> jax.Array:
    """x + y for the attention output y ([..., E]), y normed first with post_norms."""
    return x + (self.post_attn_norm(y) if self.post_norms else y)

  def add_mlp(self, x: jax.Array, key=None) -> jax.Array:
    """x + mlp(mlp_norm(x)) ([..., E]), the MLP output normed first with post_norms.
    key: the layer's LoRA dropout key (training forward only) or None."""
    y = self.mlp(self.mlp_norm(x), key)
    return x + (self.post_mlp_norm(y) if self.post_norms else y)


class Transformer(nnx.Module):
  """Decoder LM. Params: embed.embedding [V,E], layers[i].*, final_norm.scale, lm_head [E,V]
  (absent when `cfg.tie_embeddings`)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    if not isinstance(cfg, ModelConfig):
      raise ValueError(f"Transformer needs a ModelConfig, got {type(cfg).__name__}")
    self.cfg = cfg
    kw = dict(dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype, rngs=rngs)
    self.embed = Embed(cfg.vocab_size, cfg.hidden, scale=cfg.embed_scale, **kw)
    self.layers = nnx.List([Block(cfg, cfg.layer_type(i), rngs=rngs)
                            for i in range(cfg.num_layers)])
    self.final_norm = RMSNorm(cfg.hidden, eps=cfg.rms_eps, plus_one=cfg.norm_plus_one, **kw)
    if not cfg.tie_embeddings:
      self.lm_head = make_param(rngs, dense_init(cfg.hidden), (cfg.hidden, cfg.vocab_size),
                                ("embed", "vocab"), cfg.params_dtype)

  def head_weight(self) -> jax.Array:
    """Output projection [E, V] (the transposed embedding when tied)."""
    if self.cfg.tie_embeddings:
      return self.embed.embedding[...].T
    return self.lm_head[...]

  def logits(self, hidden: jax.Array) -> jax.Array:
    """hidden: [..., E] -> float32 logits [..., V] (one 2-D GEMM over the flattened rows)."""
    return dense(hidden, self.head_weight(), out_dtype=jnp.float32)

  def _rope(self, positions) -> Dict[str, Tuple[jax.Array, jax.Array]]:
    """positions [...] -> {layer type: (cos, sin) [..., D/2]} for the types in use."""
    types = {blk.layer_type for blk in self.layers}
    tables = {t: rope_cos_sin(positions, rope_inv_freq(self.cfg, t)) for t in sorted(types)}
    if len(tables) == 2 and self.cfg.rope_local_theta is None:
      tables["sliding"] = tables["full"]  # same frequencies: computed once
    return tables

  def _masks(self, q_slot: Optional[jax.Array], valid: jax.Array, q_pos: jax.Array,
             k_pos: Optional[jax.Array]) -> Dict[str, BlockMask]:
    """{layer type: BlockMask} of queries at q_slot [B, Q] (None: no causal term) and
    positions q_pos [B, Q] over key slots valid [B, S] at positions k_pos [B, S]; sliding
    layers add q_pos - k_pos < W."""
    out = {"full": BlockMask(q_slot, valid)}
    if self.cfg.has_sliding:
      out["sliding"] = BlockMask(q_slot, valid, q_pos, k_pos, self.cfg.sliding_window)
    return out

  def __call__(self, tokens: jax.Array, positions: Optional[jax.Array] = None,
               valid: Optional[jax.Array] = None, dropout_key: Optional[jax.Array] = None
               ) -> jax.Array:
    """tokens: [B,L] int32 -> logits [B,L,V] f32 (positions default arange, valid all-True;
    dropout_key as `apply`'s)."""
    b, l = tokens.shape
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
    if valid is None:
      valid = jnp.ones((b, l), jnp.bool_)
    return self.apply(tokens, positions, valid, dropout_key=dropout_key)[0]

  def apply(self, tokens, positions, valid, cache: Optional[KVCache] = None,
            rows: Optional[jax.Array] = None, dropout_key: Optional[jax.Array] = None,
            read: Optional[jax.Array] = None
            ) -> Tuple[jax.Array, jax.Array, Optional[KVCache]]:
    """Full forward (cache None) or a block written into `cache` at `cache.index`.

    tokens, positions: [B,L] int32; valid: [B,L] bool.
    Returns logits [B,L,V] f32, hidden [B,L,E] (after the final norm), cache (or None).
    rows: optional [B] int32, cache path only: return just block row `rows[b]` of each row b
      (logits [B,V], hidden [B,E]); the last layer then runs its attention output, MLP and
      the final norm on those rows alone (every row's K/V is still written), as
      `transformers` does with `logits_to_keep=1`.
    dropout_key: full path only, the train step's key for LoRA dropout (`models.lora`: layer
      i, target t draws its mask from `lora.branch_key(dropout_key, i, t)`); None (evaluation,
      scoring) drops nothing. Ignored without `cfg.lora.dropout > 0`: no RNG op is traced.
    read: optional [B,K] int32 positions in [0, L), full path only (scoring): return logits
      [B,K,V] and hidden [B,K,E] at those positions alone; the last layer then runs its
      queries, MLP and final norm on the B*K read rows only (keys and values from all rows),
      the `rows` trick of the cached path for a reward model reading a few tokens per row.
    """
    if read is not None and (cache is not None or dropout_key is not None
                             or read.ndim != 2 or read.shape[0] != tokens.shape[0]):
      raise ValueError(f"apply(read=...) is for the full scoring path with read [B, K], B="
                       f"{tokens.shape[0]}; got read {read.shape}, cache "
                       f"{'given' if cache is not None else 'None'}, dropout_key "
                       f"{'given' if dropout_key is not None else 'None'}")
    if dropout_key is not None and cache is not None:
      raise ValueError("apply(dropout_key=...) is for the full (training) path; the cached "
                       "and decode paths (rollouts) never drop")
    if not lora.uses_dropout(self.cfg):
      dropout_key = None
    if rows is not None and (cache is None or rows.shape != tokens.shape[:1]):
      raise ValueError(f"apply(rows=...) needs a cache and rows [B]={tokens.shape[:1]}, got "
                       f"cache {'None' if cache is None else 'given'}, rows {rows.shape}")
    _check_block(tokens, positions, valid)
    valid = valid.astype(jnp.bool_)
    positions = positions.astype(jnp.int32)
    if cache is not None:
      _check_cache(self.cfg, cache, tokens.shape[0])
      x, new_cache = self._in_chunks(tokens, positions, valid, cache, rows)
    else:
      x, new_cache = self._full(tokens, positions, valid, read, dropout_key), None
    hidden = self.final_norm(x)
    return self.logits(hidden), hidden, new_cache

  def _full(self, tokens, positions, valid, read, dropout_key) -> jax.Array:
    """The full path: [B,L] -> x [B,L,E] ([B,K,E] at the `read` rows)."""
    b, l = tokens.shape
    x = self.embed(tokens)
    ropes = self._rope(positions)
    # Query l sees valid keys 0..l (slot = sequence index).
    q_slot = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), positions.shape)
    masks = self._masks(q_slot, valid, positions, positions)
    # The dense core reads one [B, L, L] bias a type, built once and shared by the layers;
    # the blocked core (model.attention_block) builds each key block's from the factors.
    biases = masks if self.cfg.attention_block else {t: m.bias() for t, m in masks.items()}
    # Rows flattened to [B*L, E] through the blocks: 2-D GEMMs in forward and backward.
    x = x.reshape(b * l, -1)
    ropes = {t: tuple(a.reshape(b * l, -1) for a in cs) for t, cs in ropes.items()}
    if read is None:
      return _REMAT[self.cfg.remat](self.layers, x, ropes, biases, b, dropout_key).reshape(b, l, -1)
    x = _REMAT[self.cfg.remat](list(self.layers)[:-1], x, ropes, biases, b, None)
    return _read_block(self.layers[-1], constrain(x, ("batch", "embed")), ropes, biases, b,
                       read.astype(jnp.int32))

  def _in_chunks(self, tokens, positions, valid, cache: KVCache, rows=None):
    """A cached block written `cfg.prefill_chunk` tokens a row at a time, each chunk through
    every layer before the next (a `lax.scan`): the block's activations, attention scores
    [B, heads, c, S] and MLP [B, c, F] included, are one chunk's, whatever its length. A
    rollout prefills its whole window every turn; whole, Qwen2.5-1.5B's 128 x 4,096-token
    window takes 392 GiB of XLA temporaries (benchmarks/prefill_chunks.py).

    The n chunks have equal size c <= chunk (`ModelConfig.prefill_chunks`: 1,093 tokens at
    256 are 5 x 219), the last one starting at L - c: the n * c - L tokens it shares with the
    one before are computed again from the same cache and rewrite the same slots. A query sees
    the slots before its chunk (written) and its chunk causally, as in the whole block, so
    chunking changes no value beyond rounding (tested). L <= chunk (or chunk 0): one call.
    Returns x [B,L,E] ([B,E] with rows) and the cache advanced by L.
    """
    b, l = tokens.shape
    n, c = self.cfg.prefill_chunks(l)
    if n == 1:
      return self._write(tokens, positions, valid, cache, rows)
    index = cache.index.astype(jnp.int32)
    starts = jnp.minimum(jnp.arange(n, dtype=jnp.int32) * c, l - c)

    def body(carry, start):
      cache, got = carry
      cut = lambda a: jax.lax.dynamic_slice_in_dim(a, start, c, axis=1)
      here = None if rows is None else jnp.clip(rows - start, 0, c - 1)
      x, cache = self._write(cut(tokens), cut(positions), cut(valid),
                             cache.replace(index=index + start), here)
      if rows is None:
        return (cache, got), x
      hit = (rows >= start) & (rows < start + c)
      return (cache, jnp.where(hit[:, None], x, got)), None

    got = None if rows is None else jnp.zeros((b, self.cfg.hidden), self.cfg.compute_dtype)
    (cache, got), xs = jax.lax.scan(body, (cache.replace(index=index), got), starts)
    cache = cache.replace(index=index + l)
    if rows is not None:
      return got, cache
    # Chunks 0..n-2 tile [0, (n-1) c); the last one covers [L - c, L).
    head = jnp.moveaxis(xs[:-1], 0, 1).reshape(b, (n - 1) * c, -1)
    return jnp.concatenate([head, xs[-1][:, n * c - l:]], axis=1), cache

  def _write(self, tokens, positions, valid, cache: KVCache, rows=None):
    """One block written at `cache.index`: [B,L] -> x [B,L,E] ([B,E] with rows), cache."""
    l = tokens.shape[1]
    x = self.embed(tokens)
    ropes = self._rope(positions)
    index = cache.index.astype(jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    cvalid = jax.lax.dynamic_update_slice(cache.valid, valid, (zero, index))
    cpos = (None if cache.pos is None else
            jax.lax.dynamic_update_slice(cache.pos, positions, (zero, index)))
    # Query l of the block sits at slot index + l: it sees valid slots up to its own.
    q_slot = jnp.broadcast_to(index + jnp.arange(l, dtype=jnp.int32), positions.shape)
    biases = {t: m.bias() for t, m in self._masks(q_slot, cvalid, positions, cpos).items()}
    x, ks, vs = self._cached_layers(
        x, lambda blk, h, k, v, q_rows: blk.attn.cached(
            h, *ropes[blk.layer_type], k, v, index, biases[blk.layer_type], q_rows),
        cache, rows)
    new_cache = KVCache(k=ks, v=vs, valid=cvalid, index=index + l, pos=cpos)
    return (x if rows is None else x[:, 0]), new_cache

  def _cached_layers(self, x, attend, cache: KVCache, rows=None):
    """Runs the blocks with `attend(block, normed_x, k_cache, v_cache, q_rows) -> (y, k, v)`
    (the cached-block or the decode attention); returns x and the updated per-layer caches.

    rows [B] int32 (block path only): the last block keeps only x[b, rows[b]] (x -> [B,1,E]).
    """
    ks, vs = [], []
    last = len(self.layers) - 1
    for i, blk in enumerate(self.layers):
      q_rows = rows if i == last else None
      y, kc, vc = attend(blk, blk.attn_norm(x), cache.k[i], cache.v[i], q_rows)
      if q_rows is not None:
        x = jnp.take_along_axis(x, q_rows[:, None, None], axis=1)
      x = blk.add_mlp(blk.add_attn(x, y))
      ks.append(kc)
      vs.append(vc)
    return x, tuple(ks), tuple(vs)

  def decode(self, tokens, positions, cache: KVCache, valid=None
             ) -> Tuple[jax.Array, jax.Array, KVCache]:
    """One token per row. tokens, positions: [B] int32; valid [B] bool or None (all True).

    Returns logits [B,V] f32, hidden [B,E], cache advanced by one slot.
    """
    if tokens.ndim != 1 or positions.shape != tokens.shape:
      raise ValueError(f"decode needs tokens [B] and positions [B], got {tokens.shape}, "
                       f"{positions.shape}")
    b = tokens.shape[0]
    _check_cache(self.cfg, cache, b)
    if valid is None:
      valid = jnp.ones((b,), jnp.bool_)
    valid = valid.astype(jnp.bool_)
    index = cache.index.astype(jnp.int32)
    positions = positions.astype(jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    cvalid = jax.lax.dynamic_update_slice(cache.valid, valid[:, None], (zero, index))
    cpos = (None if cache.pos is None else
            jax.lax.dynamic_update_slice(cache.pos, positions[:, None], (zero, index)))
    # Slots past `index` were never written, hence invalid: no causal term needed.
    biases = {t: m.bias()[:, :, :, 0] for t, m in
              self._masks(None, cvalid, positions[:, None], cpos).items()}
    x = self.embed(tokens)
    ropes = self._rope(positions)
    x, ks, vs = self._cached_layers(
        x, lambda blk, h, k, v, _: blk.attn.decode(h, *ropes[blk.layer_type], k, v, index,
                                                    biases[blk.layer_type]), cache)
    hidden = self.final_norm(x)
    new_cache = KVCache(k=ks, v=vs, valid=cvalid, index=index + 1, pos=cpos)
    return self.logits(hidden), hidden, new_cache


def _full_block(blk: Block, x, cos, sin, bias, b: int, key=None):
  """One block of the full (no-cache) path on the flattened rows x [B*L, E]; key: this
  layer's LoRA dropout key (fold_in(dropout_key, layer index)) or None."""
  x = blk.add_attn(x, blk.attn.full(blk.attn_norm(x), cos, sin, bias, b, key))
  return blk.add_mlp(x, key)


def _read_block(blk: Block, x, ropes, biases, b: int, read):
  """The last block at the read rows only. x: [B*L,E] flat rows; read [B,K] -> [B,K,E]."""
  t = blk.layer_type
  y = blk.attn.full_rows(blk.attn_norm(x), *ropes[t], biases[t], b, read)
  xr = jnp.take_along_axis(x.reshape(b, -1, x.shape[-1]), read[..., None], axis=1)
  return blk.add_mlp(blk.add_attn(xr.reshape(y.shape), y)).reshape(*read.shape, -1)


def _layer_key(key, i):
  return None if key is None else jax.random.fold_in(key, i)


def _unrolled(layers, x, ropes, biases, b: int, key=None, block=_full_block):
  for i, blk in enumerate(layers):
    # The residual stream is laid out by the rules: rows over data x fsdp.
    x = constrain(x, ("batch", "embed"))
    t = blk.layer_type
    x = block(blk, x, *ropes[t], biases[t], b, _layer_key(key, i))
  return x


def _remat_blocks(layers, x, ropes, biases, b: int, key=None):
  """Each block recomputed in the backward; only block inputs are kept.

  Blocks of one structure run as a `lax.scan` over their states stacked at trace time (a
  [num_layers, ...] copy of the block weights per step): in an unrolled loop XLA:CPU
  schedules the recomputations early and keeps most activations alive (4 x 512 tokens,
  8 layers: 1.14 -> 1.01 GB of temporaries unrolled, 0.37 GB scanned;
  benchmarks/scan_layers.py). Mixed layer types (Gemma 3) fall back to the unrolled loop.
  """
  graphdefs = {nnx.graphdef(blk) for blk in layers}
  if len(graphdefs) != 1:
    return _unrolled(layers, x, ropes, biases, b, key,
                     block=nnx.remat(_full_block, static_argnums=(5,)))
  graphdef, t = graphdefs.pop(), layers[0].layer_type
  stacked = jax.tree.map(lambda *a: jnp.stack(a), *[nnx.state(blk) for blk in layers])
  # The layer index rides along the scan only when there is a key to fold it into.
  xs = (stacked, None if key is None else jnp.arange(len(layers), dtype=jnp.int32))

  @jax.checkpoint
  def body(x, state_i):
    state, i = state_i
    x = constrain(x, ("batch", "embed"))
    return _full_block(nnx.merge(graphdef, state), x, *ropes[t], biases[t], b,
                       _layer_key(key, i)), None

  return jax.lax.scan(body, x, xs)[0]


# `config.model.remat` -> how the full path runs its blocks.
_REMAT = {"none": _unrolled, "block": _remat_blocks}


def _check_block(tokens, positions, valid):
  if tokens.ndim != 2:
    raise ValueError(f"tokens must be [B, L], got shape {tokens.shape}")
  if positions.shape != tokens.shape:
    raise ValueError(f"positions shape {positions.shape} != tokens shape {tokens.shape}")
  if valid.shape != tokens.shape:
    raise ValueError(f"valid shape {valid.shape} != tokens shape {tokens.shape}")


def _check_cache(cfg: ModelConfig, cache: KVCache, batch: int):
  if len(cache.k) != cfg.num_layers:
    raise ValueError(f"cache has {len(cache.k)} layers, model has {cfg.num_layers}")
  if cache.batch != batch:
    raise ValueError(f"cache batch {cache.batch} != tokens batch {batch}")
  if cfg.has_sliding and (cache.pos is None or cache.pos.shape != cache.valid.shape):
    raise ValueError("a model with sliding-window layers needs a cache with slot positions "
                     f"pos {cache.valid.shape} (use init_cache), got "
                     f"{None if cache.pos is None else cache.pos.shape}")
