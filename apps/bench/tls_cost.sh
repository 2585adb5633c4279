#!/usr/bin/env bash
# What mutual TLS costs the five-process fmnist job (1 coordinator, 2 servers, 2 workers on
# loopback): the same job with and without --tls-dir, alternating, REPS times each (see
# job_variants.sh). Usage: apps/bench/tls_cost.sh TLS_DIR [REPS=3] [EPOCHS=3]
set -euo pipefail
tls_dir=${1:?usage: $0 TLS_DIR [REPS] [EPOCHS]}
REPS=${2:-3} EPOCHS=${3:-3} SERVERS=2 exec "$(dirname "$0")/job_variants.sh" \
  plain="" tls="--tls-dir $tls_dir"
