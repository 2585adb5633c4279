#!/usr/bin/env bash
# From a fresh clone to a running job or a passing test suite:
#   cmake/bootstrap.sh run [troupe-fmnist flags]   installs what is missing, builds the trainer
#                                                  (troupe-fmnist and what it links), trains
#   cmake/bootstrap.sh test                        installs what is missing, builds everything,
#                                                  runs ctest
# Dependencies come from Debian's archive; apt-get runs (as root, or through sudo) only when a
# package is missing. `test` also makes BUILD_DIR/venv (Debian's Python and packages, plus the
# tensorboard package from PyPI, whose reader the TensorBoard test uses). BUILD_DIR (default
# build) and JOBS (default: cores) may be set.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$here/build}
jobs=${JOBS:-$(nproc)}
packages=(cmake g++ make pkg-config libcaf-dev capnproto libcapnp-dev libfmt-dev
          libboost-test-dev libopenblas-dev libssl-dev zlib1g-dev dataset-fashion-mnist
          libgloo-dev nlohmann-json3-dev libedit-dev python3 clang-14 libfuzzer-14-dev
          iproute2 nftables python3-dev pybind11-dev python3-torch python3-numpy libtorch-dev
          python3-venv python3-torchvision slurm-wlm munge chromium)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "bootstrap: installing ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}"
}

# The tests' Python: Debian's, with its packages, and tensorboard from PyPI. A failed download
# leaves the venv without it (the TensorBoard test then says it is skipped).
python_venv() {
  local venv=$build_dir/venv
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -c 'import tensorboard' 2>/dev/null ||
    "$venv/bin/python" -m pip install -q tensorboard ||
    echo "bootstrap: tensorboard could not be installed; its test will be skipped"
}

# build [TARGET]: configures, then builds TARGET (and what it links), or everything.
build() {
  cmake -S "$here" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build_dir" -j "$jobs" ${1:+--target "$1"}
}

case "${1:-}" in
  run)
    shift
    install_missing
    build troupe-fmnist
    exec "$build_dir/bin/troupe-fmnist" "$@"
    ;;
  test)
    install_missing
    mkdir -p "$build_dir"
    python_venv
    build
    cd "$build_dir"
    exec ctest --output-on-failure --timeout 600
    ;;
  *)
    echo "usage: $0 run [troupe-fmnist flags] | test" >&2
    exit 2
    ;;
esac
