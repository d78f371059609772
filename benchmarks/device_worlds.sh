#!/usr/bin/env bash
# The prepared GPU check of the env benchmarks (issues 18 and 19), then issue 17's train-step /
# decode check with the time left, for the `device` tool when a GPU is lent:
#   run(command="bash benchmarks/device_worlds.sh", carry=[".devcarry"], timeout_s=570)
# The device image has jax (CUDA), flax, optax, orbax, sentencepiece, tokenizers, torch; the
# rest travels in `.devcarry/` (git-ignored; `benchmarks/device_carry.sh` builds it here):
#   site/   pure-Python packages copied from our venv: textworld and its pure deps, jericho with
#           its compiled libfrotz.so (loaded through ctypes, so any CPython), ml_collections, bm25s
#   games/  the TextWorld peer's game, generated here (the Inform 7 compiler is not needed there)
# Each section runs in its own process under its own timeout, so one failing section (the
# device's jax is newer than our pin) loses only itself. The peers (TextWorld, bm25s, the
# Python ports) run on the device machine's CPU in the same run as our jitted envs on its GPU.
# QUICK=1 runs the CPU smoke (batch 64, tiny presets) that checks this script here.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/device_worlds}"
mkdir -p "$out"
export PYTHONPATH="$PWD:$PWD/.devcarry/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"
quick=(); tools_args=(); check_args=(--budget_s=250)
if [[ "${QUICK:-0}" == 1 ]]; then
  quick=(--quick); tools_args=(--batch=64 --entities=200 --repeats=1)
  check_args=(--budget_s=60 --presets=tiny --batch=2 --length=64)
fi
mkdir -p /tmp/agent_rl_textworld_games && cp -n .devcarry/games/* /tmp/agent_rl_textworld_games/
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  "$py" -c "import jax, flax, optax; print('jax', jax.__version__, jax.devices(), 'flax',
flax.__version__, 'optax', optax.__version__)"
  echo "== worlds"; date +%s
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 timeout 170 "$py" benchmarks/worlds.py --textworld \
    "${quick[@]}" --out="$out/worlds_gpu.json"
  echo "worlds rc=$?"; echo "== tools"; date +%s
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 timeout 90 "$py" benchmarks/tools.py "${tools_args[@]}" \
    --out="$out/tools_gpu.json"
  echo "tools rc=$?"; echo "== device_check"; date +%s
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 290 "$py" benchmarks/device_check.py \
    "${check_args[@]}" --out="$out/device_check.json"
  echo "device_check rc=$?"; date +%s
} 2>&1 | tee "$out/device_worlds.log"
