"""Shared fixtures for the models room: a tiny config factory and an initialized model."""
import jax
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import ModelConfig, Transformer

_SMALL = dict(vocab_size=97, hidden=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
              intermediate=64)


def init_model(cfg: ModelConfig, seed: int = 0):
  """(graphdef, state) with NumPy-random weights (norm scales ~1, biases nonzero).

  Filling an `eval_shape` skeleton from NumPy avoids compiling a threefry program per
  parameter, which costs seconds of CPU on the shared 2-core machine.
  """
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(seed))))
  rng = np.random.default_rng(seed)
  for path, var in nnx.to_flat_state(state):
    shape = var.get_value().shape
    if path[-1] == "scale":
      value = 1.0 + 0.1 * rng.standard_normal(shape)
    elif path[-1].endswith("bias"):
      value = 0.1 * rng.standard_normal(shape)
    else:
      value = rng.standard_normal(shape) / np.sqrt(shape[0] if path[-1] != "o" else
                                                   shape[0] * shape[1])
    var.set_value(jax.numpy.asarray(value.astype(cfg.params_dtype)))
  return graphdef, state


@pytest.fixture(scope="session")
def small_config():
  """Factory: small_config(**overrides) -> ModelConfig (2 layers, hidden 32, GQA 4/2)."""
  return lambda **overrides: ModelConfig(**{**_SMALL, **overrides})


@pytest.fixture(scope="session")
def small_model(small_config):
  cfg = small_config()
  graphdef, state = init_model(cfg)
  return cfg, graphdef, state
