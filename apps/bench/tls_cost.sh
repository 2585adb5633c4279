#!/usr/bin/env bash
# What mutual TLS costs the five-process fmnist job (1 coordinator, 2 servers, 2 workers on
# loopback): the same job with and without --tls-dir, alternating, REPS times each. Prints
# each run's wall_s (training, from the report) and test_accuracy, then the medians and their
# ratio. Usage: apps/bench/tls_cost.sh TLS_DIR [REPS=3] [EPOCHS=3]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tls_dir=${1:?usage: $0 TLS_DIR [REPS] [EPOCHS]}
reps=${2:-3}; epochs=${3:-3}
bin=$here/build/bin/troupe-fmnist
export TROUPE_SECRET=${TROUPE_SECRET:-$(head -c 24 /dev/urandom | base64)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT

# One job; prints "wall_s test_accuracy".
job() {
  local port=$((20000 + RANDOM % 20000)) extra=("$@")
  local common=(--epochs "$epochs" --blas-threads 1 --log-level warn "${extra[@]}")
  "$bin" --role coordinator --listen 127.0.0.1:$port --servers 2 --workers 2 \
    --report "$tmp/r.json" "${common[@]}" > "$tmp/c.log" 2>&1 &
  local coordinator=$!
  for i in 0 1; do
    "$bin" --role server --coordinator 127.0.0.1:$port --name s$i "${common[@]}" \
      > "$tmp/s$i.log" 2>&1 &
    "$bin" --role worker --coordinator 127.0.0.1:$port --name w$i "${common[@]}" \
      > "$tmp/w$i.log" 2>&1 &
  done
  wait $coordinator
  wait
  python3 -c "import json; r = json.load(open('$tmp/r.json')); \
print(f\"{r['wall_s']:.3f} {r['test_accuracy']:.4f}\")"
}

plain=(); tls=()
for r in $(seq "$reps"); do
  p=$(job); t=$(job --tls-dir "$tls_dir")
  echo "rep $r  plain: wall_s $(cut -d' ' -f1 <<< "$p") acc $(cut -d' ' -f2 <<< "$p")" \
       "  tls: wall_s $(cut -d' ' -f1 <<< "$t") acc $(cut -d' ' -f2 <<< "$t")"
  plain+=("$(cut -d' ' -f1 <<< "$p")"); tls+=("$(cut -d' ' -f1 <<< "$t")")
done
python3 - "${plain[*]}" "${tls[*]}" <<'EOF'
import statistics, sys
plain = [float(x) for x in sys.argv[1].split()]
tls = [float(x) for x in sys.argv[2].split()]
p, t = statistics.median(plain), statistics.median(tls)
print(f"median wall_s  plain {p:.3f}  tls {t:.3f}  tls/plain {t / p:.3f}")
EOF
