#!/usr/bin/env bash
# Installs Tessera for programs built outside this tree (docs/guide/own-project.md):
#   scripts/install.sh [PREFIX]          PREFIX defaults to /usr/local
# puts
#   PREFIX/include/tessera/...            the headers a program includes, and those they include
#   PREFIX/lib/libtessera.so.VERSION      with the soname libtessera.so.SOVERSION, and its links
#   PREFIX/bin/tessera-run                the launcher
#   PREFIX/bin/tessera-trace              merges and summarises traces (python3)
#   PREFIX/lib/cmake/Tessera/             find_package(Tessera CONFIG) -> Tessera::tessera
#   PREFIX/lib/pkgconfig/tessera.pc       pkg-config --cflags --libs tessera
#   PREFIX/share/tessera/bazel/           a Bazel repository: local_repository -> @tessera
#   PREFIX/share/tessera/install-manifest every file above, for the next install
# Installing again replaces the earlier install (the files its manifest
# lists) and says so.
#
# The build is an optimised release (bazel -c opt: -O2, NDEBUG).
# TESSERA_INSTALL_COMPILATION_MODE=fastbuild installs the tree's everyday
# build instead (also -O2, see .bazelrc; asserts kept), reusing the objects
# `bazel test` already compiled: the out-of-tree test does that.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly REPO=$PWD

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  -*) echo "install.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
esac
[[ $# -le 1 ]] || { echo "install.sh: one PREFIX at most (got $*)" >&2; exit 2; }

PREFIX=${1:-/usr/local}
[[ $PREFIX == /* ]] || PREFIX=$PWD/$PREFIX
PREFIX=${PREFIX%/}
readonly MODE=${TESSERA_INSTALL_COMPILATION_MODE:-opt}
VERSION=$(sed -n 's/^TESSERA_VERSION = "\(.*\)"$/\1/p' tessera/version.bzl)
SOVERSION=$(sed -n 's/^TESSERA_SOVERSION = "\(.*\)"$/\1/p' tessera/version.bzl)
readonly VERSION SOVERSION

fail() {
  echo "install.sh: $*" >&2
  exit 1
}

# Before minutes of building: can we write there at all?
for dir in "$PREFIX" "$PREFIX/include" "$PREFIX/lib" "$PREFIX/bin" "$PREFIX/share"; do
  if ! error=$(mkdir -p "$dir" 2>&1) || [[ ! -w $dir ]]; then
    [[ -n ${error:-} ]] || error="$dir is not writable"
    fail "cannot install into $PREFIX: ${error#mkdir: }. Run it as root (sudo), or choose" \
      "a prefix you own: scripts/install.sh \$HOME/.local"
  fi
done

scripts/install_deps.sh

echo "install.sh: building Tessera $VERSION (bazel -c $MODE)"
readonly TARGETS=(//tessera //launcher:tessera-run)
bazel build -c "$MODE" "${TARGETS[@]}"
BIN=$(bazel info -c "$MODE" bazel-bin 2>/dev/null)
readonly BIN

# The headers: those of the libraries in libtessera.so a program uses
# directly, and every header of this tree they include, found by the
# preprocessor (generated ones, proto/*.pb.h, come from the build).
mapfile -t entry_headers < <(bazel query 'labels(hdrs, labels(deps, //tessera:tessera))' \
  2>/dev/null | sed -n 's|^//\([^:]*\):\(.*\.h\)$|\1/\2|p')
[[ ${#entry_headers[@]} -gt 0 ]] || fail "found no headers to install (bazel query failed)"
headers=$(g++ -std=c++17 -MM -I. -I"$BIN" -isystem /usr/include/torch/csrc/api/include \
  "${entry_headers[@]}" | tr ' \\' '\n\n' | grep '\.h$' | sort -u) ||
  fail "the preprocessor could not read the headers"

manifest_dir=$PREFIX/share/tessera
old_manifest=$manifest_dir/install-manifest
if [[ -f $old_manifest ]]; then
  old_version=$(sed -n 's/^# Tessera \([^ ,]*\).*/\1/p' "$old_manifest")
  echo "install.sh: replacing Tessera ${old_version:-of unknown version} installed in $PREFIX"
  grep -v '^#' "$old_manifest" | while read -r file; do rm -f "$PREFIX/$file"; done
  find "$PREFIX/include/tessera" "$PREFIX/share/tessera" -depth -type d -empty -delete \
    2>/dev/null || true
fi

installed=()
put() {  # put SOURCE DEST MODE: installs one file (DEST relative to PREFIX)
  install -D -m "$3" "$1" "$PREFIX/$2"
  installed+=("$2")
}
link() {  # link TARGET NAME: a symbolic link PREFIX/NAME -> TARGET
  ln -sfn "$1" "$PREFIX/$2"
  installed+=("$2")
}
substitute() {  # substitute TEMPLATE DEST: fills in @VERSION@ and friends
  local tmp
  tmp=$(mktemp)
  sed -e "s|@VERSION@|$VERSION|g" -e "s|@VERSION_MAJOR@|${VERSION%%.*}|g" \
    -e "s|@SOVERSION@|$SOVERSION|g" -e "s|@PREFIX@|$PREFIX|g" \
    -e "s|@LINKOPTS@|${LINKOPTS:-}|g" "$1" >"$tmp"
  put "$tmp" "$2" 644
  rm -f "$tmp"
}

for header in $headers; do
  case $header in
    "$BIN"/*) put "$header" "include/tessera/${header#"$BIN"/}" 644 ;;
    /*) ;;  # the system's (Abseil, LibTorch, ...): found where they are
    *) put "$header" "include/tessera/$header" 644 ;;
  esac
done
put "$BIN/tessera/libtessera.so" "lib/libtessera.so.$VERSION" 755
link "libtessera.so.$VERSION" "lib/libtessera.so.$SOVERSION"
link "libtessera.so.$SOVERSION" "lib/libtessera.so"
put "$BIN/launcher/tessera-run" "bin/tessera-run" 755
put scripts/tessera-trace "bin/tessera-trace" 755
substitute tessera/install/TesseraConfig.cmake.in lib/cmake/Tessera/TesseraConfig.cmake
substitute tessera/install/TesseraConfigVersion.cmake.in \
  lib/cmake/Tessera/TesseraConfigVersion.cmake
substitute tessera/install/tessera.pc.in lib/pkgconfig/tessera.pc
# The Bazel repository: its link flags are tessera.pc's (one list), its
# include/ and lib/ links into this install, and what its WORKSPACE needs
# offline (tessera_deps.bzl: rules_cc & co. from its third_party/).
readonly BAZEL_REPO=share/tessera/bazel
LINKOPTS=$(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --libs tessera |
  python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().split()))') ||
  fail "pkg-config could not read the installed tessera.pc"
substitute tessera/install/BUILD.bazel.in "$BAZEL_REPO/BUILD.bazel"
put tessera/install/WORKSPACE.in "$BAZEL_REPO/WORKSPACE" 644
put tessera_deps.bzl "$BAZEL_REPO/tessera_deps.bzl" 644
for file in $(find third_party/rules_cc third_party/remote_coverage_tools -type f); do
  put "$file" "$BAZEL_REPO/$file" 644
done
link ../../../include/tessera "$BAZEL_REPO/include"
link ../../../lib "$BAZEL_REPO/lib"

mkdir -p "$manifest_dir"
{
  echo "# Tessera $VERSION, installed $(date -u +%Y-%m-%dT%H:%M:%SZ) from $REPO (bazel -c $MODE)"
  printf '%s\n' "${installed[@]}"
} >"$old_manifest"
# The dynamic loader's cache, where it reads this prefix's lib/ (e.g. /usr/local/lib).
if [[ $(id -u) -eq 0 ]] && grep -rqsx "$PREFIX/lib" /etc/ld.so.conf /etc/ld.so.conf.d; then
  ldconfig
fi
echo "install.sh: installed Tessera $VERSION in $PREFIX (${#installed[@]} files;" \
  "CMake: find_package(Tessera CONFIG REQUIRED) with CMAKE_PREFIX_PATH=$PREFIX)"
