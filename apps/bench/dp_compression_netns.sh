#!/usr/bin/env bash
# Compression where the wire, not the CPU, is the limit: the same dp job of troupe-fmnist
# across a shaped veth pair (netns_pair.sh) with fp32 Adam, bf16 buckets, 1-bit Adam and 0/1
# Adam, then fp32 and 1-bit Adam on loopback for comparison. Prints each run's step time,
# allreduce bytes and test accuracy. Needs root (ip netns, tc). Removes what it made.
# Usage: apps/bench/dp_compression_netns.sh [RATE=100mbit] [DELAY=1ms] [EPOCHS=1]
set -euo pipefail
rate=${1:-100mbit}; delay=${2:-1ms}; epochs=${3:-1}
source "$(dirname "$0")/netns_pair.sh"

echo "$shaping"
run "netns, adam (fp32)" ns
run "netns, --comm-dtype bf16" ns --comm-dtype bf16
run "netns, onebit-adam" ns --optimizer onebit-adam
run "netns, zero-one-adam" ns --optimizer zero-one-adam
run "loopback, adam (fp32)" loopback
run "loopback, onebit-adam" loopback --optimizer onebit-adam
