#!/usr/bin/env bash
# Memory over a long job: a 5-process troupe-fmnist job (a coordinator, 2 servers, 2 workers,
# --replication 2) on loopback, each process's RSS sampled every SAMPLE_S seconds. After a
# warm-up of WARMUP_MIN minutes, each process's growth is the least-squares slope of its RSS
# over the rest of the run, in MiB an hour, printed beside the limit (2 MiB an hour). Not run by
# ctest (it takes SOAK_MIN minutes); run by hand after changing what a long job keeps.
#   tests/soak/memory_soak.sh [BUILD_DIR]     SOAK_MIN (35), WARMUP_MIN (5), SAMPLE_S (30)
# Exit 0 when every process is within the limit; the samples stay in $OUT (default a temp dir).
set -uo pipefail
build=${1:-build}
bin=$build/bin/troupe-fmnist
soak_min=${SOAK_MIN:-35}
warmup_min=${WARMUP_MIN:-5}
sample_s=${SAMPLE_S:-30}
limit_mib_h=2
out=${OUT:-$(mktemp -d /tmp/troupe-memory-soak.XXXXXX)}
port=$((20000 + RANDOM % 20000))
export TROUPE_SECRET=memory-soak-secret-of-some-length
common=(--coordinator 127.0.0.1:$port --workers 2 --servers 2 --replication 2
        --epochs 100000 --log-level warn --stall-timeout 0)
names=(coordinator server-0 server-1 worker-0 worker-1)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

"$bin" --role coordinator --listen 127.0.0.1:$port "${common[@]}" > "$out/coordinator.log" 2>&1 &
pids+=($!)
for i in 0 1; do
  "$bin" --role server --name server-$i "${common[@]}" > "$out/server-$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  "$bin" --role worker --name worker-$i "${common[@]}" > "$out/worker-$i.log" 2>&1 &
  pids+=($!)
done

rss_mib() { awk '/^VmRSS:/ { printf "%.3f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null; }
samples=$out/rss.tsv
echo -e "t_s\t${names[*]}" | tr ' ' '\t' > "$samples"
start=$(date +%s)
end=$((start + soak_min * 60))
while [ "$(date +%s)" -lt "$end" ]; do
  row="$(( $(date +%s) - start ))"
  for p in "${pids[@]}"; do
    r=$(rss_mib "$p")
    if [ -z "$r" ]; then
      echo "a process of the job ended early; logs in $out" >&2
      exit 1
    fi
    row+=$'\t'$r
  done
  echo "$row" >> "$samples"
  sleep "$sample_s"
done

echo "memory soak: ${soak_min} min, warm-up ${warmup_min} min, a sample every ${sample_s} s ($samples)"
awk -v warm=$((warmup_min * 60)) -v limit=$limit_mib_h -F'\t' '
  NR == 1 { for (i = 2; i <= NF; ++i) name[i] = $i; cols = NF; next }
  $1 >= warm {
    n++; sx += $1; sxx += $1 * $1
    for (i = 2; i <= cols; ++i) { sy[i] += $i; sxy[i] += $1 * $i; if (!(i in first)) first[i] = $i; last[i] = $i }
  }
  END {
    bad = 0
    for (i = 2; i <= cols; ++i) {
      slope = (n * sxy[i] - sx * sy[i]) / (n * sxx - sx * sx) * 3600
      verdict = slope < limit ? "within" : "OVER"
      if (slope >= limit) bad = 1
      printf "  %-12s RSS %7.1f -> %7.1f MiB, growth %+6.2f MiB/h (limit %d): %s\n", name[i], first[i], last[i], slope, limit, verdict
    }
    exit bad
  }' "$samples"
