#!/usr/bin/env bash
# The installed package as a user outside this repository sees it:
#   1. `cmake --install` the build into a temporary prefix;
#   2. every installed public header compiles on its own through troupe::troupe alone, and the
#      exported troupe::kernels links no CAF;
#   3. each C++ example under apps/examples/ (python/ is tests/python's; torch_cnn only where
#      Troupe was built with libtorch) is copied out of the tree, configured with only
#      -DCMAKE_PREFIX_PATH=<prefix>, built, and run to completion by its run.sh, which is
#      given the build folder and the installed troupe-console.
# usage: package_test.sh BUILD_DIR SOURCE_DIR. Leaves nothing behind.
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
jobs=${JOBS:-2}

echo "== install into $work/prefix"
cmake --install "$build" --prefix "$work/prefix" >/dev/null

echo "== every public header on its own"
mkdir -p "$work/headers"
headers=()
for h in "$work"/prefix/include/troupe/*.hpp; do
  name=$(basename "$h" .hpp)
  printf '#include "troupe/%s.hpp"\n' "$name" >"$work/headers/$name.cpp"
  headers+=("$name.cpp")
done
[ -d "$work/prefix/include/troupe/detail" ] && { echo "detail/ headers were installed"; exit 1; }
cat >"$work/headers/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.22)
project(troupe_headers LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(troupe REQUIRED)
add_library(headers OBJECT ${headers[*]})
target_link_libraries(headers PRIVATE troupe::troupe)
if(TARGET troupe::torch)  # troupe/torch.hpp, installed only with it
  target_link_libraries(headers PRIVATE troupe::torch)
endif()
# The kernels link no CAF: nothing in troupe::kernels' link closure is a CAF target.
set(pending troupe::kernels)
set(seen)
while(pending)
  list(POP_FRONT pending lib)
  if(lib IN_LIST seen OR NOT TARGET \${lib})
    continue()
  endif()
  list(APPEND seen \${lib})
  if(lib MATCHES "^CAF::")
    message(FATAL_ERROR "troupe::kernels links \${lib}")
  endif()
  get_target_property(deps \${lib} INTERFACE_LINK_LIBRARIES)
  if(deps)
    string(REGEX REPLACE "\\\\\$<LINK_ONLY:([^>]*)>" "\\\\1" deps "\${deps}")
    list(APPEND pending \${deps})
  endif()
endwhile()
message(STATUS "troupe::kernels links: \${seen}")
CMAKE
cmake -S "$work/headers" -B "$work/headers/build" -DCMAKE_PREFIX_PATH="$work/prefix" | grep 'kernels links'
cmake --build "$work/headers/build" -j "$jobs" >/dev/null
echo "${#headers[@]} headers compile on their own"

for example in "$source"/apps/examples/*/; do
  [ -f "$example/CMakeLists.txt" ] || continue  # python/: run by tests/python instead
  name=$(basename "$example")
  if grep -q 'troupe::torch' "$example/CMakeLists.txt" &&
    ! grep -q 'TROUPE_HAVE_TORCH ON' "$work"/prefix/lib*/cmake/troupe/troupeConfig.cmake; then
    echo "== example $name: skipped (Troupe built without libtorch)"
    continue
  fi
  echo "== example $name, built outside the tree"
  cp -r "$example" "$work/$name"
  rm -rf "$work/$name/build"
  cmake -S "$work/$name" -B "$work/$name/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
  cmake --build "$work/$name/build" -j "$jobs" >/dev/null
  (cd "$work/$name" && timeout 300 ./run.sh build "$work/prefix/bin")
done
echo "package_test: passed"
