#!/usr/bin/env bash
# pip install of the package (apps/python) into a fresh venv that sees Debian's torch
# (--system-site-packages), its extension built in this tree's build (TROUPE_BUILD_DIR), from
# a copy of apps/python so that pip leaves nothing in the tree; then the CNN example trains
# from the installed package, with no PYTHONPATH. Leaves nothing behind.
# usage: pip_install_test.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
python=${3:-/usr/bin/python3}
work=$(mktemp -d /tmp/troupe-pip.XXXXXX)
trap 'rm -rf "$work"' EXIT

cp -r "$source/apps/python" "$work/src"
"$python" -m venv --system-site-packages "$work/venv"
TROUPE_BUILD_DIR="$build" "$work/venv/bin/pip" install --no-build-isolation --no-deps -q \
  "$work/src"
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" - "$work/venv" <<'PY'
import sys
import troupe
assert troupe.__file__.startswith(sys.argv[1]), troupe.__file__
print("installed:", troupe.__file__)
PY
env -u PYTHONPATH "$work/venv/bin/python" "$source/apps/examples/python/fmnist_cnn.py" \
  --train-limit 640 --test-limit 100 --epochs 1 --torch-threads 1 --report "$work/r.json" \
  --log-level warn
grep -q '"status": "finished"' "$work/r.json"
echo "pip_install_test: passed"
