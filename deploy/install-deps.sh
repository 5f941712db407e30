#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages.
# Idempotent and fast when everything is present: apt is only touched when a
# package is missing. Needs root (or sudo) when it has to install.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config clang-format clang-tidy
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev
  libssl-dev openssl  # token hashes (SHA-256); test certificates
  protobuf-compiler libabsl-dev rapidjson-dev libgtest-dev libgmock-dev
  libcli11-dev libxxhash-dev libspdlog-dev libbenchmark-dev
  libsystemd-dev  # sd_notify: Type=notify under systemd
  python3 python3-grpcio python3-protobuf
  clang libclang-rt-14-dev  # the fuzz stage: clang++ and libFuzzer
  help2man  # the man pages, from --help
  dpkg-dev file  # cpack -G DEB: dpkg-shlibdeps finds the runtime packages
  libmicrohttpd-dev curl  # --metrics-listen's HTTP server; the test scrapes it
  libglib2.0-dev  # g_shell_parse_argv: --codec-command split as a shell would
  xfsprogs  # bench/run: mkfs.xfs for the XFS reflink rows (libbenchmark-dev: row 9)
  valgrind  # bench/run: callgrind counts the instructions of row 5i
)

# node and npm validate deploy/kubernetes/ (tests/kubernetes_test.py):
# Debian's, unless a node with npm (e.g. nodesource's) is there already.
if ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
