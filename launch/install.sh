#!/usr/bin/env bash
# Installs agent_rl into the active Python environment.
#   bash launch/install.sh        runtime only
#   bash launch/install.sh test   + test references (CPU torch, transformers, gymnasium) and
#                                 the host text games (requirements-host.txt)
#   bash launch/install.sh host   + the host text games only (TextWorld, TextWorld-Express,
#                                 ScienceWorld, ALFWorld; the last three need Java 17 / gcc)
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements.txt
python -m pip install -q --no-deps -e .
if [ "${1:-}" = "test" ]; then
  # CPU torch: prefer the +cpu wheel where a local wheelhouse offers it (no CUDA libraries),
  # else the PyPI wheel.
  python -m pip install -q "torch==2.13.0+cpu" 2>/dev/null || python -m pip install -q "torch>=2.4"
  python -m pip install -q -r requirements-test.txt
elif [ "${1:-}" = "host" ]; then
  python -m pip install -q -r requirements-host.txt
fi
