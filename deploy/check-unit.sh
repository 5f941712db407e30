#!/usr/bin/env bash
# Checks deploy/rbln-artifactd.service as systemd reads it: `systemd-analyze
# verify` (no unknown keys, bad values or missing programs) and `systemd-analyze
# security` (an exposure of 3.0 or better). Needs no running systemd; exits 77
# (a skip) only where systemd-analyze is not installed. The drop-ins that
# docs/deploying.md shows are checked the same way, one at a time.
#   RBLN_BIN_DIR=build/bin deploy/check-unit.sh [UNIT]
set -euo pipefail

unit=${1:-$(dirname "$0")/rbln-artifactd.service}
bin_dir=${RBLN_BIN_DIR:?set RBLN_BIN_DIR to the directory of the built rbln-artifactd}

if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze is not installed (Debian: apt install systemd); the unit is not checked"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# verify wants ExecStart's program to exist: a copy of the unit runs the
# built binary instead of the packaged /usr/sbin/rbln-artifactd.
copy=$tmp/rbln-artifactd.service
sed "s#^ExecStart=/usr/sbin/rbln-artifactd #ExecStart=$bin_dir/rbln-artifactd #" "$unit" >"$copy"
if ! grep -q "^ExecStart=$bin_dir/rbln-artifactd " "$copy"; then
  echo "FAIL: $unit: no 'ExecStart=/usr/sbin/rbln-artifactd ' line to check" >&2
  exit 1
fi

# Both checks read drop-ins from rbln-artifactd.service.d beside the copy.
check() {
  local what=$1 out
  # --man=no: the man page in Documentation= comes with the package, and is
  # not installed where the unit is checked. verify exits 0 on some warnings
  # (an unknown key), so any output fails the check.
  if ! out=$(systemd-analyze verify --man=no "$copy" 2>&1) || [ -n "$out" ]; then
    echo "FAIL: systemd-analyze verify $what:" >&2
    echo "$out" >&2
    exit 1
  fi
  # --threshold=30: an overall exposure above 3.0 fails.
  if ! out=$(systemd-analyze security --offline=true --threshold=30 "$copy" 2>&1); then
    echo "FAIL: systemd-analyze security $what scores worse than 3.0:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "$what: verify has no complaints; $(echo "$out" | grep -o 'Overall exposure level.*')"
}

check "$unit"

# The drop-ins docs/deploying.md shows (```ini blocks whose first line names
# the file), each applied alone.
docs=$(dirname "$unit")/../docs/deploying.md
dropins=$tmp/dropins
mkdir "$dropins"
awk -v dir="$dropins" '
  /^```ini$/ { in_block = 1; file = ""; next }
  /^```$/ { in_block = 0; next }
  in_block && file == "" {
    if (match($0, /^# \/etc\/systemd\/system\/rbln-artifactd\.service\.d\/[a-z0-9-]+\.conf$/)) {
      file = dir "/" substr($0, length("# /etc/systemd/system/rbln-artifactd.service.d/") + 1)
    } else {
      file = "/dev/null"
    }
  }
  in_block { print > file }
' "$docs"
if ! ls "$dropins"/*.conf >/dev/null 2>&1; then
  echo "FAIL: no drop-in found in $docs" >&2
  exit 1
fi
mkdir "$copy.d"
for dropin in "$dropins"/*.conf; do
  cp "$dropin" "$copy.d/"
  check "$unit with $docs's drop-in $(basename "$dropin")"
  rm "$copy.d/$(basename "$dropin")"
done
