#!/usr/bin/env bash
# The fmnist job as separate processes on loopback (1 coordinator, SERVERS servers, 2
# workers), run once per variant in turn, REPS rounds: each variant is NAME=FLAGS (flags for
# every process, split on spaces). Prints each run's wall_s (training, from the report) and
# test_accuracy, then each variant's median and its ratio to the first variant's, all
# measured in this one run. Environment: SERVERS (2), REPS (3), EPOCHS (3).
# Usage: apps/bench/job_variants.sh NAME=FLAGS NAME=FLAGS...
#   e.g. SERVERS=3 apps/bench/job_variants.sh r1="--replication 1" r3="--replication 3"
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { echo "usage: $0 NAME=FLAGS NAME=FLAGS..." >&2; exit 2; }
servers=${SERVERS:-2}; reps=${REPS:-3}; epochs=${EPOCHS:-3}
bin=$here/build/bin/troupe-fmnist
export TROUPE_SECRET=${TROUPE_SECRET:-$(head -c 24 /dev/urandom | base64)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT

# One job with the extra flags; prints "wall_s test_accuracy".
job() {
  local port=$((20000 + RANDOM % 20000)) extra=("$@")
  local common=(--epochs "$epochs" --blas-threads 1 --log-level warn "${extra[@]}")
  "$bin" --role coordinator --listen 127.0.0.1:$port --servers "$servers" --workers 2 \
    --report "$tmp/r.json" "${common[@]}" > "$tmp/c.log" 2>&1 &
  local coordinator=$!
  for i in $(seq 0 $((servers - 1))); do
    "$bin" --role server --coordinator 127.0.0.1:$port --name s$i "${common[@]}" \
      > "$tmp/s$i.log" 2>&1 &
  done
  for i in 0 1; do
    "$bin" --role worker --coordinator 127.0.0.1:$port --name w$i "${common[@]}" \
      > "$tmp/w$i.log" 2>&1 &
  done
  wait $coordinator || { cat "$tmp/c.log" >&2; return 1; }
  wait
  python3 -c "import json; r = json.load(open('$tmp/r.json')); \
print(f\"{r['wall_s']:.3f} {r['test_accuracy']:.4f}\")"
}

names=(); declare -A walls
for v in "$@"; do names+=("${v%%=*}"); done
for r in $(seq "$reps"); do
  line="rep $r"
  for v in "$@"; do
    name=${v%%=*}; read -ra flags <<< "${v#*=}"
    out=$(job "${flags[@]}")
    walls[$name]+="${out%% *} "
    line+="  $name: wall_s ${out%% *} acc ${out##* }"
  done
  echo "$line"
done
args=(); for n in "${names[@]}"; do args+=("$n=${walls[$n]}"); done
python3 - "${args[@]}" <<'PY'
import statistics, sys
medians = [(a.split("=")[0], statistics.median(float(x) for x in a.split("=")[1].split()))
           for a in sys.argv[1:]]
base = medians[0][1]
print("median wall_s  " + "  ".join(f"{n} {m:.3f} ({m / base:.3f}x)" for n, m in medians))
PY
