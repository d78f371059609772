"""The training path's attention core in key blocks: memory linear in the keys, any backend.

`attention.attention_core` saves the probabilities P [B, K, Q, S] of every layer for its
backward: at a windowed world config's rows (4,096 tokens, Qwen2.5-1.5B's 12 heads) that is
12 x 4,096^2 probabilities a row and layer, 0.4 GB in bf16 (and the float32 scores beside them
while the layer runs), more than the rest of the layer's activations. `blocked_core` computes the same
softmax(q k^T + bias) v over blocks of keys with a running max and sum (the online softmax of
Milakov & Gimelshein, 2018, arXiv:1805.02867; memory-efficient attention, Rabe & Staats, 2021,
arXiv:2112.05682) and saves only the output and each row's log-sum-exp; its backward
recomputes each block's probabilities from them (FlashAttention's, Dao et al., 2022,
arXiv:2205.14135, alg. 2: dS = P * (dP - rowsum(dY * Y))). One block's [B, K, Q, c] scores are
alive at a time, forward and backward. Pure JAX (a `lax.scan` over the blocks), so it runs and
is tested on CPU; a fused kernel (cuDNN, Pallas splash attention) would also avoid writing the
block's scores to memory, and is the accelerator's next step.

`model.attention_block` (keys per block; 0: the dense core) selects it (`attention._attend`).
Rows with no valid key (padding queries, whose outputs nothing reads) output 0 with a zero
gradient, where the dense core averages the keys uniformly; every other row is the same up to
rounding (tested against the dense core and a NumPy softmax, values and gradients).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from agent_rl.models.attention import MASK_BIAS, BlockMask, _contract_rows


def key_blocks(length: int, block: int) -> tuple[int, int]:
  """(n, c): `length` keys in n blocks of c <= block keys (balanced; the last padded)."""
  n = -(-length // block)
  return n, -(-length // n)


def _split_keys(k, v, mask: BlockMask, n: int, c: int):
  """k, v [B,K,S,D] padded to n*c keys (zeros) and cut into blocks on a leading axis
  ([n,B,K,c,D]); the mask padded (the new keys invalid) and each block's first slot [n]."""
  b, kv, s, d = k.shape
  if n * c > s:
    k, v = (jnp.pad(a, ((0, 0), (0, 0), (0, n * c - s), (0, 0))) for a in (k, v))
    mask = mask.padded(n * c)
  cut = lambda a: jnp.moveaxis(a.reshape(b, kv, n, c, d), 2, 0)
  return cut(k), cut(v), mask, jnp.arange(n, dtype=jnp.int32) * c


def _block_scores(qm, kj, mask: BlockMask, start, c: int):
  """float32 scores of the merged query rows qm [B,K,R*G,D] against the key block kj
  [B,K,c,D] at slots [start, start + c), plus that block's bias (built from the mask's
  factors, [B,1,R,1,c] on the rows' (R, G) view: never a whole [R, S] bias, never a copy per
  query head)."""
  s = jnp.einsum("bkqd,bksd->bkqs", qm, kj, preferred_element_type=jnp.float32)
  b, kv, q, _ = s.shape
  bias = mask.bias(start, c)[:, :, 0, :, None, :]  # [B,1,R,1,c]
  r = bias.shape[2]
  return (s.reshape(b, kv, r, q // r, c) + bias).reshape(s.shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def blocked_core(q: jax.Array, k: jax.Array, v: jax.Array, mask: BlockMask, block: int
                 ) -> jax.Array:
  """softmax(q k^T + bias) v, `block` keys at a time: q [B,K,R,G,D] (R query rows, G query
  heads per KV head), k, v [B,K,S,D], mask: the R rows' BlockMask over the S keys (no
  gradient) -> y [B,K,R,G,D] in q's dtype."""
  return _fwd(q, k, v, mask, block)[0]


def _fwd(q, k, v, mask, block):
  b, kv, r, g, d = q.shape
  qm = q.reshape(b, kv, r * g, d)
  n, c = key_blocks(k.shape[2], block)
  kb, vb, pmask, starts = _split_keys(k, v, mask, n, c)

  def body(carry, xs):
    m, l, acc = carry  # running max, sum of exp(s - m), sum of exp(s - m) v
    kj, vj, start = xs
    s = _block_scores(qm, kj, pmask, start, c)
    m_new = jnp.maximum(m, jnp.max(s, axis=-1))
    alpha = jnp.exp(m - m_new)
    p = jnp.exp(s - m_new[..., None])
    pv = jnp.einsum("bkqs,bksd->bkqd", p.astype(q.dtype), vj, preferred_element_type=jnp.float32)
    return (m_new, l * alpha + jnp.sum(p, axis=-1), acc * alpha[..., None] + pv), None

  rows = (b, kv, r * g)
  init = (jnp.full(rows, -jnp.inf, jnp.float32), jnp.zeros(rows, jnp.float32),
          jnp.zeros(rows + (d,), jnp.float32))
  (m, l, acc), _ = jax.lax.scan(body, init, (kb, vb, starts))
  # A row with no valid key (every score ~MASK_BIAS; m + log(l) would round back to MASK_BIAS
  # and the backward see p = 1 for every key) outputs 0 and gets an infinite log-sum-exp, so
  # its backward probabilities are 0: the gradient of what it outputs.
  dead = m < MASK_BIAS / 2
  y = jnp.where(dead[..., None], 0.0, acc / l[..., None]).astype(q.dtype)
  return y.reshape(q.shape), (qm, k, v, mask, y, jnp.where(dead, jnp.inf, m + jnp.log(l)))


def _bwd(block, res, dy):
  qm, k, v, mask, y, lse = res
  b, kv, s_len, d = k.shape
  shape = dy.shape
  dy = dy.reshape(y.shape)
  delta = jnp.sum(dy.astype(jnp.float32) * y.astype(jnp.float32), axis=-1)  # rowsum(dY * Y)
  n, c = key_blocks(s_len, block)
  kb, vb, pmask, starts = _split_keys(k, v, mask, n, c)

  def body(dq, xs):
    kj, vj, start = xs
    p = jnp.exp(_block_scores(qm, kj, pmask, start, c) - lse[..., None])
    dv = _contract_rows(p.astype(qm.dtype), dy)
    dp = jnp.einsum("bkqd,bksd->bkqs", dy, vj, preferred_element_type=jnp.float32)
    ds = (p * (dp - delta[..., None])).astype(qm.dtype)
    dq = dq + jnp.einsum("bkqs,bksd->bkqd", ds, kj, preferred_element_type=jnp.float32)
    return dq, (_contract_rows(ds, qm), dv)

  dq, (dk, dv) = jax.lax.scan(body, jnp.zeros(qm.shape, jnp.float32), (kb, vb, starts))
  join = lambda a: jnp.moveaxis(a, 0, 2).reshape(b, kv, n * c, d)[:, :, :s_len]
  return dq.astype(qm.dtype).reshape(shape), join(dk).astype(k.dtype), join(dv).astype(v.dtype), None


blocked_core.defvjp(_fwd, _bwd)
