"""Test set-up: CPU only, 8 fake devices for sharded paths, float32 matmuls exact enough for parity."""
import os

# Must be set before jax is imported anywhere. Tests that need one device use jax.devices()[:1].
os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
