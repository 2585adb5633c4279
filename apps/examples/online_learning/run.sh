#!/usr/bin/env bash
# Streams 200k events through 3 learners, one of which crashes once and is restarted by its
# supervisor; fails unless the last window's prequential accuracy is at least 0.9.
# usage: run.sh BUILD_DIR (tests/package runs it).
set -euo pipefail
"${1:-build}/online-learning" --workers 3 --events 200000 --crash-after 40 --min-accuracy 0.9
