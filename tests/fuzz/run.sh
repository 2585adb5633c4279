#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS]: builds the libFuzzer targets with clang (TROUPE_FUZZ=ON, ASan
# and UBSan, in $FUZZ_BUILD_DIR, default build-fuzz) and runs each for SECONDS (default 20),
# starting from its committed seeds in tests/fuzz/corpus/<name>. New inputs go to a scratch
# corpus, never into the repository. Exits non-zero at the first crash, leak or timeout; the
# input that did it is left in the scratch directory, named crash-*, leak-* or timeout-*.
set -euo pipefail
seconds=${1:-20}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=(codec checkpoint options metrics)

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -DTROUPE_FUZZ=ON -DTROUPE_CUDA=OFF \
    -DTROUPE_TESTS=OFF -DTROUPE_APPS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
fi
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]/%/_fuzz}"

scratch=$(mktemp -d /tmp/troupe-fuzz.XXXXXX)
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  cp "$here/corpus/$t/"* "$scratch/$t/"
  echo "fuzz: $t for ${seconds} s"
  (cd "$scratch" && "$build/bin/${t}_fuzz" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 "$scratch/$t" \
      > "$scratch/$t.log" 2>&1) || {
    tail -40 "$scratch/$t.log"
    echo "fuzz: $t failed; its input and log are in $scratch" >&2
    exit 1
  }
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^#[0-9]+ +DONE" "$scratch/$t.log" |
    tr '\n' ' '
  echo
done
rm -rf "$scratch"
