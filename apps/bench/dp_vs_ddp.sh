#!/usr/bin/env bash
# The data-parallel job against PyTorch DDP, back to back on this machine: 1 coordinator + 2
# troupe-fmnist worker processes (--mode dp --batch 64, Gloo) against
# ../shared/peers/torch_ddp_fmnist.py 2 EPOCHS (gloo, 2 processes x 1 thread, global batch
# 128), alternating, REPS times each. Prints each run's wall_s and test_accuracy, the medians
# and the ratio. Usage: apps/bench/dp_vs_ddp.sh [REPS=3] [EPOCHS=3] [extra troupe flags...]
# Troupe picks OpenBLAS's AVX-512 kernels where OpenBLAS falls back to SSE3 for a CPU model it
# does not know (troupe::select_blas_kernels); PEER_CORETYPE=SkylakeX gives DDP (which uses the
# same OpenBLAS) those kernels too, for a comparison of the runtimes alone.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
reps=${1:-3}; epochs=${2:-3}; shift $(( $# > 2 ? 2 : $# )) || true
bin=${TROUPE_FMNIST:-$here/build/bin/troupe-fmnist}  # another build: TROUPE_FMNIST=path
peer=${PEER:-$here/../shared/peers/torch_ddp_fmnist.py}
export TROUPE_SECRET=${TROUPE_SECRET:-$(head -c 24 /dev/urandom | base64)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

troupe_run() {
  local port=$((20000 + RANDOM % 20000))
  "$bin" --mode dp --role coordinator --listen 127.0.0.1:$port --workers 2 --batch 64 \
    --epochs "$epochs" --report "$tmp/r.json" --log-level warn "$@" > "$tmp/c.log" 2>&1 &
  local c=$!
  for i in 0 1; do
    "$bin" --mode dp --role worker --coordinator 127.0.0.1:$port --batch 64 --epochs "$epochs" \
      --log-level warn "$@" > "$tmp/w$i.log" 2>&1 &
  done
  wait
  python3 -c "import json; r=json.load(open('$tmp/r.json')); print(r['wall_s'], r['test_accuracy'])"
}

ddp_run() {
  if [[ -n "${PEER_CORETYPE:-}" ]]; then export OPENBLAS_CORETYPE=$PEER_CORETYPE; fi
  /usr/bin/python3 "$peer" 2 "$epochs" | tail -1 |
    sed -E 's/.*test_accuracy=([0-9.]+) wall_s=([0-9.]+).*/\2 \1/'
}

ours=(); theirs=()
for r in $(seq "$reps"); do
  a=$(troupe_run "$@"); b=$(ddp_run)
  echo "run $r  troupe wall_s/test_accuracy: $a   ddp: $b"
  ours+=("$a"); theirs+=("$b")
done
python3 - "${ours[@]}" -- "${theirs[@]}" <<'PY'
import sys, statistics as s
args = sys.argv[1:]; cut = args.index('--')
ours = [tuple(map(float, x.split())) for x in args[:cut]]
theirs = [tuple(map(float, x.split())) for x in args[cut + 1:]]
mo = s.median(w for w, _ in ours); mt = s.median(w for w, _ in theirs)
ao = s.median(a for _, a in ours); at = s.median(a for _, a in theirs)
print(f"median wall_s: troupe {mo:.2f}  ddp {mt:.2f}  ratio {mo / mt:.2f} (goal <= 0.70)")
print(f"median test_accuracy: troupe {ao:.4f}  ddp {at:.4f}  (goal >= ddp - 0.005)")
PY
