#!/usr/bin/env bash
# The exactly-once kill schedule (tests/integration/exactly_once_test.cpp) over many seeds: each
# seed is another schedule of 5 kills (workers and a server, a replacement after each). Not run
# by ctest; run by hand after changing how pushes, chunks or failover are counted.
#   tests/soak/exactly_once_soak.sh [BUILD_DIR] [SEED ...]     (default: build, seeds 1..10)
set -uo pipefail
build=${1:-build}
shift || true
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(1 2 3 4 5 6 7 8 9 10)
failed=()
for seed in "${seeds[@]}"; do
  if TROUPE_SOAK_SEED=$seed "$build/bin/exactly_once_test" \
       -t kills_with_replacements_apply_every_chunk_once_per_bucket --log_level=message > /tmp/soak-$seed.log 2>&1; then
    echo "seed $seed: passed ($(grep -o 'duplicate pushes acknowledged: [0-9]*' /tmp/soak-$seed.log))"
    rm -f /tmp/soak-$seed.log
  else
    echo "seed $seed: FAILED (log: /tmp/soak-$seed.log)"
    failed+=("$seed")
  fi
done
[ ${#failed[@]} -eq 0 ] && echo "all ${#seeds[@]} seeds passed" && exit 0
echo "failed seeds: ${failed[*]}"
exit 1
