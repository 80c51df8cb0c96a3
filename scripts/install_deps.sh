#!/usr/bin/env bash
# Installs the Debian 12 packages Tessera builds and runs with. Idempotent:
# does nothing when everything is already installed.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java g++
  libtorch-dev libtensorpipe-dev zlib1g-dev
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libabsl-dev libgloo-dev libgtest-dev googletest libbenchmark-dev
  dataset-fashion-mnist python3-torch
  clang-14 libclang-rt-14-dev libssl-dev openssl python3-grpcio python3-protobuf
  etcd-server cmake pkg-config python3-matplotlib gdb
  abigail-tools  # scripts/check_abi.sh (abidw, abidiff)
  iproute2  # the multi-host tests' network hosts (ip netns, bridges, links)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "Installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
