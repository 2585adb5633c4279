#!/usr/bin/env bash
# Every GPU check in one call, for a machine with an NVIDIA GPU: run each CUDA kernel test
# against its CPU twin, time the GPU DASH roots and step (troupe-bench dash-gpu) and the CPU
# DASH step, and print the device it ran on. Exits non-zero when any check fails.
# Usage:
#   tests/gpu/run.sh [build-dir]   configure with CUDA required and build here first (needs the
#                                  project's libraries on this machine; default build-gpu)
#   tests/gpu/run.sh --bundle      run the programs that tests/gpu/bundle.sh packed into
#                                  .gpu/troupe-gpu.tar.gz on another machine (the device tool's
#                                  H200, which has CUDA but none of the project's libraries)
# TROUPE_REQUIRE_GPU=1 (the default here) makes a missing GPU a failure instead of a skip.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tests=(adam_cuda_test nesterov_cuda_test dash_cuda_test gpu_stream_test dash_device_test nccl_collective_test)
export TROUPE_REQUIRE_GPU=${TROUPE_REQUIRE_GPU:-1}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

# The directory holding `library` on this machine: CUDA's toolkit, the driver's mount, or the
# CUDA libraries that Python wheels carry; empty when none does.
library_dir() {
  local library=$1 found
  found=$(ldconfig -p 2>/dev/null | awk -v l="$library" '$1 == l && /x86-64/ {print $NF; exit}')
  if [[ -z "$found" ]]; then
    # (NCCL may come only with a Python wheel: nvidia-nccl under site- or dist-packages.)
    found=$(find /usr/local/cuda/ /usr/local/nvidia/ /usr/lib/x86_64-linux-gnu/ /opt/ \
      /usr/local/lib/ /usr/lib/python3/ -name "$library" 2>/dev/null | head -n 1)
  fi
  [[ -n "$found" ]] && dirname "$found"
}

if [[ "${1:-}" == "--bundle" ]]; then
  bundle=$here/.gpu/troupe-gpu.tar.gz
  [[ -f "$bundle" ]] || { echo "no $bundle: run tests/gpu/bundle.sh first" >&2; exit 2; }
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' EXIT
  tar -C "$unpacked" -xzf "$bundle"
  root=$unpacked/troupe-gpu
  search=$root/lib
  # The CUDA libraries the programs were linked with (bundle.sh lists them), from this machine.
  for library in $(cat "$root/lib/cuda-libraries.txt"); do
    if ! dir=$(library_dir "$library"); then
      echo "this machine lacks $library" >&2
      [[ "$library" == libcuda.so.1 ]] || exit 2  # without the driver: "no GPU"
      continue
    fi
    [[ ":$search:" == *":$dir:"* ]] || search=$search:$dir
  done
  echo "libraries from $search"
  # The C library: this machine's own when it is at least as new as the packed one (its CUDA
  # libraries, NCCL above all, may need its newer symbols), else the packed loader and C library.
  packed_glibc=$("$root/lib/ld-linux-x86-64.so.2" --version | awk 'NR == 1 {sub(/\.$/, "", $NF); print $NF}')
  own_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  newest=$(printf '%s\n%s\n' "$packed_glibc" "${own_glibc:-0}" | sort -V | tail -n 1)
  if [[ -n "$own_glibc" && "$newest" == "$own_glibc" ]]; then
    echo "C library: this machine's $own_glibc (packed: $packed_glibc)"
    rm -f "$root"/lib/ld-linux* "$root"/lib/lib{c,m,dl,pthread,rt,resolv,util,anl,nsl}.so.*
    program() { LD_LIBRARY_PATH="$search" "$root/bin/$1" "${@:2}"; }
  else
    echo "C library: the packed $packed_glibc (this machine's: ${own_glibc:-unknown})"
    program() { "$root/lib/ld-linux-x86-64.so.2" --library-path "$search" "$root/bin/$1" "${@:2}"; }
  fi
else
  build_dir=${1:-$here/build-gpu}
  cmake -S "$here" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON || exit 1
  cmake --build "$build_dir" -j "$(nproc)" --target "${tests[@]}" troupe-bench || exit 1
  program() { "$build_dir/bin/$1" "${@:2}"; }
fi

failed=()
for test in "${tests[@]}"; do
  echo "== $test"
  program "$test" --log_level=message || failed+=("$test")
done
# The GPU figures: batched Newton roots against cuSOLVER's eigendecomposition, the group step.
echo "== troupe-bench dash-gpu"
program troupe-bench dash-gpu --reps 5 || failed+=("dash-gpu")
# CPU figures of the DASH step on this machine (its many cores), for the note beside the GPU run.
echo "== troupe-bench dash"
program troupe-bench dash --reps 3 || failed+=("dash")

if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all GPU checks passed"
