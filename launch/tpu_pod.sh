#!/usr/bin/env bash
# Runs `python -m agent_rl.train` on every worker of a Cloud TPU VM slice (one host or a pod).
# Creates the slice if it does not exist (reuses a READY one, starts a STOPPED one), copies this
# checkout to every worker, installs it (launch/install.sh + jax[tpu]), then starts the same
# command on all workers at once; JAX finds its peers from the TPU metadata
# (jax.distributed.initialize() with no arguments), so no coordinator is passed.
#
#   bash launch/tpu_pod.sh --name=my-v5e --zone=us-west4-a --project=my-proj \
#     --config=configs/ragen_sokoban.py:full --workdir=gs://my-bucket/runs/sokoban \
#     --config.rl.iterations=200
#
# Options (--opt=V or --opt V; defaults from the environment variable in brackets):
#   --name=NAME             TPU VM name [TPU_NAME, default agent-rl]
#   --zone=ZONE             [TPU_ZONE, default gcloud's compute/zone]
#   --project=PROJECT       [TPU_PROJECT, default gcloud's core/project]
#   --accelerator-type=T    [TPU_TYPE, default v5litepod-16]
#   --version=V             TPU software version [TPU_VERSION, default from the type:
#                           v6e v2-alpha-tpuv6e, v5p v2-alpha-tpuv5, v5e v2-alpha-tpuv5-lite,
#                           v4 and older tpu-ubuntu2204-base]
#   --spot                  create as a Spot TPU (preemptible; the trainer saves on SIGTERM)
#   --recreate              delete and create again a slice that is PREEMPTED or otherwise not usable
#   --config=PATH[:ARGS]    experiment config (required)
#   --workdir=DIR           checkpoints and logs; on a multi-host slice use gs://... so that every
#                           worker writes (orbax saves collectively) to the same place (required)
#   --env=K=V               exported on every worker before training (repeatable), e.g. LIBTPU_INIT_ARGS
#   --python=PY             interpreter that makes the venv on the workers [python3.11, apt-installed
#                           if missing: the TPU images ship 3.10 and agent_rl needs >= 3.11]
#   --remote-dir=DIR        code directory on the workers, relative to home [agent_rl]
#   --log-dir=DIR           local folder for one log file per worker [logs/tpu/NAME]
#   --skip-sync --skip-install   reuse the code / environment already on the workers
#   --detach                start training under nohup on each worker and return (logs then in
#                           ~/agent_rl_logs/NAME.log on each worker)
#   --delete-after          delete the slice when the run ends (not with --detach)
#   --internal-ip           ssh/scp over internal IPs (runs from inside the VPC)
#   --dry-run               print every command instead of running it; only the read-only
#                           `describe` still runs, to show whether the slice would be created
# Every other argument (e.g. --config.rl.iterations=3) goes to the train command unchanged.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "tpu_pod.sh: $*" >&2; exit 2; }

name=${TPU_NAME:-agent-rl} zone=${TPU_ZONE:-} project=${TPU_PROJECT:-}
accel=${TPU_TYPE:-v5litepod-16} version=${TPU_VERSION:-}
config="" workdir="" python_bin=python3.11 remote_dir=agent_rl log_dir=""
spot=0 recreate=0 skip_sync=0 skip_install=0 detach=0 delete_after=0 internal_ip=0 dry_run=0
envs=() extra=()
gcloud=${GCLOUD:-gcloud}  # tests point this at a fake that records its arguments
while [ $# -gt 0 ]; do
  arg=$1; shift
  case $arg in
    -h|--help) usage; exit 0 ;;
    --dry-run) dry_run=1; continue ;;
    --spot) spot=1; continue ;;
    --recreate) recreate=1; continue ;;
    --skip-sync) skip_sync=1; continue ;;
    --skip-install) skip_install=1; continue ;;
    --detach) detach=1; continue ;;
    --delete-after) delete_after=1; continue ;;
    --internal-ip) internal_ip=1; continue ;;
    --) extra+=("$@"); break ;;
  esac
  opts="name zone project accelerator-type version config workdir env python remote-dir log-dir"
  key=${arg#--}; key=${key%%=*}
  if [[ $arg == --* ]] && [[ " $opts " == *" $key "* ]]; then
    if [[ $arg == *=* ]]; then value=${arg#*=}; else
      [ $# -gt 0 ] || die "$arg needs a value"; value=$1; shift
    fi
  else
    extra+=("$arg"); continue  # --config.x=y and the like: for the trainer
  fi
  case $key in
    name) name=$value ;;
    zone) zone=$value ;;
    project) project=$value ;;
    accelerator-type) accel=$value ;;
    version) version=$value ;;
    config) config=$value ;;
    workdir) workdir=$value ;;
    env) [[ $value =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env wants K=V, got '$value'"; envs+=("$value") ;;
    python) python_bin=$value ;;
    remote-dir) remote_dir=$value ;;
    log-dir) log_dir=$value ;;
  esac
done

[ -n "$config" ] || die "--config is required (e.g. --config=configs/ragen_sokoban.py:full)"
[ -n "$workdir" ] || die "--workdir is required (a gs:// path on a multi-host slice)"
[ "$detach" -eq 0 ] || [ "$delete_after" -eq 0 ] || die "--delete-after cannot wait for a --detach run"
[[ $name =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] || die "--name '$name': lower-case letters, digits and '-'"
if [ -z "$version" ]; then
  case $accel in
    v6e-*) version=v2-alpha-tpuv6e ;;
    v5p-*) version=v2-alpha-tpuv5 ;;
    v5litepod-*|v5e-*) version=v2-alpha-tpuv5-lite ;;
    v4-*|v3-*|v2-*) version=tpu-ubuntu2204-base ;;
    *) die "--accelerator-type '$accel': no default --version known; pass --version" ;;
  esac
fi
case $workdir in
  gs://*) ;;
  *) echo "tpu_pod.sh: warning: --workdir '$workdir' is local to each worker; a multi-host slice" \
       "needs a shared path (gs://...) for its checkpoints" >&2 ;;
esac
[ -n "$log_dir" ] || log_dir=logs/tpu/$name

# Flags every gcloud tpu-vm call shares; zone/project fall back to gcloud's configuration.
where=()
[ -z "$zone" ] || where+=("--zone=$zone")
[ -z "$project" ] || where+=("--project=$project")
ssh_flags=(--worker=all)
[ "$internal_ip" -eq 0 ] || ssh_flags+=(--internal-ip)

# shellcheck source=SCRIPTDIR/quote.sh disable=SC1091  # quote.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/quote.sh"   # show: print a command shell-quoted
run() {  # print, then run unless --dry-run
  echo "+ $(show "$@")"
  [ "$dry_run" -eq 1 ] || "$@"
}
tpu() { run "$gcloud" compute tpus tpu-vm "$@"; }
create() {
  local flags=(--accelerator-type="$accel" --version="$version")
  [ "$spot" -eq 0 ] || flags+=(--spot)
  tpu create "$name" ${where[@]+"${where[@]}"} "${flags[@]}"
}

# 1. Create or reuse the slice.
describe=("$gcloud" compute tpus tpu-vm describe "$name" ${where[@]+"${where[@]}"} "--format=value(state,acceleratorType)")
echo "+ $(show "${describe[@]}")"
rc=0 found="" err=""
if [ "$dry_run" -eq 1 ] && ! command -v "$gcloud" >/dev/null; then
  echo "tpu_pod.sh: $gcloud not found; showing the commands for a slice that does not exist yet" >&2
  rc=1 err="NOT_FOUND"
else
  errfile=$(mktemp)
  found=$("${describe[@]}" 2>"$errfile") || rc=$?
  err=$(cat "$errfile"); rm -f "$errfile"
fi
if [ "$rc" -ne 0 ]; then
  case $err in
    *NOT_FOUND*|*"not found"*) create ;;
    *) echo "$err" >&2; die "could not describe TPU '$name' (gcloud's error above)" ;;
  esac
else
  read -r state type <<<"$(printf '%s\n' "$found" | grep -v '^[[:space:]]*$' | tail -n 1)" || true
  if [ -n "${type:-}" ] && [ "${type##*/}" != "$accel" ]; then
    die "TPU '$name' exists as ${type##*/}, not $accel: pick another --name or --accelerator-type"
  fi
  case $state in
    READY) echo "tpu_pod.sh: reusing READY TPU '$name' ($accel)" ;;
    STOPPED) tpu start "$name" ${where[@]+"${where[@]}"} ;;
    *)
      [ "$recreate" -eq 1 ] || die "TPU '$name' is ${state:-in an unknown state}; pass --recreate to" \
        "delete and create it again, or wait until it is READY"
      tpu delete "$name" ${where[@]+"${where[@]}"} --quiet
      create ;;
  esac
fi

# 2. Copy the checkout (what git would track; no venvs, runs or caches) to every worker.
if [ "$skip_sync" -eq 0 ]; then
  tarball=${TMPDIR:-/tmp}/agent_rl_$name.tgz
  run tar -czf "$tarball" -C "$repo" --exclude=.git --exclude=.venv --exclude=./venv \
    --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' --exclude=.hypothesis \
    --exclude=./build --exclude='./workdir*' --exclude=./runs --exclude=./logs --exclude=./.whl --exclude=./.gl .
  tpu scp "$tarball" "$name:agent_rl_code.tgz" ${where[@]+"${where[@]}"} "${ssh_flags[@]}"
  # Replace the code folders so files deleted here disappear there; the rest (e.g. a relative
  # workdir) stays.
  unpack="set -e; mkdir -p $(show "$remote_dir") && cd $(show "$remote_dir")"
  unpack+=" && rm -rf agent_rl configs launch third_party && tar -xzf ~/agent_rl_code.tgz && rm ~/agent_rl_code.tgz"
  tpu ssh "$name" ${where[@]+"${where[@]}"} "${ssh_flags[@]}" --command="$unpack"
  [ "$dry_run" -eq 1 ] || rm -f "$tarball"
fi

# 3. Install into a venv outside the code folder (it survives re-syncs).
# shellcheck disable=SC2088  # the tilde is for the worker's shell to expand
venv='~/agent_rl_venv'
if [ "$skip_install" -eq 0 ]; then
  jax_version=$(sed -n 's/^jax==\([^ #]*\).*/\1/p' "$repo/requirements.txt")
  [ -n "$jax_version" ] || die "requirements.txt pins no jax==VERSION for jax[tpu]"
  py=$(show "$python_bin")
  install="set -e; cd $(show "$remote_dir")"
  install+="; command -v $py >/dev/null || { sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q $py $py-venv; }"
  install+="; [ -x $venv/bin/python ] || $py -m venv $venv; . $venv/bin/activate"
  install+="; python -m pip install -q --upgrade pip; bash launch/install.sh"
  # launch/install.sh installs the CPU jaxlib; the TPU runtime (libtpu) comes with the tpu extra.
  install+="; python -m pip install -q $(show "jax[tpu]==$jax_version")"
  tpu ssh "$name" ${where[@]+"${where[@]}"} "${ssh_flags[@]}" --command="$install"
fi

# 4. The same train command on every worker.
train="cd $(show "$remote_dir") && . $venv/bin/activate"
# Every worker joins one JAX job (agent_rl.parallel.distributed: jax's TPU metadata detection).
train+=" && export AGENT_RL_MULTIHOST=1"
for kv in ${envs[@]+"${envs[@]}"}; do train+=" && export $(show "$kv")"; done
train+=" && exec python -m agent_rl.train $(show "--config=$config" "--workdir=$workdir" ${extra[@]+"${extra[@]}"})"
status=0
if [ "$detach" -eq 1 ]; then
  cmd="mkdir -p ~/agent_rl_logs && nohup bash -c $(show "$train") > ~/agent_rl_logs/$name.log 2>&1 < /dev/null &"
  tpu ssh "$name" ${where[@]+"${where[@]}"} "${ssh_flags[@]}" --command="$cmd"
  echo "tpu_pod.sh: started; logs on each worker in ~/agent_rl_logs/$name.log"
else
  run mkdir -p "$log_dir"
  echo "tpu_pod.sh: one log file per worker in $log_dir"
  tpu ssh "$name" ${where[@]+"${where[@]}"} "${ssh_flags[@]}" --command="$train" \
    --output-directory="$log_dir" || status=$?
  [ "$status" -eq 0 ] || echo "tpu_pod.sh: training failed (status $status); see $log_dir" >&2
  [ "$delete_after" -eq 0 ] || tpu delete "$name" ${where[@]+"${where[@]}"} --quiet
fi
exit "$status"
