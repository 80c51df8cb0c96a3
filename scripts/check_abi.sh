#!/usr/bin/env bash
# Checks libtessera.so's public ABI against the one recorded for its soname
# (see Note [The public ABI], tessera/public_abi.cc):
#   scripts/check_abi.sh              compare; run by scripts/test.sh
#   scripts/check_abi.sh --record     record the ABI: a new soname's, or one
#                                     that only gained types or entry points
#   scripts/check_abi.sh --self-test  a field added to a public struct
#                                     (rpc::CallOptions) must be refused
# The recording is libtessera.so.SOVERSION.abi in tessera/abi/ (abidw's XML).
# Passes when nothing changed. Fails, saying what to do, when the ABI only
# grew (record it), when anything else changed (raise TESSERA_SOVERSION in
# tessera/version.bzl and record the new soname's ABI) or when the soname
# has no recording yet. The tools are Debian's abigail-tools.
set -euo pipefail
cd "$(dirname "$0")/.."

SOVERSION=$(sed -n 's/^TESSERA_SOVERSION = "\(.*\)"$/\1/p' tessera/version.bzl)
readonly SOVERSION
readonly RECORDED=tessera/abi/libtessera.so.$SOVERSION.abi
work=$(mktemp -d /tmp/tessera-abi.XXXXXX)
readonly work
trap 'rm -rf "$work"' EXIT

fail() {
  echo "check_abi: $*" >&2
  exit 1
}

for tool in abidw abidiff; do
  command -v "$tool" >/dev/null || fail "$tool not found: scripts/install_deps.sh installs abigail-tools"
done

# Only the functions and variables of tessera::abi are the ABI (the rest of
# the symbol table is the implementation's); the types they reach stay. The
# TSan hook (third_party/tsan_suppressions.cc) is a C function: with no
# linkage name, the symbol rule does not see it.
cat >"$work/suppressions" <<'EOF'
[suppress_function]
  name = __tsan_default_suppressions
  drop = yes
[suppress_function]
  symbol_name_not_regexp = ^_ZN7tessera3abi
  drop = yes
[suppress_variable]
  symbol_name_not_regexp = ^_ZN7tessera3abi
  drop = yes
EOF

# abidw's description of a shared library, without what differs from
# machine to machine (source paths, the build's directories).
describe() {  # LIBRARY OUT
  abidw --no-show-locs --no-comp-dir-path --no-corpus-path --no-elf-needed \
    --suppressions "$work/suppressions" --out-file "$2" "$1"
}

# Compares two descriptions. Prints abidiff's report and one verdict:
# "same", "grown" (only additions) or "changed".
compare() {  # OLD NEW
  local report rc=0
  report=$(abidiff --no-show-locs --no-unreferenced-symbols "$1" "$2") || rc=$?
  (((rc & 3) == 0)) || fail "abidiff could not compare $1 and $2 (exit $rc): $report"
  if ((rc == 0)); then
    echo same
    return
  fi
  echo "$report" >&2
  # abidiff flags a removal as incompatible (8) but a changed layout only as
  # a change (4), as it does an addition: its summaries tell them apart.
  if echo "$report" | grep -Eq 'summary: [0-9]+ Removed, 0 Changed( \([0-9]+ filtered out\))?, [0-9]+ Added' &&
    ! echo "$report" | grep -Eq 'summary: [1-9][0-9]* Removed|[1-9][0-9]* Changed'; then
    echo grown
  else
    echo changed
  fi
}

build_library() {
  # Unstripped: a fastbuild link drops the debug information otherwise.
  bazel build --strip=never --noshow_progress --show_result=0 --ui_event_filters=-info //tessera >&2
  echo "$(bazel info --strip=never bazel-bin 2>/dev/null)/tessera/libtessera.so"
}

self_test() {
  # public_abi.cc compiled with g++ as a library of its own, once as it is
  # and once against a CallOptions that gained a field: the first must
  # describe the same ABI as the built libtessera.so, the second not.
  local bin flags=() library
  library=$(build_library)
  bin=$(bazel info bazel-bin 2>/dev/null)
  flags=(-std=c++17 -O0 -g -fPIC -shared -Wl,-soname,libtessera.so."$SOVERSION"
    -I. -I"$bin" -isystem /usr/include/torch/csrc/api/include)
  describe "$library" "$work/built.abi"
  mkdir -p "$work/planted/rpc"
  sed 's/^struct CallOptions {$/&\n  int planted_field = 0;/' rpc/call_options.h >"$work/planted/rpc/call_options.h"
  cmp -s rpc/call_options.h "$work/planted/rpc/call_options.h" &&
    fail "self-test: could not plant a field in rpc/call_options.h's struct CallOptions"
  g++ "${flags[@]}" -iquote "$work/planted" tessera/public_abi.cc -o "$work/planted.so"
  describe "$work/planted.so" "$work/planted.abi"
  local verdict
  verdict=$(compare "$work/built.abi" "$work/planted.abi" 2>"$work/planted.report")
  [[ $verdict == changed ]] || fail "self-test: a field added to CallOptions was judged '$verdict'"
  grep -q 'CallOptions' "$work/planted.report" ||
    fail "self-test: the report of a field added to CallOptions does not name it: $(cat "$work/planted.report")"
  echo "check_abi: self-test passed (a field added to rpc::CallOptions is refused)"
}

case "${1:-}" in
  --self-test) self_test; exit 0 ;;
  --record | "") ;;
  *) fail "unknown argument $1 (--record or --self-test)" ;;
esac

library=$(build_library)
describe "$library" "$work/built.abi"
if [[ ! -f $RECORDED ]]; then
  if [[ ${1:-} == --record ]]; then
    mkdir -p "$(dirname "$RECORDED")"
    cp "$work/built.abi" "$RECORDED"
    echo "check_abi: recorded the ABI of soname $SOVERSION in $RECORDED"
    exit 0
  fi
  fail "no ABI is recorded for soname $SOVERSION: run scripts/check_abi.sh --record and commit $RECORDED"
fi
verdict=$(compare "$RECORDED" "$work/built.abi")
case "$verdict/${1:-}" in
  same/*) echo "check_abi: libtessera.so.$SOVERSION's ABI is the one recorded in $RECORDED" ;;
  grown/--record)
    cp "$work/built.abi" "$RECORDED"
    echo "check_abi: the ABI only grew; recorded it in $RECORDED"
    ;;
  grown/) fail "the public ABI grew (above): record it, scripts/check_abi.sh --record, and commit $RECORDED" ;;
  changed/*)
    fail "the public ABI of soname $SOVERSION changed (above): programs built against it would" \
      "break. Keep the old layout and signatures, or raise TESSERA_SOVERSION in tessera/version.bzl" \
      "and record the new soname's ABI (scripts/check_abi.sh --record)"
    ;;
esac
