"""The jitted train step compiles once per run: across iterations, and again only once in a
resumed run (a restored state with other avals, shardings or weak types would retrace it).

The counter listens to JAX's own lowering event (`/jax/core/compile/jaxpr_to_mlir_module_
duration`, one per compilation, tagged with the jitted function's name), so it counts real
compilations of `train_step`, not Python calls; the in-memory executable cache cannot hide a
retrace because lowering runs before it.
"""
import collections
import contextlib

import jax
from jax._src import dispatch

from agent_rl.train.run import run
from tests.train.tiny import tiny_config

_LOWER = dispatch.JAXPR_TO_MLIR_MODULE_EVENT
_counts: collections.Counter = collections.Counter()
_active = [False]


def _listener(event, duration, **kw):
  del duration
  if _active[0] and event == _LOWER:
    _counts[kw.get("fun_name", "")] += 1


jax.monitoring.register_event_duration_secs_listener(_listener)


@contextlib.contextmanager
def count_compiles():
  """Yields a Counter {jitted function name: number of compilations} for the block."""
  _counts.clear()
  _active[0] = True
  try:
    yield _counts
  finally:
    _active[0] = False


def _step_compiles(counts) -> int:
  return sum(n for name, n in counts.items() if name.rstrip(")").endswith("train_step"))


def test_counter_sees_a_retrace():
  """The counter is not blind: a new input shape recompiles, a repeated one does not."""
  def toy_train_step(x):
    return x * 2

  g = jax.jit(toy_train_step)
  with count_compiles() as counts:
    g(jax.numpy.ones(3))
    g(jax.numpy.ones(3))
    assert _step_compiles(counts) == 1
    g(jax.numpy.ones(4))
    assert _step_compiles(counts) == 2


def test_train_step_compiles_once_across_iterations_and_resume(tmp_path):
  wd = str(tmp_path / "run")
  c = tiny_config(iterations=2, ckpt_every=1)  # 2 iterations x 2 minibatches x epochs steps
  with count_compiles() as counts:
    run(c, wd)
    first = _step_compiles(counts)
  assert first == 1, dict(counts)
  c.train.iterations = 4  # resume from iteration 2 on the same workdir
  with count_compiles() as counts:
    run(c, wd)
    resumed = _step_compiles(counts)
  assert resumed == 1, dict(counts)
