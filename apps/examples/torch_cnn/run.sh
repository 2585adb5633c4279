#!/usr/bin/env bash
# Trains the libtorch CNN on a slice of Fashion-MNIST: embedded on the parameter service,
# embedded as a data-parallel group, and as a dp group of two worker processes beside a
# coordinator process; fails unless each finishes with a test accuracy of at least 0.5.
# usage: run.sh BUILD_DIR [TROUPE_BIN] (tests/package passes the installed binaries' folder).
set -euo pipefail
bin="${1:-build}/torch-cnn"
small=(--train-limit 2560 --test-limit 500 --epochs 2 --batch 32 --torch-threads 1
       --blas-threads 1)
check() {  # report name
  acc=$(sed -n 's/.*"test_accuracy": *\([0-9.eE+-]*\).*/\1/p' "$1" | head -1)
  awk -v a="$acc" -v name="$1" 'BEGIN { printf "%s: accuracy %s\n", name, a; exit !(a >= 0.5) }'
}
"$bin" "${small[@]}" --workers 2 --report report-ps.json --log-level warn
check report-ps.json
"$bin" "${small[@]}" --mode dp --workers 2 --report report-dp.json --log-level warn
check report-dp.json
if "$bin" "${small[@]}" --device cuda --log-level warn 2>device.log; then
  grep -q . device.log || true  # a machine with a GPU trains there: nothing to refuse
else
  grep -q "no usable GPU" device.log || { cat device.log; exit 1; }
fi

export TROUPE_SECRET="example-$$-$RANDOM"
log=$(mktemp)
trap 'rm -f "$log"; kill ${coordinator:-} ${w0:-} ${w1:-} 2>/dev/null || true' EXIT
"$bin" "${small[@]}" --mode dp --role coordinator --listen 127.0.0.1:0 --workers 2 \
  --report report-group.json --log-level info >"$log" 2>&1 &
coordinator=$!
for _ in $(seq 300); do
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; exit 1; }
"$bin" "${small[@]}" --mode dp --role worker --coordinator "127.0.0.1:$port" --name w0 \
  --log-level warn >/dev/null 2>&1 &
w0=$!
"$bin" "${small[@]}" --mode dp --role worker --coordinator "127.0.0.1:$port" --name w1 \
  --log-level warn >/dev/null 2>&1 &
w1=$!
timeout 300 tail --pid "$coordinator" -f /dev/null || kill "$coordinator" 2>/dev/null || true
status=0
wait "$coordinator" || status=$?
coordinator=
for p in $w0 $w1; do  # both end with the job; bounded all the same
  timeout 60 tail --pid "$p" -f /dev/null || kill "$p" 2>/dev/null || true
done
w0= w1=
[ "$status" -eq 0 ] || { cat "$log"; exit 1; }
check report-group.json
