#!/usr/bin/env bash
# The whole test suite: installs what is missing, then configures, builds and
# tests in three stages: a normal build (build/), an ASan+UBSan build
# (build-asan/), and the libFuzzer targets built with clang (build-fuzz/), each
# fuzzed for RBLN_FUZZ_SECONDS (docs/fuzzing.md); then runs `bench/run --quick`
# on build/ so that the benchmark keeps building and running (it asserts
# nothing about speed; docs/performance.md). Prints each stage's wall time.
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh --for test

jobs=$(nproc)
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout, so that two clones share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=true

# run_suite DIR BUILD_TARGET CTEST_ARGS CMAKE_ARGS...: configures DIR, builds
# BUILD_TARGET ("all": everything) and runs the tests CTEST_ARGS select.
run_suite() {
  local dir=$1 target=$2 ctest_args=$3
  shift 3
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "$target"
  # shellcheck disable=SC2086 # CTEST_ARGS is a list of words.
  (cd "$dir" && ctest --output-on-failure -j "$jobs" $ctest_args)
}

# stage TITLE COMMAND...: runs COMMAND under a "== TITLE" banner and then
# prints how long it took, so that the CI time budget stays visible; a stage
# that fails (and so ends the script) still reports its time.
stage_name=""
stage_start=0
trap 'if [ -n "$stage_name" ]; then
  echo "== stage $stage_name failed after $((SECONDS - stage_start)) s"; fi' EXIT
stage() {
  stage_name=${1%%:*}
  stage_start=$SECONDS
  echo "== $1"
  shift
  "$@"
  echo "== stage $stage_name took $((SECONDS - stage_start)) s"
  stage_name=""
}

stage "normal build: build/" \
  run_suite build all "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
stage "sanitizer build (ASan+UBSan): build-asan/" \
  run_suite build-asan all "" -DCMAKE_BUILD_TYPE=Debug -DRBLN_SANITIZE=ON
# -O1 as libFuzzer's documentation advises; Debug keeps core's assert()s.
stage "fuzzing (libFuzzer, clang): build-fuzz/" \
  run_suite build-fuzz fuzzers "-R fuzz_" -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DCMAKE_CXX_COMPILER=clang++ -DRBLN_FUZZ=ON
# Fails only when the benchmark itself is broken, never on speed.
stage "benchmarks --quick: build/bench/results.json" bench/run --quick
