#!/usr/bin/env bash
# The whole test suite: installs what is missing, then configures, builds and
# runs ctest twice: a normal build (build/) and an ASan+UBSan build
# (build-asan/). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh

jobs=$(nproc)
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"

run_suite() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  (cd "$dir" && ctest --output-on-failure -j "$jobs")
}

echo "== normal build: build/"
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== sanitizer build (ASan+UBSan): build-asan/"
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DRBLN_SANITIZE=ON
