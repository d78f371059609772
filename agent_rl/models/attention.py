"""Grouped-query self-attention (Ainslie et al., 2023) with RoPE and an explicit KV cache.

Three paths share the projections: `full` (no cache, causal by sequence order), `cached`
(a block of L tokens written at `cache.index`, attending to the whole cache) and `decode`
(one token, 4-D einsums, which XLA:CPU runs faster than the L=1 case of `cached`). Masks are
additive biases (`MASK_BIAS`), cheaper than `jnp.where` inside every softmax: computed once
per call and shared across layers on the full and decode paths; on the cached path each
layer builds its block's from the `BlockMask` (its last layer may read one row alone). Query
heads h = k * G + g use KV head k, as HF `repeat_kv`.

The training path's core, softmax(q k^T + bias) v, has a hand-written backward
(`attention_core`): the FlashAttention gradient (Dao et al., 2022, arXiv:2205.14135, alg. 2)
dS = P * (dP - rowsum(dY * Y)), whose row sum runs over D rather than over the keys, and no
gradient flows through the max shift (autodiff routed one through an argmax mask). On the
2-core CPU this cut the attention core's forward + backward per layer from 136 ms to 81 ms.
The core merges each KV head's query rows (r, g) into one axis, so that every product is a
plain batched GEMM with one contracting dim (see `_contract_rows` for the two that contract
the rows): 89 -> 70 ms per layer of the benchmark model, and 3-6% off the whole train step
(paired in one process).
"""
from __future__ import annotations

from typing import Optional

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from agent_rl.models import lora
from agent_rl.models.config import ModelConfig
from agent_rl.models.dense import dense
from agent_rl.models.layers import RMSNorm, apply_rope, dense_init, make_param

# Large but finite: fully masked rows (padding queries) stay NaN-free.
MASK_BIAS = -1e30
# Causal query chunks of the full path: 4 computes 5/8 of the L x L scores (vs 1/2 ideal).
QUERY_CHUNKS = 4


def _chunk_bounds(length: int, chunks: int) -> list[tuple[int, int]]:
  """Static (lo, hi) query ranges covering [0, length) in up to `chunks` near-equal pieces."""
  cuts = sorted({round(i * length / chunks) for i in range(chunks + 1)})
  return list(zip(cuts[:-1], cuts[1:]))


def mask_to_bias(mask: jax.Array) -> jax.Array:
  """bool mask (True = attend) -> float32 additive bias (0 or MASK_BIAS)."""
  return jnp.where(mask, 0.0, MASK_BIAS).astype(jnp.float32)


@flax.struct.dataclass
class BlockMask:
  """Who sees what, kept in its factors (the one mask rule of the three paths): query i of
  row b sees key slot s iff s is valid, s <= q_slot[b, i] (causal; no term when q_slot is
  None: a decode step, whose later slots are unwritten) and, on a sliding layer,
  q_pos[b, i] - k_pos[b, s] < window. Each path builds its additive bias with `bias`, once a
  call and shared by the layers; the cached path's blocks are at most `prefill_chunk` queries
  (`Transformer._in_chunks`), and the training path's blocked core (`model.attention_block`)
  builds one key block's at a time.

  q_slot: [B, Q] int32 or None; valid: [B, S] bool; q_pos: [B, Q] int32 and k_pos: [B, S]
  int32 (sliding layers only, else None); window: W of a sliding layer, else None (static).
  """
  q_slot: Optional[jax.Array]
  valid: jax.Array
  q_pos: Optional[jax.Array] = None
  k_pos: Optional[jax.Array] = None
  window: Optional[int] = flax.struct.field(pytree_node=False, default=None)

  def rows(self, rows: jax.Array) -> "BlockMask":
    """The mask of the query rows rows [B, K] (the scoring path's read rows)."""
    take = lambda a: None if a is None else jnp.take_along_axis(a, rows, axis=1)
    return self.replace(q_slot=take(self.q_slot), q_pos=take(self.q_pos))

  def cut(self, lo: int, hi: int) -> "BlockMask":
    """Queries lo:hi against keys :hi (a causal query chunk of the full path; static)."""
    part = lambda a, n: None if a is None else a[:, :n]
    q = lambda a: None if a is None else a[:, lo:hi]
    return self.replace(q_slot=q(self.q_slot), q_pos=q(self.q_pos), valid=part(self.valid, hi),
                        k_pos=part(self.k_pos, hi))

  def padded(self, keys: int) -> "BlockMask":
    """Keys padded to `keys` slots, the new ones invalid (a blocked core's last block)."""
    pad = keys - self.valid.shape[1]
    grow = lambda a: None if a is None else jnp.pad(a, ((0, 0), (0, pad)))
    return self.replace(valid=grow(self.valid), k_pos=grow(self.k_pos))

  def bias(self, start=0, size: Optional[int] = None) -> jax.Array:
    """The additive bias [B, 1, 1, Q, c] of every query over keys [start, start + c) (c =
    size, default all; start may be traced: the slots' causal term counts from it)."""
    valid, k_pos = self.valid, self.k_pos
    if size is not None:
      cut = lambda a: None if a is None else jax.lax.dynamic_slice_in_dim(a, start, size, 1)
      valid, k_pos = cut(valid), cut(k_pos)
    m = valid[:, None, :]
    if self.q_slot is not None:
      slots = start + jnp.arange(valid.shape[1], dtype=jnp.int32)
      m = m & (slots[None, None, :] <= self.q_slot[:, :, None])
    if self.window is not None:
      m = m & (self.q_pos[:, :, None] - k_pos[:, None, :] < self.window)
    return mask_to_bias(m)[:, None, None]


def _softmax(scores: jax.Array, bias: jax.Array) -> jax.Array:
  s = scores + bias
  s = s - jnp.max(s, axis=-1, keepdims=True)
  e = jnp.exp(s)
  return e / jnp.sum(e, axis=-1, keepdims=True)


def _scores(q: jax.Array, k_cache: jax.Array, spec: str) -> jax.Array:
  """float32 scores q . k against the cache's [B,K,D,S] keys.

  XLA:CPU (jax 0.10) cannot run a bf16 x bf16 -> f32 dot that YNNPACK does not take, and the
  cache layout is one ("Unsupported element type for DotThunk::Execute: BF16 x BF16 = F32",
  seen in a bf16 rollout); there the operands go to float32 first, as XLA's own upcaster does
  for the dots it recognizes. Elsewhere bf16 operands accumulate in float32 as they are.
  """
  if q.dtype != jnp.float32 and jax.default_backend() == "cpu":
    q, k_cache = q.astype(jnp.float32), k_cache.astype(jnp.float32)
  return jnp.einsum(spec, q, k_cache, preferred_element_type=jnp.float32)


@jax.custom_vjp
def attention_core(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array) -> jax.Array:
  """softmax(q k^T + bias) v per KV head and query group.

  q: [B,K,R,G,D] (R query rows, G query heads per KV head), k, v: [B,K,S,D], bias
  [B,1,R,1,S] float32 additive (no gradient) -> y [B,K,R,G,D] in q's dtype. Scores and the
  softmax are float32. Saves P [B,K,R*G,S] for the backward (speed over memory: the
  accelerator path for long contexts is a fused kernel, not this).
  """
  return _core_fwd(q, k, v, bias)[0]


def _contract_rows(a: jax.Array, b: jax.Array) -> jax.Array:
  """a: [B,K,Q,S], b: [B,K,Q,D] -> a^T b: [B,K,S,D], summed over the Q query rows (dV, dK).

  Both operands are row-major in Q, so this dot contracts their major dim. XLA:CPU (jax 0.10)
  runs that form as an Eigen batched dot, not YNNPACK, and the attention core's backward
  spent most of its time there. On CPU it is computed as (b^T a)^T, a plain GEMM, with b^T
  (the small [D,Q] operand, not the [Q,S] one) written out. The optimization barriers keep
  XLA from folding either transpose back into the dot (it does, otherwise); the result is
  bit-identical. Other backends take the dot as it is.
  """
  if jax.default_backend() != "cpu":
    return jnp.einsum("bkqs,bkqd->bksd", a, b)
  barrier = jax.lax.optimization_barrier
  bt = barrier(jnp.swapaxes(b, -1, -2))
  return jnp.swapaxes(barrier(jnp.einsum("bkdq,bkqs->bkds", bt, a)), -1, -2)


def _core_fwd(q, k, v, bias):
  # Rows (r, g) merged into one axis (a free reshape): with two contracting dims XLA:CPU
  # transposed P [R,G,S] -> [S,G,R] for the backward's dV, a 40 MB copy per layer.
  b, kv, r, g, d = q.shape
  qm = q.reshape(b, kv, r * g, d)
  bias = jnp.broadcast_to(bias, (bias.shape[0], 1, r, g, bias.shape[-1]))
  s = jnp.einsum("bkqd,bksd->bkqs", qm, k, preferred_element_type=jnp.float32)
  s = s + bias.reshape(bias.shape[0], 1, r * g, -1)
  e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
  p = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(q.dtype)
  y = jnp.einsum("bkqs,bksd->bkqd", p, v)
  return y.reshape(q.shape), (qm, k, v, p, y)


def _core_bwd(res, dy):
  q, k, v, p, y = res  # q, y: [B,K,Q,D]; p: [B,K,Q,S]
  shape = dy.shape
  dy = dy.reshape(y.shape)
  dv = _contract_rows(p, dy)
  dp = jnp.einsum("bkqd,bksd->bkqs", dy, v, preferred_element_type=jnp.float32)
  # rowsum(dP * P) = rowsum(dY * Y): D terms per row instead of S.
  delta = jnp.sum(dy.astype(jnp.float32) * y.astype(jnp.float32), axis=-1, keepdims=True)
  ds = (p.astype(jnp.float32) * (dp - delta)).astype(q.dtype)
  dq = jnp.einsum("bkqs,bksd->bkqd", ds, k)
  dk = _contract_rows(ds, q)
  return dq.reshape(shape), dk, dv, None


attention_core.defvjp(_core_fwd, _core_bwd)


def _rows_of(mask, lo: int, hi: int):
  """The mask of the causal query chunk lo:hi over keys :hi (a bias: [B,1,R,1,hi])."""
  return mask.cut(lo, hi) if isinstance(mask, BlockMask) else mask[:, :, 0, lo:hi, None, :hi]


def _attend(q, k, v, mask, block: int) -> jax.Array:
  """The training path's core over q [B,K,R,G,D], k, v [B,K,S,D]: `mask` is the R rows' bias
  [B,1,R,1,S] (the dense `attention_core`, which saves the [R, S] probabilities), or their
  BlockMask (`model.attention_block` > 0): keys `block` at a time
  (`blocked_attention.blocked_core`, memory linear in S), dense when S fits one block."""
  if not isinstance(mask, BlockMask):
    return attention_core(q, k, v, mask)
  if k.shape[2] <= block:
    return attention_core(q, k, v, mask.bias()[:, :, 0, :, None, :])
  from agent_rl.models.blocked_attention import blocked_core  # it builds on this module
  return blocked_core(q, k, v, mask, block)


class Attention(nnx.Module):
  """Weights: q [E,H,D], k/v [E,KVH,D], o [H,D,E]; optional q/k/v biases (Qwen2), optional
  q_norm/k_norm scales [D] (Qwen3, Gemma 3: RMSNorm per head, before RoPE).

  Sliding-window layers differ only in their mask (the bias, or the BlockMask's window, that
  their caller passes) and their RoPE tables, so all three paths serve both layer types.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    e, h, kvh, d = cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    pd = cfg.params_dtype
    self.num_heads, self.num_kv_heads, self.head_dim = h, kvh, d
    self.dtype = cfg.compute_dtype
    self.attention_block = cfg.attention_block
    self.q = make_param(rngs, dense_init(e), (e, h, d), ("embed", "heads", "head_dim"), pd)
    self.k = make_param(rngs, dense_init(e), (e, kvh, d), ("embed", "kv_heads", "head_dim"), pd)
    self.v = make_param(rngs, dense_init(e), (e, kvh, d), ("embed", "kv_heads", "head_dim"), pd)
    self.o = make_param(rngs, dense_init(h * d), (h, d, e), ("heads", "head_dim", "embed"), pd)
    self.query_scale = cfg.query_scale
    self.qk_norm = cfg.qk_norm
    if cfg.qk_norm:
      # float32 outputs: the norm runs on the float32 projection and rounds once with RoPE.
      kw = dict(eps=cfg.rms_eps, dtype=jnp.float32, param_dtype=pd, rngs=rngs,
                plus_one=cfg.norm_plus_one, axis_name="head_dim")
      self.q_norm = RMSNorm(d, **kw)
      self.k_norm = RMSNorm(d, **kw)
    self.lora_targets = ()
    if cfg.lora is not None:
      self.lora_targets = tuple(t for t in ("q", "k", "v", "o") if t in cfg.lora.targets)
      self.lora_scale = cfg.lora.scale
      self.lora_dropout = cfg.lora.dropout
      for t in self.lora_targets:
        lora.add_adapters(self, t, cfg.lora, 2 if t == "o" else 1, rngs)
    self.qkv_bias = cfg.qkv_bias
    if cfg.qkv_bias:
      zeros = nnx.initializers.zeros
      self.q_bias = make_param(rngs, zeros, (h, d), ("heads", "head_dim"), pd)
      self.k_bias = make_param(rngs, zeros, (kvh, d), ("kv_heads", "head_dim"), pd)
      self.v_bias = make_param(rngs, zeros, (kvh, d), ("kv_heads", "head_dim"), pd)

  def _proj(self, x: jax.Array, name: str, key=None) -> jax.Array:
    """x: [..., E] -> [..., N, D] float32, as one 2-D GEMM (params reshaped, a free bitcast).

    key: the layer's LoRA dropout key (training forward only; `lora.delta`) or None."""
    w = getattr(self, name)[...]
    x = x.astype(self.dtype)
    y = dense(x, w.reshape(w.shape[0], -1), out_dtype=jnp.float32)
    if name in self.lora_targets:
      y = y + lora.delta(self, name, x, self.lora_scale, jnp.float32, key)
    y = y.reshape(*x.shape[:-1], w.shape[1], w.shape[2])
    if self.qkv_bias:
      y = y + getattr(self, name + "_bias")[...].astype(jnp.float32)
    return y

  def _qkv(self, x, cos, sin, key=None):
    """x: [..., E] -> q [..., KVH, G, D] (roped, pre-scaled), k [..., KVH, D] (roped), v.

    Bias, q/k norm, RoPE and the query scale run on the float32 GEMM output and round to the
    compute dtype once: with bf16 compute, RoPE's elementwise ops in bf16 cost XLA:CPU ~5x their f32
    time (364 vs 71 ms per train step of the benchmark model), and q, k are more accurate.
    """
    q, k = self._proj(x, "q", key), self._proj(x, "k", key)
    if self.qk_norm:
      q, k = self.q_norm(q), self.k_norm(k)
    q = apply_rope(q, cos, sin) * jnp.float32(self.query_scale)
    k = apply_rope(k, cos, sin)
    q, k, v = (a.astype(self.dtype) for a in (q, k, self._proj(x, "v", key)))
    q = q.reshape(*q.shape[:-2], self.num_kv_heads, -1, self.head_dim)
    return q, k, v

  def _out(self, y: jax.Array, key=None) -> jax.Array:
    """y: [..., H, D] -> [..., E] (key: as `_proj`'s)."""
    w = self.o[...]
    y = y.reshape(*y.shape[:-2], -1)
    out = dense(y, w.reshape(-1, w.shape[-1]))
    if "o" in self.lora_targets:
      out = out + lora.delta(self, "o", y, self.lora_scale, out.dtype, key)
    return out

  def full(self, x, cos, sin, mask, batch: int, key=None):
    """Training/scoring path on flat rows. x: [B*L,E], cos/sin: [B*L,D/2], mask: the bias
    [B,1,1,L,L] or, with `attention_block`, the BlockMask -> [B*L,E] (`batch` = B). key: the
    layer's LoRA dropout key (training only) or None.

    Projections stay 2-D (XLA:CPU's backward of [B,L,E] @ [E,F] was ~2x slower). Queries go
    in `QUERY_CHUNKS` chunks, each scored only against the keys up to its own end, so the
    fully masked blocks above the causal diagonal are never computed. Skipped keys would get
    weight exp(MASK_BIAS) = 0: valid queries are unchanged; only rows with no valid key at
    all (padding queries, whose outputs nothing reads) may differ.
    """
    q, k, v = self._qkv(x, cos, sin, key)  # q [B*L,KVH,G,D]; k, v [B*L,KVH,D]
    t, kvh, g, d = q.shape
    l = t // batch
    # Heads-major: q [B,KVH,L,G,D], k/v [B,KVH,L,D]; a group's rows (l, g) are contiguous,
    # so both attention products (and their gradients) are plain batched GEMMs.
    q = q.reshape(batch, l, kvh, g, d).transpose(0, 2, 1, 3, 4)
    k, v = (a.reshape(batch, l, kvh, d).transpose(0, 2, 1, 3) for a in (k, v))
    ys = [_attend(q[:, :, lo:hi], k[:, :, :hi], v[:, :, :hi], _rows_of(mask, lo, hi),
                  self.attention_block) for lo, hi in _chunk_bounds(l, QUERY_CHUNKS)]
    y = ys[0] if len(ys) == 1 else jnp.concatenate(ys, axis=2)
    return self._out(y.transpose(0, 2, 1, 3, 4).reshape(t, kvh * g, d), key)

  def full_rows(self, x, cos, sin, mask, batch: int, read):
    """`full` with queries only at the read rows (scoring: a reward model's last layer).

    x: [B*L,E], cos/sin: [B*L,D/2], mask: as `full`'s; read [B,K] int32 positions in [0, L).
    Keys and values come from every row; query k of row b sits at position read[b, k].
    -> [B*K,E], equal to `full(...)` at those rows (up to GEMM blocking).
    """
    q, k, v = self._qkv(x, cos, sin)  # q [B*L,KVH,G,D]; k, v [B*L,KVH,D]
    t, kvh, g, d = q.shape
    l, kq = t // batch, read.shape[1]
    q = jnp.take_along_axis(q.reshape(batch, l, kvh, g, d), read[:, :, None, None, None], axis=1)
    q = q.transpose(0, 2, 1, 3, 4)  # [B,KVH,K,G,D]
    k, v = (a.reshape(batch, l, kvh, d).transpose(0, 2, 1, 3) for a in (k, v))
    if isinstance(mask, BlockMask):
      mask = mask.rows(read)
    else:
      mask = jnp.take_along_axis(mask[:, :, 0], read[:, None, :, None], axis=2)[:, :, :, None]
    y = _attend(q, k, v, mask, self.attention_block)
    return self._out(y.transpose(0, 2, 1, 3, 4).reshape(batch * kq, kvh * g, d))

  def cached(self, x, cos, sin, k_cache, v_cache, index, bias, rows=None):
    """Block of L tokens written at slot `index`.

    x: [B,L,E]; k_cache [B,KVH,D,S]; v_cache [B,KVH,S,D]; bias [B,1,1,L,S] (the block's
    `BlockMask.bias()`, built once and shared by the layers).
    rows: optional [B] int32, the one query row per batch row whose output is needed.
    Returns y [B,L,E] ([B,1,E] with rows) and the updated caches (all L rows written).
    The caller bounds L (`Transformer._in_chunks`: a long block goes `prefill_chunk` tokens
    at a time), so the [B, heads, L, S] scores and the mask's [B, L, S] bias are a chunk's.
    """
    q, k, v = self._qkv(x, cos, sin)
    if rows is not None:
      q = jnp.take_along_axis(q, rows[:, None, None, None, None], axis=1)
      bias = jnp.take_along_axis(bias, rows[:, None, None, None, None], axis=3)
    zero = jnp.zeros((), jnp.int32)
    k_cache = jax.lax.dynamic_update_slice(
        k_cache, jnp.transpose(k, (0, 2, 3, 1)).astype(k_cache.dtype), (zero, zero, zero, index))
    v_cache = jax.lax.dynamic_update_slice(
        v_cache, jnp.transpose(v, (0, 2, 1, 3)).astype(v_cache.dtype), (zero, zero, index, zero))
    kc, vc = k_cache.astype(self.dtype), v_cache.astype(self.dtype)
    s = _scores(q, kc, "blkgd,bkds->bkgls")
    p = _softmax(s, bias).astype(self.dtype)
    y = jnp.einsum("bkgls,bksd->blkgd", p, vc)
    return self._out(y.reshape(*y.shape[:2], -1, self.head_dim)), k_cache, v_cache

  def decode(self, x, cos, sin, k_cache, v_cache, index, bias):
    """One token per row. x: [B,E]; cos/sin [B,D/2]; bias [B,1,1,S] -> y [B,E], caches."""
    q, k, v = self._qkv(x, cos, sin)  # q [B,KVH,G,D]; k, v [B,KVH,D]
    zero = jnp.zeros((), jnp.int32)
    k_cache = jax.lax.dynamic_update_slice(
        k_cache, k[..., None].astype(k_cache.dtype), (zero, zero, zero, index))
    v_cache = jax.lax.dynamic_update_slice(
        v_cache, v[:, :, None, :].astype(v_cache.dtype), (zero, zero, index, zero))
    kc, vc = k_cache.astype(self.dtype), v_cache.astype(self.dtype)
    s = _scores(q, kc, "bkgd,bkds->bkgs") + bias
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    # Normalized after p @ V: one pass over [B,KVH,G,D] instead of [B,KVH,G,S] (and one op
    # fewer per layer and step, which is what decode time is made of at these sizes).
    y = jnp.einsum("bkgs,bksd->bkgd", e.astype(self.dtype), vc)
    y = y / jnp.sum(e, axis=-1, keepdims=True).astype(self.dtype)
    return self._out(y.reshape(y.shape[0], -1, self.head_dim)), k_cache, v_cache
