#!/usr/bin/env bash
# Checks that dependencies point only downward (docs/architecture.md): a
# package may include, and its Bazel targets depend on, only the packages
# listed for it below; only the seam rpc/tensorpipe/guarded_tcp/
# tensorpipe_internals.h includes TensorPipe's non-public headers (see Note
# [TensorPipe internals]); and every arrow listed is used, so the table (and
# the picture in docs/architecture.md drawn from it) says what the code does.
# Prints every violation; exits 1 if there is any.
#   scripts/check_layering.sh              the tree, includes and Bazel deps
#   scripts/check_layering.sh --self-test  feeds it bad includes and deps: each must be refused
set -uo pipefail
cd "$(dirname "$0")/.."
readonly REPO=$PWD

# Package -> the packages it may use besides itself. A package is a path
# prefix (the longest match applies), so rpc/tensorpipe/ is not part of
# rpc: "rpc" is the RPC core, without the backends and without rpc/init.*,
# which alone composes core and backends. An entry ending in .h allows one
# header of another package: dist_autograd/gradient_sink.h is a bottom-layer
# interface (its own target, torch only) through which DDP's reducer works
# inside distributed backward.
declare -A allowed=(
  [common]=""
  [auth]="common"
  [data]="common"
  [checkpoint]="common"
  [store]="common auth proto"
  [rpc]="common auth proto store"
  [rpc/init]="rpc rpc/tensorpipe rpc/grpc common"
  [rpc/auth]="auth proto"
  [rpc/tensorpipe]="rpc rpc/auth common auth"
  [rpc/grpc]="rpc rpc/auth common auth proto"
  [rref]="rpc common proto"
  [dist_autograd]="rpc common"
  [dist_optim]="rref dist_autograd checkpoint rpc common"
  [pipeline]="rref dist_autograd rpc common"
  [ps]="rpc store checkpoint common"
  [collectives]="store common auth"
  [collectives/shm]="collectives store common"
  [collectives/gloo]="collectives collectives/shm store common"
  [collectives/nccl]="collectives store common"
  [ddp]="collectives common checkpoint dist_autograd/gradient_sink.h"
  [ddp/fault_tolerant]="collectives collectives/gloo checkpoint store common auth"
  [launcher]="store common auth"
  [tessera]="rpc/init rpc rref dist_autograd dist_optim common"
  # The public ABI's description (see Note [The public ABI],
  # tessera/public_abi.cc): the public types of every package.
  [tessera/public_abi]="tessera ddp ddp/fault_tolerant collectives collectives/gloo dist_optim pipeline ps checkpoint rpc"
  # //tessera:tessera, libtessera.so for programs outside the tree: every
  # library, by Bazel dependency only (it has no code of its own).
  [tessera-library]="tessera tessera/public_abi ddp collectives collectives/gloo collectives/shm ddp/fault_tolerant pipeline ps store checkpoint common"
)
# Bazel targets that are a package of their own here (by default a target
# belongs to the package of its folder).
declare -A package_of_target=(
  [//rpc:rpc]=rpc/init
  [//tessera:tessera]=tessera-library
  [//tessera:public_abi]=tessera/public_abi
)

# Tessera's own packages; other quoted includes (absl/, gloo/, ...) are
# third-party, below everything.
ours='^(common|auth|data|checkpoint|store|proto|rpc|rref|dist_autograd|dist_optim|pipeline|ps|collectives|ddp|launcher|tessera)/'

package_of() {  # the longest key of `allowed` matching a path ("" for none)
  local path=$1 best=""
  for key in "${!allowed[@]}"; do
    if [[ $path == "$key"/* || $path == "$key".* ]] && ((${#key} > ${#best})); then best=$key; fi
  done
  echo "$best"
}

declare -A used=()  # "package arrow" -> 1, for arrows that are taken
violations=0

# allows PACKAGE USED_PACKAGE [HEADER]: whether the arrow is in the table
# (a header-level entry allows only that header); marks it taken.
allows() {
  local package=$1 target=$2 header=${3:-}
  [[ $package == "$target" ]] && return 0
  for entry in ${allowed[$package]}; do
    if [[ $entry == "$target" || (-n $header && $entry == "$header") ]]; then
      used["$package $entry"]=1
      return 0
    fi
  done
  return 1
}

# check_includes ROOT: every quoted include of a tracked .h/.cc under ROOT.
check_includes() {
  local root=$1 file package include target
  while IFS= read -r file; do
    package=$(package_of "$file")
    [[ -z $package ]] && continue  # examples/, tests/, bench/: the top
    while IFS= read -r include; do
      [[ $include =~ $ours ]] || continue
      target=$(package_of "$include")
      [[ -z $target ]] && target=${include%%/*}
      if ! allows "$package" "$target" "$include"; then
        echo "layering: $file ($package) includes \"$include\" ($target)"
        violations=$((violations + 1))
      fi
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$root/$file")
  done < <(git -C "$root" ls-files '*.h' '*.cc')
}

package_of_label() {  # //pkg/path:name -> its package here ("" for none)
  local label=$1
  if [[ -n ${package_of_target[$label]:-} ]]; then
    echo "${package_of_target[$label]}"
  else
    local folder=${label#//}
    package_of "${folder%%:*}/"
  fi
}

# check_deps: reads "FROM TO" Bazel label pairs (direct deps) on stdin.
check_deps() {
  local from to package target header
  while read -r from to; do
    package=$(package_of_label "$from")
    target=$(package_of_label "$to")
    [[ -z $package || -z $target || $to == //third_party* ]] && continue
    # A target's header names the header-level entries (gradient_sink.h).
    header="${to#//}"
    header="${header%%:*}/${header#*:}.h"
    if ! allows "$package" "$target" "$header"; then
      echo "layering: $from ($package) depends on $to ($target)"
      violations=$((violations + 1))
    fi
  done
}

# Direct dependencies between this tree's rules, from Bazel's graph.
bazel_deps() {
  bazel query --noshow_progress --output=graph --nograph:factored \
    'kind(rule, deps(//... except //tests/... except //bench/... except //examples/..., 1))' \
    2>/dev/null | sed -n 's/^ *"\(\/\/[^"]*\)" -> "\(\/\/[^"]*\)"$/\1 \2/p'
}

check_tensorpipe_seam() {
  local seam=rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h
  local public='tensorpipe/(tensorpipe|core/pipe|core/context|core/listener|core/message|core/error|config)\.h'
  local file include
  while IFS=: read -r file include; do
    [[ $file == "$seam" ]] && continue
    if ! [[ $include =~ \<$public\> ]]; then
      echo "layering: $file includes TensorPipe's non-public $include (only $seam may)"
      violations=$((violations + 1))
    fi
  done < <(git -C "$1" grep -n '^#include <tensorpipe/' -- '*.h' '*.cc' | cut -d: -f1,3)
}

check_every_arrow_used() {
  local package entry
  for package in "${!allowed[@]}"; do
    for entry in ${allowed[$package]}; do
      if [[ -z ${used["$package $entry"]:-} ]]; then
        echo "layering: $package may use $entry, but nothing in it does: drop the arrow" \
          "(here and in docs/architecture.md)"
        violations=$((violations + 1))
      fi
    done
  done
}

# --self-test: a scratch tree with upward includes and deps; each must be
# reported, and the allowed ones beside them must not be.
self_test() {
  local scratch out
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' RETURN
  git -C "$scratch" init -q
  mkdir -p "$scratch"/{rpc/tensorpipe,ddp,common,pipeline}
  printf '#include "rpc/tensorpipe/agent.h"\n#include "store/store_client.h"\n' >"$scratch/rpc/runtime.cc"
  printf '#include "collectives/gloo/gloo_process_group.h"\n#include "dist_autograd/gradient_sink.h"\n' \
    >"$scratch/ddp/reducer.cc"
  printf '#include "dist_autograd/dist_autograd.h"\n' >"$scratch/ddp/sampler.cc"
  printf '#include "rpc/runtime.h"\n' >"$scratch/common/future.h"
  printf '#include "dist_optim/distributed_optimizer.h"\n#include "rref/rref.h"\n' \
    >"$scratch/pipeline/stage.cc"
  printf '#include <tensorpipe/transport/uv/factory.h>\n' >"$scratch/rpc/tensorpipe/agent.h"
  git -C "$scratch" add -A
  out=$(
    violations=0
    check_includes "$scratch"
    check_tensorpipe_seam "$scratch"
    check_deps <<<"$(printf '%s\n' "//rpc:runtime //rpc/grpc:grpc" "//ddp:ddp //collectives/gloo:gloo" \
      "//ddp:ddp //dist_autograd:gradient_sink" "//ddp:ddp //collectives:process_group")"
    echo "violations=$violations"
  )
  local expected=(
    'rpc/runtime.cc (rpc) includes "rpc/tensorpipe/agent.h"'
    'ddp/reducer.cc (ddp) includes "collectives/gloo/gloo_process_group.h"'
    'ddp/sampler.cc (ddp) includes "dist_autograd/dist_autograd.h"'
    'common/future.h (common) includes "rpc/runtime.h"'
    'pipeline/stage.cc (pipeline) includes "dist_optim/distributed_optimizer.h"'
    "rpc/tensorpipe/agent.h includes TensorPipe's non-public"
    '//rpc:runtime (rpc) depends on //rpc/grpc:grpc'
    '//ddp:ddp (ddp) depends on //collectives/gloo:gloo'
    'violations=8'
  )
  local failed=0 line
  for line in "${expected[@]}"; do
    if ! grep -qF -- "$line" <<<"$out"; then
      echo "layering self-test: not reported: $line"
      failed=1
    fi
  done
  if ((failed)); then
    echo "layering self-test: FAILED; the check said:"
    echo "$out"
    return 1
  fi
  echo "layering self-test: 8 upward includes and deps refused, the allowed ones passed"
}

if [[ ${1:-} == --self-test ]]; then
  self_test
  exit
fi

check_includes "$REPO"
check_tensorpipe_seam "$REPO"
if ! edges=$(bazel_deps) || [[ -z $edges ]]; then
  echo "layering: could not read Bazel's dependency graph (bazel query //...)"
  exit 1
fi
check_deps <<<"$edges"
check_every_arrow_used
if ((violations > 0)); then
  echo "layering: $violations dependency(ies) point upward, past a seam, or are listed but unused"
  exit 1
fi
echo "layering: every include and Bazel dependency points downward, and every arrow is used"
