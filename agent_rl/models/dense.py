"""The dense product y = x @ w of every projection and head, with a hand-written backward.

Mixed precision (compute dtype bf16, float32 master weights) wants each of the three GEMMs of
a dense layer to read low-precision operands and accumulate in float32:
  y  = x @ w          bf16 x bf16 -> f32, cast to the output dtype
  dx = dy @ w^T       bf16 x bf16 -> f32, cast to x's dtype
  dw = x^T @ dy       bf16 x bf16 -> f32, in the stored weight's dtype: `dense` takes the
                      f32 master weight and casts it inside, so its gradient is never rounded
                      to bf16 (autodiff through an outside cast, like torch autocast, rounds it)
Plain `x @ w` in bf16 rounds its accumulator output to bf16, and autodiff of a
`preferred_element_type=f32` product followed by a cast hands the backward float32
cotangents, so one of the two backward GEMMs runs in float32. With all three in bf16 the bf16
train step of `benchmarks/train_step.py` went from 4.9 s to 4.0 s on the 2-core CPU (3.6 s
with `Attention._qkv`'s float32 RoPE). TPUs and GPUs accumulate bf16 products in f32 anyway;
there this only makes the precision explicit. In float32 the three products are autodiff's.

XLA:CPU note (jax 0.10): the forward and dx GEMMs run on AMX through YNNPACK (1,200-1,950
GFLOP/s at the benchmark's shapes, with `launch/local.sh`'s malloc settings), but XLA's
operand upcaster turns dw = x^T dy, which contracts the major (token) dim of both operands,
into an f32 GEMM (~260 GFLOP/s). Writing x^T out first does not help: XLA folds the transpose
back into the dot before that decision (also through bitcasts, reverses and
optimization barriers). In float32, where the two paths are about as fast, materializing x^T
made the GEMMs faster but its transposes cost as much (283 ms per step).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _dense2d(x: jax.Array, w: jax.Array, out_dtype, w_dtype) -> jax.Array:
  return _fwd(x, w, out_dtype, w_dtype)[0]


def _fwd(x, w, out_dtype, w_dtype):
  del w_dtype  # the backward's
  wc = w.astype(x.dtype)  # saved in the compute dtype: half the bytes of f32 master weights
  return jnp.matmul(x, wc, preferred_element_type=jnp.float32).astype(out_dtype), (x, wc)


def _bwd(out_dtype, w_dtype, res, dy):
  x, wc = res
  dy = dy.astype(x.dtype)
  dx = jnp.matmul(dy, wc.T, preferred_element_type=jnp.float32).astype(x.dtype)
  dw = jnp.matmul(x.T, dy, preferred_element_type=jnp.float32).astype(w_dtype)
  return dx, dw


_dense2d.defvjp(_fwd, _bwd)


def dense(x: jax.Array, w: jax.Array, out_dtype=None) -> jax.Array:
  """x: [..., E] @ w: [E, F] -> [..., F] in `out_dtype` (default x's), float32 accumulation.

  x is in the compute dtype; w is the stored (master) weight, cast to x's dtype inside, so its
  gradient comes back in w's own dtype straight from the f32 accumulator.
  """
  if w.ndim != 2 or x.shape[-1] != w.shape[0]:
    raise ValueError(f"dense: x [..., E] and w [E, F] expected, got {x.shape} and {w.shape}")
  out_dtype = jnp.dtype(out_dtype or x.dtype)
  y = _dense2d(x.reshape(-1, x.shape[-1]), w, out_dtype, jnp.dtype(w.dtype))
  return y.reshape(*x.shape[:-1], w.shape[-1])
