#!/usr/bin/env bash
# Checks that includes point only downward (docs/architecture.md): each
# package may include only the packages listed for it below, and only the
# seam rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h includes
# TensorPipe's non-public headers (Note [TensorPipe internals]).
# Prints every violation; exits 1 if there is any.
#   scripts/check_layering.sh
set -uo pipefail
cd "$(dirname "$0")/.."

# Package (a path prefix; the longest match applies) -> the include prefixes
# it may use besides its own. "rpc-core" is rpc/ without the backends and
# without rpc/init.h, which alone composes core and backends.
# dist_autograd/gradient_sink.h is a bottom-layer interface (its own target,
# torch only) through which DDP's reducer works inside distributed backward.
declare -A allowed=(
  [common]=""
  [auth]="common/"
  [data]="common/"
  [checkpoint]="common/"
  [store]="common/ auth/ proto/"
  [rpc]="rpc-core common/ auth/ proto/ store/"
  [rpc/init]="rpc/ common/ auth/ proto/ store/"
  [rpc/auth]="rpc-core common/ auth/ proto/"
  [rpc/tensorpipe]="rpc-core rpc/auth/ rpc/tensorpipe/ common/ auth/ proto/"
  [rpc/grpc]="rpc-core rpc/auth/ rpc/grpc/ common/ auth/ proto/"
  [rref]="rpc-core common/ proto/"
  [dist_autograd]="rpc-core common/ proto/"
  [dist_optim]="rref/ dist_autograd/ checkpoint/ rpc-core common/ proto/"
  [pipeline]="dist_optim/ rref/ dist_autograd/ rpc-core common/ proto/"
  [ddp]="store/ common/ auth/ proto/ checkpoint/ dist_autograd/gradient_sink.h"
  [ddp/fault_tolerant]="ddp/ checkpoint/ store/ common/ auth/ proto/"
  [launcher]="store/ common/ auth/ proto/"
  [tessera]="pipeline/ dist_optim/ rref/ dist_autograd/ rpc/ ddp/ store/ common/ auth/ proto/"
)

package_of() {  # longest matching key of `allowed` for a file path
  local path=$1 best=""
  for key in "${!allowed[@]}"; do
    if [[ $path == "$key"/* || $path == "$key".* ]] && ((${#key} > ${#best})); then best=$key; fi
  done
  echo "$best"
}

may_include() {  # file's package, included path
  local package=$1 include=$2
  [[ $include == "$package"/* ]] && return 0
  [[ $package == rpc/init ]] && [[ $include == rpc/* ]] && return 0
  for prefix in ${allowed[$package]}; do
    if [[ $prefix == rpc-core ]]; then
      [[ $include == rpc/* && $include != rpc/tensorpipe/* && $include != rpc/grpc/* &&
         $include != rpc/init.h ]] && return 0
    elif [[ $include == "$prefix"* ]]; then
      return 0
    fi
  done
  return 1
}

# Tessera's own packages; other quoted includes (absl/, gloo/, ...) are
# third-party, below everything.
ours='^(common|auth|data|checkpoint|store|proto|rpc|rref|dist_autograd|dist_optim|pipeline|ddp|launcher|tessera|examples|tests|bench)/'

violations=0
while IFS= read -r file; do
  package=$(package_of "$file")
  [[ -z $package ]] && continue  # examples/, tests/, bench/: the top
  while IFS= read -r include; do
    [[ $include =~ $ours ]] || continue
    if ! may_include "$package" "$include"; then
      echo "layering: $file ($package) includes \"$include\""
      violations=$((violations + 1))
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files '*.h' '*.cc')

seam=rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h
public='tensorpipe/(tensorpipe|core/pipe|core/context|core/listener|core/message|core/error|config)\.h'
while IFS=: read -r file include; do
  [[ $file == "$seam" ]] && continue
  if ! [[ $include =~ \<$public\> ]]; then
    echo "layering: $file includes TensorPipe's non-public $include (only $seam may)"
    violations=$((violations + 1))
  fi
done < <(git grep -n '^#include <tensorpipe/' -- '*.h' '*.cc' | cut -d: -f1,3)

if ((violations > 0)); then
  echo "layering: $violations include(s) point upward or past a seam"
  exit 1
fi
echo "layering: every include points downward"
