#!/usr/bin/env bash
# Trains the example embedded, as a data-parallel job and with its own update rule (adagrad);
# fails unless each explains at least 99% of the test targets' variance. Then a distributed
# job with adagrad whose server is troupe-fmnist, which lacks the rule: the server must refuse
# its buckets and the whole job must fail saying so.
# usage: run.sh BUILD_DIR [TROUPE_BIN] (tests/package passes the installed binaries' folder).
set -euo pipefail
bin="${1:-build}/linear-regression"
troupe_bin="${2:-$(dirname "$(command -v troupe-fmnist)")}"
check_r2() {  # report name
  r2=$(sed -n 's/.*"test_accuracy": *\([0-9.eE+-]*\).*/\1/p' "$1" | head -1)
  awk -v r2="$r2" -v name="$1" 'BEGIN { printf "%s: R^2 %s\n", name, r2; exit !(r2 >= 0.99) }'
}
for mode in ps dp; do
  "$bin" --mode "$mode" --workers 2 --report "report-$mode.json" --log-level warn
  check_r2 "report-$mode.json"
done
"$bin" --optimizer adagrad --lr 0.5 --workers 2 --report report-adagrad.json --log-level warn
check_r2 report-adagrad.json

export TROUPE_SECRET="example-$$-$RANDOM"
log=$(mktemp)
trap 'rm -f "$log"; kill ${coordinator:-} ${server:-} ${worker:-} 2>/dev/null || true' EXIT
"$bin" --role coordinator --listen 127.0.0.1:0 --servers 1 --workers 1 \
  --optimizer adagrad --log-level info >"$log" 2>&1 &
coordinator=$!
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
"$troupe_bin/troupe-fmnist" --role server --coordinator "127.0.0.1:$port" \
  --log-level warn >/dev/null 2>&1 &
server=$!
"$bin" --role worker --coordinator "127.0.0.1:$port" --log-level warn \
  >/dev/null 2>&1 &
worker=$!
timeout 60 tail --pid "$coordinator" -f /dev/null || kill "$coordinator" 2>/dev/null || true
status=0
wait "$coordinator" || status=$?
coordinator=
for p in $server $worker; do  # both end with the job; bounded all the same
  timeout 30 tail --pid "$p" -f /dev/null || kill "$p" 2>/dev/null || true
done
server= worker=
if [ "$status" -eq 0 ] || ! grep -q "no update rule 'adagrad'" "$log"; then
  cat "$log"
  echo "the job with a server that lacks adagrad did not fail as it should"
  exit 1
fi
grep "no update rule 'adagrad'" "$log" | head -2
