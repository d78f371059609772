#!/usr/bin/env bash
# Builds `.devcarry/` (git-ignored) for benchmarks/device_worlds.sh: the pure-Python packages the
# device image lacks, copied from this venv, and the TextWorld peer's game generated here.
#   bash benchmarks/device_carry.sh     (in the venv of `launch/install.sh test`)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf .devcarry && mkdir -p .devcarry/site
for p in textworld jericho tatsu hashids.py mementos more_itertools prompt_toolkit wcwidth \
         termcolor ml_collections bm25s; do
  cp -r "$site/$p" .devcarry/site/
done
find .devcarry -name __pycache__ -type d -prune -exec rm -rf {} +
python benchmarks/textworld_peer.py --quick > /dev/null  # generates (or reuses) the game
cp -r "${TMPDIR:-/tmp}/agent_rl_textworld_games" .devcarry/games
du -sh .devcarry
