#!/usr/bin/env bash
# Overlap where the wire, not the CPU, is the limit: two network namespaces joined by a veth
# pair shaped with tc netem (RATE, DELAY), the coordinator and worker 0 in one, worker 1 in
# the other (tbf, rate only, where the kernel has no netem), a dp job with several gradient buckets, once reduced while backward runs and
# once after it (--no-overlap), and once on loopback for comparison. Prints the step time and
# the report's overlap of each. Needs root (ip netns, tc). Removes what it made.
# Usage: apps/bench/dp_overlap_netns.sh [RATE=1gbit] [DELAY=1ms] [BUCKET_MB=0.25] [EPOCHS=1]
set -euo pipefail
rate=${1:-1gbit}; delay=${2:-1ms}; bucket=${3:-0.25}; epochs=${4:-1}
source "$(dirname "$0")/netns_pair.sh"

echo "$shaping, --bucket-mb $bucket"
run "netns, overlap" ns --bucket-mb "$bucket"
run "netns, --no-overlap" ns --bucket-mb "$bucket" --no-overlap
run "netns, one bucket (25 MiB)" ns
run "loopback, overlap" loopback --bucket-mb "$bucket"
run "loopback, --no-overlap" loopback --bucket-mb "$bucket" --no-overlap
