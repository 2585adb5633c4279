#!/usr/bin/env bash
# Embedding tables at scale (issue 59), all measured in this one run:
#  1. scale: troupe-ctr as separate processes on loopback (1 coordinator, 2 servers, 2
#     workers), a streamed click log (--stream, uniform ids: --zipf 0) over FIELDS fields of
#     VOCABULARY ids each, EXAMPLES examples, LFU eviction at CAPACITY rows a table,
#     --reference=false. Prints the distinct ids the log named (estimated from the draws),
#     rows held and evicted per table, each server's peak RSS and bytes a row held, and pushes
#     a second (updates applied / wall_s).
#  2. accuracy: in one process, a Zipf(1.2) log over AUC_VOCABULARY ids a field whose tables
#     fit whole, trained with no eviction and with LFU at 10% of the ids: test_auc of each.
#     Each with its pushes a second: eviction's cost in a job.
# Environment: FIELDS (8), VOCABULARY (134217728 = 2^27), EXAMPLES (13000000), CAPACITY
# (10000000), FM_DIM (0), AUC_VOCABULARY (100000), AUC_EXAMPLES (400000), PARTS ("scale
# accuracy": the parts to run).
# Usage: apps/bench/ctr_tables.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
fields=${FIELDS:-8}; vocabulary=${VOCABULARY:-134217728}; examples=${EXAMPLES:-13000000}
capacity=${CAPACITY:-10000000}; fm_dim=${FM_DIM:-0}
auc_vocabulary=${AUC_VOCABULARY:-100000}; auc_examples=${AUC_EXAMPLES:-400000}
parts=${PARTS:-scale accuracy}
bin=$here/build/bin/troupe-ctr
export TROUPE_SECRET=${TROUPE_SECRET:-$(head -c 24 /dev/urandom | base64)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT

# One job of separate processes with `examples` examples; its report in $tmp/$1.json.
scale_job() {
  local name=$1 examples=$2 port=$((20000 + RANDOM % 20000))
  local common=(--stream --fields "$fields" --vocabulary "$vocabulary" --zipf 0
                --train-examples "$examples" --test-examples 20000 --fm-dim "$fm_dim" --epochs 1
                --evict lfu --capacity "$capacity" --reference=false --blas-threads 1
                --log-level warn)
  "$bin" --role coordinator --listen 127.0.0.1:$port --servers 2 --workers 2 \
    --report "$tmp/$name.json" "${common[@]}" > "$tmp/c.log" 2>&1 &
  local coordinator=$!
  for i in 0 1; do
    "$bin" --role server --coordinator 127.0.0.1:$port --name s$i "${common[@]}" \
      > "$tmp/s$i.log" 2>&1 &
  done
  for i in 0 1; do
    "$bin" --role worker --coordinator 127.0.0.1:$port --name w$i "${common[@]}" \
      > "$tmp/w$i.log" 2>&1 &
  done
  wait $coordinator || { cat "$tmp/c.log" >&2; exit 1; }
  wait
}

if [[ $parts == *scale* ]]; then
echo "== scale: $examples streamed examples, $fields fields of $vocabulary ids, lfu at $capacity"
scale_job baseline 2560  # the servers' memory with (almost) no rows
scale_job scale "$examples"
python3 - "$tmp/scale.json" "$tmp/baseline.json" "$fields" "$vocabulary" "$examples" <<'PY'
import json, math, sys
r, base = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
fields, vocabulary, examples = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
distinct = fields * vocabulary * (1 - math.exp(-examples / vocabulary))
print(f"ids named: about {distinct:.3g} distinct of {fields * vocabulary:.3g} "
      f"({examples} uniform draws a field)")
rows = 0
for name, t in r["tables"].items():
    rows += t["rows"]
    print(f"table {name}: {t['rows']} rows held, {t['rows_evicted']} evicted, "
          f"{t['ids_not_admitted']} not admitted, {t['grads_dropped']} gradients dropped")
before = {s["name"]: s["peak_rss_mb"] for s in base["servers"]}
per_server = rows / len(r["servers"])
for s in r["servers"]:
    grown = (s["peak_rss_mb"] - before.get(s["name"], 0)) * 2**20
    print(f"server {s['name']}: peak RSS {s['peak_rss_mb']:.0f} MiB "
          f"({before.get(s['name'], 0):.0f} MiB without rows), about {per_server:.3g} rows: "
          f"{grown / per_server:.0f} bytes a row")
print(f"pushes/s {r['updates_applied'] / r['wall_s']:.0f} ({r['updates_applied']} in "
      f"{r['wall_s']:.1f} s), test_auc {r.get('test_auc', float('nan')):.4f}")
PY
fi

[[ $parts == *accuracy* ]] || exit 0
echo "== accuracy: zipf 1.2, $fields fields of $auc_vocabulary ids, $auc_examples examples"
auc() {
  "$bin" --fields "$fields" --vocabulary "$auc_vocabulary" --train-examples "$auc_examples" \
    --test-examples 20000 --fm-dim "$fm_dim" --epochs 2 --workers 2 --servers 2 \
    --reference=false --blas-threads 1 --log-level warn --report "$tmp/auc.json" "$@" \
    > "$tmp/auc.log" 2>&1 || { cat "$tmp/auc.log" >&2; exit 1; }
  python3 -c "import json; r = json.load(open('$tmp/auc.json')); \
print(f\"{r['test_auc']:.4f} {sum(t['rows'] for t in r['tables'].values())} \
{r['updates_applied'] / r['wall_s']:.0f}\")"
}
full=$(auc)
tenth=$(auc --evict lfu --capacity $((fields * auc_vocabulary / 10)))
python3 - "$full" "$tenth" <<'PY'
import sys
full, tenth = (a.split() for a in sys.argv[1:])
print(f"no eviction:      test_auc {full[0]} ({full[1]} rows), pushes/s {full[2]}")
print(f"lfu, 10% of ids:  test_auc {tenth[0]} ({tenth[1]} rows), pushes/s {tenth[2]} "
      f"({float(tenth[2]) / float(full[2]):.2f}x)  "
      f"difference {float(tenth[0]) - float(full[0]):+.4f} (goal: within 0.01)")
PY
