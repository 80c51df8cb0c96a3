#!/usr/bin/env bash
# Runs the NCCL backend's test and benchmark on a GPU machine from a bundle
# made here by scripts/gpu/bundle.py (see docs/gpu.md):
#   scripts/gpu/nccl_checks.sh BUNDLE.tar.xz OUT_DIR
# Writes OUT_DIR/nccl_test.log, OUT_DIR/nccl_bench.txt. Uses the machine's
# own libnccl.so.2 and, for the comparison, its python3 with a CUDA PyTorch.
set -uo pipefail
bundle=$1 out=$2
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ldd --version | head -n 1
root=$(mktemp -d)
tar -C "$root" -xJf "$bundle" || exit 1
nccl=$(find / -xdev -name 'libnccl.so.2*' -type f 2>/dev/null | head -n 1)
[[ -n $nccl ]] || { echo "no libnccl.so.2 on this machine"; exit 1; }
echo "NCCL: $nccl"
export LD_LIBRARY_PATH=$root/lib:$(dirname "$nccl")
if ldd "$root/bin/nccl_process_group_test" | grep 'not found'; then exit 1; fi
mkdir -p /tmp/nccl_test_tmp
TEST_TMPDIR=/tmp/nccl_test_tmp timeout 300 "$root/bin/nccl_process_group_test" 2>&1 |
  tee "$out/nccl_test.log" | grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) '
echo "nccl_process_group_test exit ${PIPESTATUS[0]}"
{
  echo "# tessera (NCCL process group, CPU tensors staged)"
  timeout 120 "$root/bin/nccl_allreduce_bench" 1
  echo "# pytorch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())')"
  timeout 120 python3 bench/torch_nccl_allreduce_bench.py 1
} 2>&1 | tee "$out/nccl_bench.txt"
