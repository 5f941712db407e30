#!/usr/bin/env bash
# The main job, for a fresh Debian 12 machine: installs what is missing,
# builds, writes a sample store of three synthetic compiled artifacts into
# build/demo/store, starts rbln-artifactd on it, runs through rbln-artifact:
# get, set to 12, fit to 80% in place, fit to 10GB into a new directory, get
# of that copy, --describe and --list; then stops the daemon and prints its
# log.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

deploy/install-deps.sh --for demo
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# The programs and their man pages: everything `cmake --install build`
# installs (docs/installing.md).
targets=(rbln-artifactd rbln-artifact rbln-artifact-synth)
# grep reads all of it (-q would stop early, and ninja would complain).
if cmake --build build --target help | grep 'rbln_man_pages: phony' >/dev/null; then
  targets+=(rbln_man_pages)
fi
cmake --build build -j "$(nproc)" --target "${targets[@]}"
bin=$root/build/bin

demo=${RBLN_DEMO_DIR:-$root/build/demo}
rm -rf "$demo"
mkdir -p "$demo/store"
for preset in llama3-8b-ca12-tp4 llama3-70b-cr-tp2 gemma-hybrid-ca12; do
  "$bin/rbln-artifact-synth" --preset "$preset" --out "$demo/store/$preset"
done
mv "$demo/store/llama3-8b-ca12-tp4" "$demo/store/my_artifact"

socket=unix:$demo/rbln-artifactd.sock
"$bin/rbln-artifactd" --store "$demo/store" --listen "$socket" \
  2>"$demo/rbln-artifactd.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  [ -S "$demo/rbln-artifactd.sock" ] && break
  sleep 0.1
done

run() {
  echo
  echo "\$ rbln-artifact $*"
  "$bin/rbln-artifact" --server "$socket" "$@"
}

cd "$demo/store"
run --get-kvcache-num-blocks --model-id ./my_artifact
run --set-kvcache-num-blocks 12 --model-id ./my_artifact
run --set-memory-budget 0.8 --model-id ./my_artifact
run --set-memory-budget 10GB --model-id ./my_artifact --output-dir ./my_artifact_10gb
run --get-kvcache-num-blocks --model-id ./my_artifact_10gb
run --describe --model-id ./my_artifact
run --list

kill -TERM $daemon
wait $daemon
trap - EXIT
echo
echo "daemon log ($demo/rbln-artifactd.log):"
cat "$demo/rbln-artifactd.log"
