#!/usr/bin/env bash
# tests/sanitize.sh: builds the whole project with AddressSanitizer and UndefinedBehaviorSanitizer
# (gcc, CUDA off, in $ASAN_BUILD_DIR, default build-asan) and runs the unit and integration
# tests under them; child processes (the apps the integration tests start) run instrumented
# too. Any report fails its test. tests/lsan.supp and tests/ubsan.supp list what is
# suppressed, all of it inside third-party libraries and headers. Not part of CI (it takes about half an hour on two cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${ASAN_BUILD_DIR:-$root/build-asan}
cmake -S "$root" -B "$build" -DTROUPE_SANITIZE=ON -DTROUPE_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}"
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$root/tests/ubsan.supp"
cd "$build"
exec ctest --output-on-failure -LE gpu -E package_test "$@"
