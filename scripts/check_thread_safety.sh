#!/usr/bin/env bash
# Clang's thread-safety analysis over the library: the ABSL_GUARDED_BY /
# ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations (common/mutex.h's Mutex is a
# capability) are checked, not just written — gcc, which builds Tessera,
# ignores them. Each library .cc is parsed by clang-14 (-fsyntax-only, no
# code generated; the common third-party headers precompiled once, see
# check_thread_safety_pch.h); a thread-safety warning, or a file clang cannot parse,
# fails the check. Needs the generated headers of a Bazel build (proto/):
# scripts/test.sh runs it after `bazel test //...`.
#   scripts/check_thread_safety.sh [FILE.cc ...]   (default: every library .cc)
#   scripts/check_thread_safety.sh --self-test     a misuse it must refuse
set -uo pipefail
cd "$(dirname "$0")/.."
# scripts/test.sh passes bazel-bin in, so that the check can run beside
# another Bazel command (the out-of-tree test) without waiting for its lock.
bin=${TESSERA_BAZEL_BIN:-$(bazel info bazel-bin 2>/dev/null)} || { echo "thread-safety: bazel info failed"; exit 1; }
if [[ ${1:-} == --self-test ]]; then
  # A guarded member read without its lock: the check must refuse it.
  scratch=$(mktemp --suffix=.cc)
  trap 'rm -f "$scratch" "$scratch.out"' EXIT
  printf '%s\n' '#include "common/mutex.h"' \
    'struct Counter { tessera::Mutex mu; int n ABSL_GUARDED_BY(mu) = 0; };' \
    'int Peek(Counter& c) { return c.n; }' >"$scratch"
  # Refused for the misuse itself, not for a file clang could not parse.
  if "$0" "$scratch" >"$scratch.out" || ! grep -q "requires holding mutex 'c.mu'" "$scratch.out"; then
    echo "thread-safety self-test: FAILED: an unlocked read of a guarded member was not refused as such"
    exit 1
  fi
  echo "thread-safety self-test: an unlocked read of a guarded member is refused"
  exit 0
elif [[ $# -gt 0 ]]; then
  files=("$@")
else
  # The NCCL backend needs CUDA's headers; programs and tests are not annotated.
  mapfile -t files < <(git ls-files '*.cc' | grep -vE '^(tests|examples|bench|third_party|collectives/nccl)/')
fi
# Only the analysis's warnings, as errors: the others are gcc's business.
flags=(-std=c++17 -Wno-everything -Wthread-safety -Werror=thread-safety
       -I. -I"$bin" -isystem /usr/include/torch/csrc/api/include)
# The common third-party headers, parsed once (scripts/check_thread_safety_pch.h).
pch_dir=$(mktemp -d)
trap 'rm -rf "$pch_dir"' EXIT
pch=$pch_dir/common.h.pch
if ! output=$(clang++-14 "${flags[@]}" -x c++-header \
  scripts/check_thread_safety_pch.h -o "$pch" 2>&1); then
  echo "$output"
  echo "thread-safety: clang-14 could not precompile scripts/check_thread_safety_pch.h"
  exit 1
fi
if output=$(printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -n 1 clang++-14 "${flags[@]}" -fsyntax-only -include-pch "$pch" 2>&1); then
  echo "thread-safety: ${#files[@]} files analysed by clang-14, no lock misuse found"
  exit 0
fi
grep -E 'error:|warning:' <<<"$output"
echo "thread-safety: clang-14 -Wthread-safety refused the above (${#files[@]} files analysed)"
exit 1
