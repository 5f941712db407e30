#!/usr/bin/env bash
# validate.sh WORK_DIR ARGS...: runs validate.js ARGS with its npm packages,
# installed into WORK_DIR (a build directory, never the source tree) by
# `npm ci` from package-lock.json, once per lock file: the registry is needed
# for that install only, never while validating.
# Exits 77 (a skip for ctest) when node or npm is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: validate.sh WORK_DIR ARGS...}
shift

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (deploy/install-deps.sh installs it)"
    exit 77
  fi
done

mkdir -p "$work"
# Tests run in parallel: one install at a time.
exec 9>"$work/.install.lock"
flock 9
# .installed: the lock file of the last install that finished.
if ! cmp -s "$here/package-lock.json" "$work/.installed"; then
  rm -f "$work/.installed"
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2
  cp "$here/package-lock.json" "$work/.installed"
fi
flock -u 9

NODE_PATH="$work/node_modules" exec node "$here/validate.js" "$@"
