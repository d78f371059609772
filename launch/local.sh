#!/usr/bin/env bash
# Runs `python -m agent_rl.train` on this machine: CPU or one GPU, optionally with fake CPU
# devices (to try sharded configs) and several local processes (JAX's multi-controller
# runtime over localhost, the way a pod runs, with CPU collectives).
#
#   bash launch/local.sh --config=configs/ragen_sokoban.py:tiny --workdir=runs/tiny
#   bash launch/local.sh --fake-devices=8 --config=... --workdir=... --config.mesh.fsdp=4
#   bash launch/local.sh --processes=2 --fake-devices=4 --config=... --workdir=...
#
# Options (--opt=V or --opt V):
#   --config=PATH[:ARGS]  experiment config (required)        --workdir=DIR  (required)
#   --fake-devices=N      XLA_FLAGS=--xla_force_host_platform_device_count=N and JAX_PLATFORMS=cpu
#                         (N fake CPU devices per process)
#                         CPU runs (this or --platform=cpu) also get GLIBC_TUNABLES that keep
#                         freed memory in the heap, unless GLIBC_TUNABLES is already set
#   --processes=P         P processes, each with JAX_COORDINATOR_ADDRESS=localhost:PORT,
#                         JAX_NUM_PROCESSES=P, JAX_PROCESS_ID=i; waits for all and fails if any
#                         fails (the others are then stopped: a peer would block in a collective)
#   --port=PORT           coordinator port (default: a free one)
#   --platform=cpu|gpu    JAX_PLATFORMS=cpu|cuda; with gpu and P processes, process i gets
#                         JAX_LOCAL_DEVICE_IDS=i (one GPU each)
#   --log-dir=DIR         per-process logs with P > 1 (default WORKDIR/logs, ./logs for gs://)
#   --python=PY           interpreter (default $PYTHON or python)
#   --dry-run             print the environment and commands, run nothing
# Every other argument (e.g. --config.rl.iterations=3) goes to the train command unchanged.
set -euo pipefail
# No cd: relative --config / --workdir paths mean what they mean for `python -m agent_rl.train`
# run from here (the package itself is installed, see launch/install.sh).

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "local.sh: $*" >&2; exit 2; }

config="" workdir="" fake_devices="" processes=1 port="" platform="" log_dir="" dry_run=0
python_bin=${PYTHON:-python}
extra=()
while [ $# -gt 0 ]; do
  arg=$1; shift
  case $arg in
    -h|--help) usage; exit 0 ;;
    --dry-run) dry_run=1; continue ;;
    --) extra+=("$@"); break ;;
  esac
  # Options of this script; --config.x=y and anything unknown pass through to train.
  case $arg in
    --config=*|--workdir=*|--fake-devices=*|--processes=*|--port=*|--platform=*|--log-dir=*|--python=*)
      name=${arg%%=*}; value=${arg#*=} ;;
    --config|--workdir|--fake-devices|--processes|--port|--platform|--log-dir|--python)
      [ $# -gt 0 ] || die "$arg needs a value"
      name=$arg; value=$1; shift ;;
    *) extra+=("$arg"); continue ;;
  esac
  case $name in
    --config) config=$value ;;
    --workdir) workdir=$value ;;
    --fake-devices) fake_devices=$value ;;
    --processes) processes=$value ;;
    --port) port=$value ;;
    --platform) platform=$value ;;
    --log-dir) log_dir=$value ;;
    --python) python_bin=$value ;;
  esac
done

[ -n "$config" ] || die "--config is required (e.g. --config=configs/ragen_sokoban.py:tiny)"
[ -n "$workdir" ] || die "--workdir is required"
[[ $processes =~ ^[1-9][0-9]*$ ]] || die "--processes must be a positive integer, got '$processes'"
[ -z "$fake_devices" ] || [[ $fake_devices =~ ^[1-9][0-9]*$ ]] \
  || die "--fake-devices must be a positive integer, got '$fake_devices'"
[ -z "$port" ] || [[ $port =~ ^[0-9]+$ ]] || die "--port must be a number, got '$port'"
case $platform in
  ""|cpu|gpu) ;;
  *) die "--platform must be cpu or gpu, got '$platform'" ;;
esac
[ -z "$fake_devices" ] || [ "$platform" != gpu ] || die "--fake-devices needs the CPU platform, not gpu"

# The environment every process shares.
envs=()
if [ -n "$fake_devices" ]; then
  # Fake devices exist only on the host platform, so pin JAX to it; keep the user's other flags.
  flags=$(printf '%s' "${XLA_FLAGS:-}" | sed -E 's/--xla_force_host_platform_device_count=[^ ]*//g; s/  +/ /g; s/^ //; s/ $//')
  envs+=("JAX_PLATFORMS=cpu" "XLA_FLAGS=${flags:+$flags }--xla_force_host_platform_device_count=$fake_devices")
elif [ "$platform" = cpu ]; then
  envs+=("JAX_PLATFORMS=cpu")
fi
[ "$platform" != gpu ] || envs+=("JAX_PLATFORMS=cuda")
if [ -z "${GLIBC_TUNABLES:-}" ] && { [ -n "$fake_devices" ] || [ "$platform" = cpu ]; }; then
  # CPU runs keep freed memory in the heap (one arena, no mmap, no trimming), so XLA's per-step
  # temporaries are not faulted in again every step: ~10% per train step, see
  # benchmarks/train_step.py. A GLIBC_TUNABLES of your own is left alone.
  envs+=("GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736")
fi

if [ "$processes" -gt 1 ] && [ -z "$port" ]; then
  # A free port, so concurrent runs (parallel tests) do not collide; 12355 if Python can't say.
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo 12355)
fi

train=("$python_bin" -m agent_rl.train "--config=$config" "--workdir=$workdir" ${extra[@]+"${extra[@]}"})

# shellcheck source=SCRIPTDIR/quote.sh disable=SC1091  # quote.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/quote.sh"   # show: print a command shell-quoted

if [ "$processes" -eq 1 ]; then
  echo "+ env $(show ${envs[@]+"${envs[@]}"} "${train[@]}")"
  [ "$dry_run" -eq 1 ] && exit 0
  exec env ${envs[@]+"${envs[@]}"} "${train[@]}"
fi

if [ -z "$log_dir" ]; then
  case $workdir in
    *://*) log_dir=logs ;;  # a bucket path is no place for a shell redirect
    *) log_dir=$workdir/logs ;;
  esac
fi

pids=()
cleanup() {  # $1: signal
  local pid
  for pid in ${pids[@]+"${pids[@]}"}; do [ "$pid" = "done" ] || kill -"$1" "$pid" 2>/dev/null || true; done
}
[ "$dry_run" -eq 1 ] || { mkdir -p "$log_dir"; trap 'cleanup TERM; exit 130' INT TERM; }

for ((i = 0; i < processes; i++)); do
  penv=(${envs[@]+"${envs[@]}"} "JAX_COORDINATOR_ADDRESS=localhost:$port"
        "JAX_NUM_PROCESSES=$processes" "JAX_PROCESS_ID=$i")
  [ "$platform" != gpu ] || penv+=("JAX_LOCAL_DEVICE_IDS=$i")
  log=$log_dir/process_$i.log
  # Process 0 also writes to the terminal: it is the one that logs progress.
  if [ "$i" -eq 0 ]; then redirect="2>&1 | tee $(show "$log")"; else redirect="> $(show "$log") 2>&1"; fi
  echo "+ env $(show "${penv[@]}" "${train[@]}") $redirect &"
  [ "$dry_run" -eq 1 ] && continue
  if [ "$i" -eq 0 ]; then
    env "${penv[@]}" "${train[@]}" > >(tee "$log") 2>&1 &
  else
    env "${penv[@]}" "${train[@]}" > "$log" 2>&1 &
  fi
  pids+=($!)
done
[ "$dry_run" -eq 1 ] && exit 0

# Poll rather than `wait -n`, which older bash (macOS's 3.2) lacks. The first failure stops the
# rest: SIGTERM (the trainer saves a checkpoint on it), then SIGKILL after a grace period, since a
# collective save can hang once a peer is gone.
status=0 remaining=$processes kill_at=""
grace=${LOCAL_KILL_AFTER:-30}
while [ "$remaining" -gt 0 ]; do
  if [ -n "$kill_at" ] && [ "$SECONDS" -ge "$kill_at" ]; then cleanup KILL; kill_at=""; fi
  for ((i = 0; i < processes; i++)); do
    pid=${pids[$i]}
    [ "$pid" != "done" ] || continue
    kill -0 "$pid" 2>/dev/null && continue
    rc=0; wait "$pid" || rc=$?
    pids[i]="done"; remaining=$((remaining - 1))
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$rc
      echo "local.sh: process $i exited with status $rc (log: $log_dir/process_$i.log); stopping the others" >&2
      [ "$i" -eq 0 ] || tail -n 20 "$log_dir/process_$i.log" >&2 || true
      cleanup TERM; kill_at=$((SECONDS + grace))
    fi
  done
  [ "$remaining" -eq 0 ] || sleep 0.2
done
wait  # the tee of process 0
exit "$status"
