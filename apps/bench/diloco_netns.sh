#!/usr/bin/env bash
# DiLoCo where the link is slow: the Fashion-MNIST MLP on 2 workers, each behind its own shaped
# link to the hub that holds the coordinator and the servers (netns_pair.sh, hub=1), at most
# EPOCHS epochs a run: --mode dp (Adam, then 1-bit Adam), --mode ps (async), and --mode diloco
# at H = 10, 20 and 100 with F = 1 and 4, async beside bsp; then worker 1 slowed 3x, diloco at
# H = 20 async beside bsp. Prints, for each run, when test accuracy first reached 0.86 (an
# epoch's end), the last epoch's accuracy and the bytes per epoch that crossed the links. With
# FEW=1 only dp, ps and diloco H = 20 run (the 1 Gbit/s pass). Needs root (ip netns, tc).
# Removes what it made. Usage: apps/bench/diloco_netns.sh [RATE=100mbit] [DELAY=20ms] [EPOCHS=10]
set -euo pipefail
rate=${1:-100mbit}; delay=${2:-20ms}; epochs=${3:-10}; hub=1
source "$(dirname "$0")/netns_pair.sh"

echo "$shaping on each worker's link; $epochs epochs at most; batch 64 per worker"
run_hub "dp, adam" --mode dp
[ "${FEW:-0}" = 1 ] || run_hub "dp, onebit-adam" --mode dp --optimizer onebit-adam
run_hub "ps, async" --mode ps
for h in 10 20 100; do
  [ "${FEW:-0}" = 1 ] && [ "$h" != 20 ] && continue
  for f in 1 4; do
    [ "${FEW:-0}" = 1 ] && [ "$f" != 1 ] && continue
    run_hub "diloco H=$h F=$f, async" --mode diloco --sync-every "$h" --fragments "$f"
    run_hub "diloco H=$h F=$f, bsp" --mode diloco --sync-every "$h" --fragments "$f" \
      --consistency bsp
  done
done
run_hub "diloco H=20, worker 1 3x slower, async" --mode diloco --sync-every 20 \
  --worker-slowdown 1:3
run_hub "diloco H=20, worker 1 3x slower, bsp" --mode diloco --sync-every 20 \
  --worker-slowdown 1:3 --consistency bsp
