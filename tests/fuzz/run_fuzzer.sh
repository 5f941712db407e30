#!/bin/sh
# Runs one libFuzzer target for ctest (tests/fuzz/CMakeLists.txt):
#   run_fuzzer.sh FUZZER WORK_DIR SEED_DIR [libFuzzer flags...]
# The fuzzer reads SEED_DIR but writes only below WORK_DIR: what it finds
# interesting to WORK_DIR/corpus (kept between runs; delete it to start over
# from the seeds), a crashing input to WORK_DIR/findings/. Its exit status,
# non-zero on any finding, is this script's.
set -eu
fuzzer=$1
work=$2
seeds=$3
shift 3
mkdir -p "$work/corpus" "$work/findings"
exec "$fuzzer" "$@" -artifact_prefix="$work/findings/" "$work/corpus" "$seeds"
