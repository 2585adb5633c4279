#!/usr/bin/env bash
# Every GPU check in one call, for a machine with an NVIDIA GPU: configure with CUDA required,
# build, run each CUDA kernel test against its CPU twin, time the GPU DASH roots and step
# (troupe-bench dash-gpu), and print the device it ran on.
# Usage: tests/gpu/run.sh [build-dir]   (default build-gpu)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${1:-$here/build-gpu}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
cmake -S "$here" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON
cmake --build "$build_dir" -j "$(nproc)" --target adam_cuda_test dash_cuda_test gpu_stream_test troupe-bench
cd "$build_dir"
TROUPE_REQUIRE_GPU=1 ctest --output-on-failure -L gpu
# The GPU figures: batched Newton roots against cuSOLVER's eigendecomposition, the group step.
"$build_dir/bin/troupe-bench" dash-gpu --reps 5
# CPU figures of the DASH step on this machine (its many cores), for the note beside the GPU run.
"$build_dir/bin/troupe-bench" dash --reps 3
