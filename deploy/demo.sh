#!/usr/bin/env bash
# The main job, for a fresh Debian 12 machine: installs what is missing,
# builds, and writes a sample store of synthetic compiled artifacts.
# (The daemon and client that serve get/set/fit on it are being built; until
# they land this shows the store and what each artifact holds.)
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

store="${RBLN_DEMO_STORE:-$PWD/build/demo-store}"
rm -rf "$store"
mkdir -p "$store"
for preset in tiny llama3-8b-ca12-tp4 llama3-70b-cr-tp2 gemma-hybrid-ca12; do
  build/bin/rbln-artifact-synth --preset "$preset" --out "$store/$preset"
done
echo
echo "sample store: $store"
ls -l "$store/llama3-8b-ca12-tp4"
