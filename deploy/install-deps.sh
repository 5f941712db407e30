#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages:
#   deploy/install-deps.sh --for demo   what deploy/demo.sh needs: the tools
#                                       and libraries to build the programs
#                                       and their man pages
#   deploy/install-deps.sh [--for test] that and the test stack of
#                                       deploy/test.sh (sanitizers, fuzzing,
#                                       packaging, benchmarks, manifests)
# Idempotent and fast when everything is present: apt is only touched when a
# package is missing. Needs root (or sudo) when it has to install.
set -euo pipefail

usage() {
  echo "usage: deploy/install-deps.sh [--for demo|test]" >&2
  exit 2
}
for_what=test
case $# in
  0) ;;
  2) [ "$1" = --for ] || usage
     case $2 in demo | test) for_what=$2 ;; *) usage ;; esac ;;
  *) usage ;;
esac

# Building the programs (configuring checks every one of these).
packages=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev
  libssl-dev  # token hashes (SHA-256)
  protobuf-compiler libabsl-dev rapidjson-dev libgtest-dev libgmock-dev
  libcli11-dev libxxhash-dev libspdlog-dev
  libsystemd-dev  # sd_notify: Type=notify under systemd
  libmicrohttpd-dev  # --metrics-listen's HTTP server
  libglib2.0-dev  # g_shell_parse_argv: --codec-command split as a shell would
  help2man  # the man pages, from --help
)
if [ "$for_what" = test ]; then
  packages+=(
    clang-tidy  # ctest code_size: function sizes
    openssl  # test certificates
    libbenchmark-dev  # bench/run row 9
    python3 python3-grpcio python3-protobuf  # the Python tests, bench/run
    clang libclang-rt-14-dev  # the fuzz stage: clang++ and libFuzzer
    dpkg-dev file  # cpack -G DEB: dpkg-shlibdeps finds the runtime packages
    curl  # the metrics test scrapes the endpoint
    groff-base  # the man page test renders them
    xfsprogs  # bench/run: mkfs.xfs for the XFS reflink rows
    valgrind  # bench/run: callgrind counts the instructions of row 5i
    strace  # bench/run row fsync: the fsyncs of one commit
  )
fi

# node and npm validate deploy/kubernetes/ (tests/kubernetes_test.py):
# Debian's, unless a node with npm (e.g. nodesource's) is there already.
if [ "$for_what" = test ] && ! command -v npm >/dev/null; then
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
