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
# Environment: FIELDS (8), VOCABULARY (134217728 = 2^27), EXAMPLES (13000000), CAPACITY
# (10000000), FM_DIM (0), AUC_VOCABULARY (100000), AUC_EXAMPLES (400000).
# Usage: apps/bench/ctr_tables.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
fields=${FIELDS:-8}; vocabulary=${VOCABULARY:-134217728}; examples=${EXAMPLES:-13000000}
capacity=${CAPACITY:-10000000}; fm_dim=${FM_DIM:-0}
auc_vocabulary=${AUC_VOCABULARY:-100000}; auc_examples=${AUC_EXAMPLES:-400000}
bin=$here/build/bin/troupe-ctr
export TROUPE_SECRET=${TROUPE_SECRET:-$(head -c 24 /dev/urandom | base64)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT

echo "== scale: $examples streamed examples, $fields fields of $vocabulary ids, lfu at $capacity"
port=$((20000 + RANDOM % 20000))
common=(--stream --fields "$fields" --vocabulary "$vocabulary" --zipf 0 --train-examples
        "$examples" --test-examples 20000 --fm-dim "$fm_dim" --epochs 1 --evict lfu
        --capacity "$capacity" --reference=false --blas-threads 1 --log-level warn)
"$bin" --role coordinator --listen 127.0.0.1:$port --servers 2 --workers 2 \
  --report "$tmp/scale.json" "${common[@]}" > "$tmp/c.log" 2>&1 &
coordinator=$!
for i in 0 1; do
  "$bin" --role server --coordinator 127.0.0.1:$port --name s$i "${common[@]}" > "$tmp/s$i.log" 2>&1 &
done
for i in 0 1; do
  "$bin" --role worker --coordinator 127.0.0.1:$port --name w$i "${common[@]}" > "$tmp/w$i.log" 2>&1 &
done
wait $coordinator || { cat "$tmp/c.log" >&2; exit 1; }
wait
python3 - "$tmp/scale.json" "$fields" "$vocabulary" "$examples" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
fields, vocabulary, examples = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ids = fields * vocabulary
draws = examples  # per field
distinct = fields * vocabulary * (1 - math.exp(-draws / vocabulary))
print(f"ids named: about {distinct:.3g} distinct of {ids:.3g} ({draws} draws a field)")
rows = 0
for name, t in r["tables"].items():
    rows += t["rows"]
    print(f"table {name}: {t['rows']} rows held, {t['rows_evicted']} evicted, "
          f"{t['ids_not_admitted']} not admitted, {t['grads_dropped']} gradients dropped")
for s in r["servers"]:
    print(f"server {s['name']}: peak RSS {s['peak_rss_mb']:.0f} MiB, "
          f"{s['peak_rss_mb'] * 2**20 / (rows / len(r['servers'])):.0f} bytes a row held "
          "(whole process)")
print(f"pushes/s {r['updates_applied'] / r['wall_s']:.0f} ({r['updates_applied']} in "
      f"{r['wall_s']:.1f} s), test_auc {r.get('test_auc', float('nan')):.4f}")
PY

echo "== accuracy: zipf 1.2, $fields fields of $auc_vocabulary ids, $auc_examples examples"
auc() {
  "$bin" --fields "$fields" --vocabulary "$auc_vocabulary" --train-examples "$auc_examples" \
    --test-examples 20000 --fm-dim "$fm_dim" --epochs 2 --workers 2 --servers 2 \
    --reference=false --blas-threads 1 --log-level warn --report "$tmp/auc.json" "$@" \
    > "$tmp/auc.log" 2>&1 || { cat "$tmp/auc.log" >&2; exit 1; }
  python3 -c "import json; r = json.load(open('$tmp/auc.json')); \
print(f\"{r['test_auc']:.4f} {sum(t['rows'] for t in r['tables'].values())}\")"
}
full=$(auc)
tenth=$(auc --evict lfu --capacity $((fields * auc_vocabulary / 10)))
python3 - "$full" "$tenth" <<'PY'
import sys
full, tenth = (a.split() for a in sys.argv[1:])
print(f"no eviction:      test_auc {full[0]} ({full[1]} rows)")
print(f"lfu, 10% of ids:  test_auc {tenth[0]} ({tenth[1]} rows)  "
      f"difference {float(tenth[0]) - float(full[0]):+.4f} (goal: within 0.01)")
PY
