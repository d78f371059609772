#!/usr/bin/env bash
# The one prepared GPU check (issue 17), for the `device` tool when a GPU is lent:
#   run(command="bash benchmarks/device_check.sh", timeout_s=540)
# The device image has jax (CUDA), flax, optax, torch and transformers; our other pins are not
# needed by benchmarks/device_check.py. Writes $OUT/device_check.json (else benchmarks/results/).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 500 \
  python3 benchmarks/device_check.py --out="$out/device_check.json" --budget_s=420 2>&1 \
  | tee "$out/device_check.log"
