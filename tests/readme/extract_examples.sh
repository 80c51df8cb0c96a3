#!/usr/bin/env bash
# Writes each ```cpp block of the given Markdown files (README.md and the
# guide's pages) to OUT_DIR/<name>, where the block's first line is
# "// <name> — ...". Fails on a block without a name, so every example in
# the docs is built (tests/readme/BUILD.bazel).
#   extract_examples.sh OUT_DIR FILE.md...
set -euo pipefail
out=$1
shift
awk -v out="$out" '
  /^```cpp/ { inside = 1; file = ""; next }
  /^```/ && inside { inside = 0; if (file != "") close(file); next }
  inside && file == "" {
    if (match($0, /^\/\/ [a-z_]+\.cc/) == 0) {
      print FILENAME ": block without a name: " $0 > "/dev/stderr"; exit 1
    }
    file = out "/" substr($0, 4, RLENGTH - 3)
  }
  inside { print > file }
' "$@"
