#!/usr/bin/env bash
# How the RPC layer scales with the number of workers: tessera-run runs
# bench/scale_probe.cc as N workers (rendezvous, an all-to-all of calls, an
# RRef handed to a third worker, graceful shutdown), and the table shows the
# slowest worker's time for each phase, the job's wall time, and how many
# workers finished.
#   bench/scale.sh [N...]                one host, N workers (default 8 32 64 128)
#   bench/scale.sh --hosts H [P...]      H network hosts (network namespaces
#                                        on a bridge, as tests/multihost; needs
#                                        root) with P workers each (default 16)
#   bench/scale.sh --load L [N...]       each size twice: alone, then beside L
#                                        processes that burn a CPU each (a busy
#                                        machine: issue 51), rows side by side
# The environment reaches the workers: e.g. TESSERA_TENSORPIPE_SAME_HOST=shm
# or TESSERA_RPC_BACKEND=grpc compares another transport or backend.
set -uo pipefail
cd "$(dirname "$0")/.."
hosts=0
load=0
if [[ ${1:-} == --hosts ]]; then hosts=$2; shift 2; fi
if [[ ${1:-} == --load ]]; then load=$2; shift 2; fi
sizes=("$@")
if [[ ${#sizes[@]} -eq 0 ]]; then
  if [[ $hosts -gt 0 ]]; then sizes=(16); else sizes=(8 32 64 128); fi
fi
bazel build //bench:scale_probe //launcher:tessera-run 2>/dev/null || exit 1
run=$(pwd)/bazel-bin/launcher/tessera-run
probe=$(pwd)/bazel-bin/bench/scale_probe

# Network hosts: namespaces tessera_scale_h<i> at 10.78.0.<i+1>, joined by a
# bridge in tessera_scale_sw; removed on exit.
remove_hosts() {
  for ns in $(ip netns list | awk '/^tessera_scale_/ {print $1}'); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9
    ip netns del "$ns"
  done
}
make_hosts() {
  remove_hosts
  ip netns add tessera_scale_sw
  ip -n tessera_scale_sw link add br0 type bridge
  ip -n tessera_scale_sw link set br0 up
  for ((h = 0; h < hosts; h++)); do
    ip netns add "tessera_scale_h$h"
    ip -n tessera_scale_sw link add "h$h" type veth peer name eth0 netns "tessera_scale_h$h"
    ip -n tessera_scale_sw link set "h$h" master br0
    ip -n tessera_scale_sw link set "h$h" up
    ip -n "tessera_scale_h$h" link set lo up
    ip -n "tessera_scale_h$h" addr add "10.78.0.$((h + 1))/24" dev eth0
    ip -n "tessera_scale_h$h" link set eth0 up
  done
}
if [[ $hosts -gt 0 ]]; then
  make_hosts || exit 1
  trap remove_hosts EXIT
fi

# Runs one job; its combined output goes to $1.
run_job() {
  local log=$1 n=$2
  if [[ $hosts -eq 0 ]]; then
    timeout 900 "$run" --standalone --nproc_per_node "$n" "$probe" >"$log" 2>&1
    return
  fi
  local port=$((20000 + RANDOM % 20000)) pids=() code=0
  for ((h = 0; h < hosts; h++)); do
    timeout 900 ip netns exec "tessera_scale_h$h" "$run" --nnodes "$hosts" --node_rank "$h" \
      --nproc_per_node "$n" --master_addr 10.78.0.1 --master_port "$port" "$probe" \
      >"$log.$h" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
  cat "$log".* >"$log"
  rm -f "$log".*
  return $code
}

# CPU burners beside a job (--load): started by start_load, killed by
# stop_load, and bounded by timeout should the script die first. Each in a
# session of its own, as other users' programs are (tests/rpc/scale_test.cc:
# under the kernel's autogroups each weighs as much as the whole job).
burners=()
start_load() {
  for ((i = 0; i < $1; i++)); do
    setsid timeout 1000 sh -c 'while :; do :; done' &
    burners+=($!)
  done
}
stop_load() {
  [[ ${#burners[@]} -gt 0 ]] && kill "${burners[@]}" 2>/dev/null && wait "${burners[@]}" 2>/dev/null
  burners=()
}
trap stop_load EXIT
loads=(0)
[[ $load -gt 0 ]] && loads=(0 "$load")

printf "%12s %10s %12s %10s %12s %8s %10s\n" workers "start ms" "all-to-all" "rref ms" \
  "shutdown ms" "wall s" finished
for n in "${sizes[@]}"; do
  for busy in "${loads[@]}"; do
    log=$(mktemp)
    start_load "$busy"
    begin=$(date +%s.%N)
    run_job "$log" "$n"
    code=$?
    end=$(date +%s.%N)
    stop_load
    total=$n
    label=$n
    if [[ $hosts -gt 0 ]]; then total=$((hosts * n)); label="${hosts}x$n"; fi
    [[ $busy -gt 0 ]] && label="$label +$busy busy"
    /usr/bin/python3 - "$log" "$label" "$total" "$begin" "$end" "$code" <<'PY'
import re, sys
log, label, total, begin, end, code = sys.argv[1:]
total, begin, end = int(total), float(begin), float(end)
text = open(log, errors="replace").read()
rows = [tuple(float(x) for x in m.groups()) for m in re.finditer(
    r"scale rank \d+ of \d+: start (\d+) ms, all_to_all (\d+) ms, rref (\d+) ms, shutdown (\d+) ms",
    text)]
worst = [max(col) for col in zip(*rows)] if rows else [float("nan")] * 4
print(f"{label:>12} {worst[0]:10.0f} {worst[1]:12.0f} {worst[2]:10.0f} {worst[3]:12.0f} "
      f"{end - begin:8.1f} {len(rows):6d}/{total}" + ("" if code == "0" else f"  (exit {code})"))
if len(rows) < total:
    for line in text.splitlines():
        if "failed" in line or "rror" in line:
            print("    " + line[:300])
            break
PY
    rm -f "$log"
  done
done
