#!/usr/bin/env bash
# Streams 200k events through 3 learners, one of which crashes once and is restarted by its
# supervisor, with the console endpoint on: troupe-console's tree must show the learners (one
# restart) and the buckets. Fails unless the last window's prequential accuracy reaches 0.9.
# usage: run.sh BUILD_DIR [TROUPE_BIN] (tests/package passes the installed binaries' folder).
set -euo pipefail
bin="${1:-build}/online-learning"
console="${2:+$2/}troupe-console"
secret="example-$$-$RANDOM"
log=$(mktemp)
trap 'rm -f "$log"; [ -n "${app:-}" ] && kill "$app" 2>/dev/null || true' EXIT
"$bin" --workers 3 --events 200000 --crash-after 40 --min-accuracy 0.9 \
  --listen 127.0.0.1:0 --secret "$secret" --linger 60 >"$log" 2>&1 &
app=$!
for _ in $(seq 100); do  # the stream ends, then the node lingers for consoles
  grep -q 'last accuracy' "$log" && break
  kill -0 "$app" 2>/dev/null || break
  sleep 0.2
done
port=$(sed -n 's/.*console endpoint on 127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
tree=$("$console" --connect "127.0.0.1:$port" --secret "$secret" -c tree)
echo "$tree"
echo "$tree" | grep -Eq 'learner-0 +learner .* live +1 ' || { echo "no restarted learner-0"; exit 1; }
echo "$tree" | grep -Eq 'bucket-1 +bucket .* live ' || { echo "no bucket-1"; exit 1; }
kill -TERM "$app"
status=0
wait "$app" || status=$?
app=
cat "$log"
exit "$status"
