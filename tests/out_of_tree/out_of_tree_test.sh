#!/usr/bin/env bash
# Tessera used from a project of one's own (issue 34; docs/guide/own-project.md): examples/out_of_tree is copied into a temporary folder
# outside the repository and
#   - built with CMake (find_package(Tessera)) against a fresh install of
#     scripts/install.sh in a temporary prefix,
#   - built with g++ and pkg-config (tessera.pc) against the same install,
#   - built with Bazel against the same install (@tessera: its repository in
#     PREFIX/share/tessera/bazel, tessera_deps.bzl),
# and each program runs as a two-worker job under the installed tessera-run.
# It also checks what the install holds (soname, every header's includes
# resolve), that a second install replaces the first, and that a prefix one
# cannot write to is refused before anything is built.
#
# Not a `bazel test`: install.sh builds with Bazel in this workspace, whose
# server a running `bazel test` holds. scripts/test.sh runs it after the
# Bazel tests:   tests/out_of_tree/out_of_tree_test.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d /tmp/tessera-out-of-tree.XXXXXX)
readonly work
readonly PREFIX=$work/prefix
readonly BAZEL_ROOT=$work/bazel-root
failures=0

cleanup() {
  if [[ -d $work/bazel_app ]]; then
    (cd "$work/bazel_app" && timeout 120 bazel --output_user_root="$BAZEL_ROOT" shutdown >/dev/null 2>&1)
  fi
  chmod -R u+w "$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Each step's line says when it ended, so a CI log shows where time went.
step() { echo "out_of_tree_test: $* (at ${SECONDS} s)"; }
failed() {
  echo "out_of_tree_test: FAILED: $*" >&2
  failures=$((failures + 1))
}

# build_bazel_app LOG: examples/out_of_tree copied to $work/bazel_app and
# built with Bazel against the install: it compiles app.cc alone. (Built
# against this checkout as an external repository, it compiled all of
# Tessera again, whose objects the main build's never serve: 520 s of a cold
# CI run.) A deadline, so that a build which stalls fails here with its
# log, the load and the memory, not CI's whole run.
readonly BAZEL_APP_DEADLINE_S=600
build_bazel_app() {
  cp -r examples/out_of_tree "$work/bazel_app"
  sed -i "s|/usr/local/share/tessera/bazel|$PREFIX/share/tessera/bazel|" \
    "$work/bazel_app/WORKSPACE"
  # On a loaded machine the server may need past the client's default 120 s
  # to start.
  (cd "$work/bazel_app" &&
    timeout "$BAZEL_APP_DEADLINE_S" bazel --output_user_root="$BAZEL_ROOT" \
      --local_startup_timeout_secs="$BAZEL_APP_DEADLINE_S" build \
      --disk_cache="$HOME/.cache/tessera-bazel" --spawn_strategy=processwrapper-sandbox //:app) \
    >"$1" 2>&1
  local status=$?
  if [[ $status -eq 124 ]]; then
    {
      echo "out_of_tree_test: the Bazel build did not finish within ${BAZEL_APP_DEADLINE_S} s;" \
        "load: $(cut -d' ' -f1-3 /proc/loadavg); memory:"
      free -m
    } >>"$1"
  fi
  return "$status"
}
# bazel_app_failed LOG: the failed build's log, less the sandbox's noise.
bazel_app_failed() {
  failed "Bazel build:"
  grep -v '^[0-9.]*: src/main/tools' "$1" | tail -40 >&2
}
# expect_output LOG TEXT: the log holds TEXT, else the step fails with the log.
expect_output() {
  if ! grep -qF -- "$2" "$1"; then
    failed "expected '$2' in $1:"
    tail -30 "$1" >&2
    return 1
  fi
}
# run_job NAME PROGRAM: the program as two workers under the installed
# tessera-run; both must succeed and worker0 must report its checks.
run_job() {
  local log=$work/$1.run.log
  if timeout 180 "$PREFIX/bin/tessera-run" --standalone --nproc_per_node 2 "$2" >"$log" 2>&1; then
    expect_output "$log" "out-of-tree app: rpc ok, rref sum 18 on worker1: ok" && step "$1: ran"
  else
    failed "$1: the job exited with $?:"
    tail -30 "$log" >&2
  fi
}

# --- a prefix one cannot write to: refused at once, with the way out ---
readonly_parent=$work/readonly
mkdir -p "$readonly_parent"
chmod 755 "$work"
chmod 555 "$readonly_parent"
log=$work/readonly.log
if [[ $(id -u) -eq 0 ]]; then
  # root writes anywhere: try as nobody, with a copy of what install.sh
  # reads before it checks the prefix (the checkout may be in a folder
  # nobody cannot enter, such as /root).
  copy=$work/installer
  mkdir -p "$copy/scripts" "$copy/tessera"
  cp scripts/install.sh "$copy/scripts/"
  cp tessera/version.bzl "$copy/tessera/"
  chmod -R a+rX "$copy"
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$copy/scripts/install.sh" "$readonly_parent/prefix" >"$log" 2>&1
else
  scripts/install.sh "$readonly_parent/prefix" >"$log" 2>&1
fi
status=$?
if [[ $status -ne 1 ]]; then
  failed "install.sh into a read-only prefix exited with $status, expected 1"
  cat "$log" >&2
elif expect_output "$log" "cannot install into $readonly_parent/prefix" &&
  expect_output "$log" "choose a prefix you own"; then
  step "a prefix it cannot write to is refused: $(head -1 "$log")"
fi
chmod 700 "$work"

# --- install, twice ---
# The objects `bazel test` compiled (-O2 too) rather than a second,
# optimised build of everything: see install.sh.
export TESSERA_INSTALL_COMPILATION_MODE=fastbuild
if ! scripts/install.sh "$PREFIX" >"$work/install.log" 2>&1; then
  failed "install.sh $PREFIX:"
  tail -30 "$work/install.log" >&2
  exit 1
fi
version=$(sed -n 's/^TESSERA_VERSION = "\(.*\)"$/\1/p' tessera/version.bzl)
for file in "lib/libtessera.so.$version" lib/libtessera.so bin/tessera-run \
  lib/cmake/Tessera/TesseraConfig.cmake lib/cmake/Tessera/TesseraConfigVersion.cmake \
  lib/pkgconfig/tessera.pc share/tessera/bazel/BUILD.bazel share/tessera/bazel/WORKSPACE \
  include/tessera/tessera/worker.h include/tessera/proto/rpc.pb.h; do
  [[ -e $PREFIX/$file ]] || failed "the install has no $file"
done
soname=$(readelf -d "$PREFIX/lib/libtessera.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname == libtessera.so.${version%%.*} ]] || failed "soname '$soname', expected libtessera.so.${version%%.*}"
# Every include of an installed header resolves in the install or the system.
unresolved=0
while read -r header; do
  dir=$(dirname "$header")
  while read -r included; do
    for root in "$PREFIX/include/tessera" "$dir" /usr/include /usr/include/torch/csrc/api/include; do
      [[ -f $root/$included ]] && continue 2
    done
    failed "$header includes \"$included\", which is neither installed nor the system's"
    unresolved=$((unresolved + 1))
  done < <(sed -n 's/^#include "\(.*\)"/\1/p' "$header")
done < <(find "$PREFIX/include" -name '*.h')
[[ $unresolved -eq 0 ]] && step "installed $(find "$PREFIX/include" -name '*.h' | wc -l) headers; every include resolves"
files_before=$(find "$PREFIX" -type f | wc -l)
if scripts/install.sh "$PREFIX" >"$work/install2.log" 2>&1; then
  expect_output "$work/install2.log" "replacing Tessera $version installed in $PREFIX" &&
    step "a second install replaces the first"
  [[ $(find "$PREFIX" -type f | wc -l) -eq $files_before ]] ||
    failed "the second install left $(find "$PREFIX" -type f | wc -l) files, the first $files_before"
else
  failed "the second install.sh failed:"
  tail -30 "$work/install2.log" >&2
fi

# --- CMake against the install ---
cp -r examples/out_of_tree "$work/cmake_app"
log=$work/cmake.log
if (cd "$work/cmake_app" && cmake -S . -B build -DCMAKE_PREFIX_PATH="$PREFIX" &&
  cmake --build build) >"$log" 2>&1; then
  step "CMake: built against the install"
  run_job cmake "$work/cmake_app/build/app"
else
  failed "CMake build:"
  tail -40 "$log" >&2
fi

# --- g++ with pkg-config against the install ---
log=$work/pkg_config.log
if (cd "$work/cmake_app" &&
  flags=$(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs tessera) &&
  # shellcheck disable=SC2086 # the flags are words
  g++ app.cc -o app_pkg_config $flags) >"$log" 2>&1; then
  step "pkg-config: built against the install"
  run_job pkg_config "$work/cmake_app/app_pkg_config"
else
  failed "g++ with pkg-config:"
  tail -40 "$log" >&2
fi

# --- Bazel against the install ---
log=$work/bazel.log
if build_bazel_app "$log"; then
  step "Bazel: built against the install"
  run_job bazel "$work/bazel_app/bazel-bin/app"
else
  bazel_app_failed "$log"
fi

if [[ $failures -ne 0 ]]; then
  echo "out_of_tree_test: $failures check(s) failed"
  exit 1
fi
echo "out_of_tree_test: every check passed"
