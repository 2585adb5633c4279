#!/usr/bin/env bash
# Packs the GPU checks for a GPU machine that lacks this project's libraries. The H200 that the
# device tool lends has CUDA 13 but no CAF, Cap'n Proto, fmt, Boost.Test or OpenBLAS, and no
# package archive, so tests/gpu/run.sh cannot build there. This script builds the checks here
# (CUDA compiles and links here), then writes .gpu/troupe-gpu.tar.gz: the GPU test programs,
# troupe-bench, every shared library they load except CUDA's and the driver's, and the C
# library with its loader, so that they run whatever C library the GPU machine has.
# Usage: tests/gpu/bundle.sh [build-dir]   (default build: used as configured, if it is)
# Then on the GPU machine (device tool: carry [".gpu"]): tests/gpu/run.sh --bundle
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${1:-$here/build}
programs=(adam_cuda_test nesterov_cuda_test dash_cuda_test gpu_stream_test dash_device_test nccl_collective_test troupe-bench)

# An existing build is used as it is configured (it must have found nvcc); a new one is made
# with CUDA required.
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S "$here" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)" --target "${programs[@]}" || {
  echo "bundle.sh: cannot build the GPU checks in $build_dir (configured without CUDA?)" >&2
  exit 1
}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/troupe-gpu/bin" "$stage/troupe-gpu/lib"
for program in "${programs[@]}"; do
  cp "$build_dir/bin/$program" "$stage/troupe-gpu/bin/"
done

# "name => /path (address)" lines of ldd; CUDA's libraries and the driver stay behind (the GPU
# machine's own toolkit and driver must match each other) and are listed for run.sh to find
# there; everything else travels under the name the programs ask for.
libraries=$(ldd "${programs[@]/#/$build_dir/bin/}")
if grep -q "not found" <<<"$libraries"; then
  echo "bundle.sh: the programs miss libraries here:" >&2
  grep "not found" <<<"$libraries" >&2
  exit 1
fi
awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$libraries" | sort -u |
  while read -r name path; do
    case "$path" in
      /usr/local/cuda*)
        echo "$name" >>"$stage/troupe-gpu/lib/cuda-libraries.txt"
        continue
        ;;
    esac
    case "$name" in
      libcuda.so* | libnvidia*) continue ;;
    esac
    cp -L "$path" "$stage/troupe-gpu/lib/$name"
  done
echo libcuda.so.1 >>"$stage/troupe-gpu/lib/cuda-libraries.txt"  # the driver, loaded by cudart
cp -L /lib64/ld-linux-x86-64.so.2 "$stage/troupe-gpu/lib/"

mkdir -p "$here/.gpu"
tar -C "$stage" -czf "$here/.gpu/troupe-gpu.tar.gz" troupe-gpu
echo "wrote $here/.gpu/troupe-gpu.tar.gz ($(du -h "$here/.gpu/troupe-gpu.tar.gz" | cut -f1)):"
ls "$stage/troupe-gpu/bin" "$stage/troupe-gpu/lib" | tr '\n' ' '
echo
