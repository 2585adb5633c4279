#!/usr/bin/env bash
# Trains the example embedded and then as a data-parallel job; fails unless both explain at
# least 99% of the test targets' variance. usage: run.sh BUILD_DIR (tests/package runs it).
set -euo pipefail
bin="${1:-build}/linear-regression"
for mode in ps dp; do
  "$bin" --mode "$mode" --workers 2 --report "report-$mode.json" --log-level warn
  r2=$(sed -n 's/.*"test_accuracy": *\([0-9.eE+-]*\).*/\1/p' "report-$mode.json" | head -1)
  awk -v r2="$r2" -v mode="$mode" 'BEGIN { printf "%s: R^2 %s\n", mode, r2; exit !(r2 >= 0.99) }'
done
