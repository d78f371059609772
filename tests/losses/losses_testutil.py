"""Shared test helpers for tests/losses: random batches, finite differences, an x64 context."""
import contextlib

import jax
import numpy as np


def make_batch(seed=0, b=5, l=7, spread=0.4, garbage=3.0):
  """Random float64 `[B, L]` logprobs / old / advantages / mask / IS weights / turn_index.

  Row 0 is all-masked; masked positions hold garbage so leaks show up; advantages include
  exact zeros; turn labels are non-contiguous and include -1 (prompt).
  """
  rng = np.random.default_rng(seed)
  lp = -np.abs(rng.normal(1.0, 0.7, (b, l)))
  old = lp + rng.normal(0.0, spread, (b, l))
  adv = rng.normal(0.0, 1.0, (b, l))
  adv[rng.random((b, l)) < 0.1] = 0.0
  m = (rng.random((b, l)) < 0.75).astype(np.float64)
  m[0] = 0.0
  m[1, 0] = 1.0
  off = m == 0
  lp[off] = rng.normal(0.0, garbage, off.sum())
  old[off] = rng.normal(0.0, garbage, off.sum())
  w = rng.uniform(0.5, 1.5, (b, l))
  ti = rng.integers(-1, 4, (b, l))
  ti[1, 0] = 2
  return dict(lp=lp, old=old, adv=adv, m=m, w=w, ti=ti)


def fd_grad(f, x, eps=1e-6):
  """Central finite differences of scalar f at float64 array x."""
  x = np.asarray(x, np.float64)
  g = np.zeros_like(x)
  for idx in np.ndindex(x.shape):
    xp, xm = x.copy(), x.copy()
    xp[idx] += eps
    xm[idx] -= eps
    g[idx] = (float(f(xp)) - float(f(xm))) / (2 * eps)
  return g


@contextlib.contextmanager
def x64():
  """float64 inside, restored afterwards."""
  with jax.enable_x64(True):
    yield
