#!/usr/bin/env bash
# What a failure costs, by approach (issue 24): each job is run undisturbed,
# then again with one worker killed (SIGKILL) at the same point of progress.
#   - parameter server, elastic trainers (--elastic_roles trainer): the
#     trainer restarts alone; also the time from the kill to the server
#     noticing, and from the restart to the trainer training again;
#   - parameter server, torchrun's way: the group restarts (--max_restarts 1)
#     and resumes from its last checkpoint (--checkpoint_every 100);
#   - fault-tolerant DDP (3 replicas): the replica restarts alone and
#     recovers from a live peer; its per-step cost against plain DDP;
#   - DDP, torchrun's way: group restart from the last checkpoint.
# Prints one line per measurement. Usage: bench/recovery.sh
#
# bench/recovery.sh --across_hosts [runs] (issue 31; root, as the tests
# that make network hosts): a cluster's failures on three network hosts,
# measured by the multi-host tests themselves (each prints its timings):
# a lost machine (link down, every process on it SIGKILLed) and a link cut
# past the job's timeouts that heals, for the parameter server, fault-tolerant DDP, DDP,
# pipeline and hybrid; and the parameter server's accuracy undisturbed (the
# same 500 steps) beside its accuracy after each fault. Prints every timing
# line of `runs` runs (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--across_hosts" ]]; then
  for ((run = 1; run <= ${2:-1}; run++)); do
    bazel test //tests/multihost:multihost_cluster_faults_test \
        //tests/multihost:multihost_regroup_test //tests/multihost:multihost_test \
        --test_filter='MultiHostClusterFaultsTest.*:Shapes/MultiHost*:MultiHostTest.TheParameterServer*' \
        --cache_test_results=no --test_output=all 2>&1 |
      grep -E "^(the server noticed|replica 2 recovered|host 2's link was cut|parameter server|[a-z]+: (node [0-9] declared lost|training again|the group resumed|host 2's link was cut))" |
      sed "s/^/run $run: /"
  done
  exit 0
fi
bazel build //launcher:tessera-run //examples/parameter_server //examples/ddp_fashion_mnist \
    //examples/fault_tolerant_ddp >/dev/null 2>&1
RUN=bazel-bin/launcher/tessera-run
PS=bazel-bin/examples/parameter_server/parameter_server
DDP=bazel-bin/examples/ddp_fashion_mnist/ddp_fashion_mnist
FT=bazel-bin/examples/fault_tolerant_ddp/fault_tolerant_ddp
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
now() { date +%s.%N; }

# run NAME KILL_AFTER RANK ARGS...: runs tessera-run ARGS, kills RANK's worker
# once its output has KILL_AFTER lines matching "step " (0: no kill); prints
# the wall time; leaves the output in $TMP/NAME.log and the kill time in
# $TMP/NAME.kill.
run() {
  local name=$1 kill_after=$2 rank=$3
  shift 3
  local log=$TMP/$name.log start
  start=$(now)
  TESSERA_TEST_JOB="$name-$$" "$RUN" "$@" >"$log" 2>&1 &
  local launcher=$!
  if ((kill_after > 0)); then
    # Polls the log (a benchmark, not a test); stops if the job ended first.
    while kill -0 "$launcher" 2>/dev/null &&
          (($(grep -c "step " "$log" || true) < kill_after)); do
      sleep 0.05
    done
    for pid in $(pgrep -f "bazel-bin/examples/" || true); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "TESSERA_TEST_JOB=$name-$$" &&
         tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$rank"; then
        now >"$TMP/$name.kill"
        kill -9 "$pid"
      fi
    done
  fi
  wait "$launcher"
  echo "$(now) - $start" | bc
}

ps_args=(--standalone --nproc_per_node 3)
ps_flags=(--epochs 1 --max_steps 600 --log_every 20)
t0=$(run ps 0 0 "${ps_args[@]}" "$PS" "${ps_flags[@]}")
t1=$(run ps_elastic 12 1 "${ps_args[@]}" --elastic_roles trainer --max_restarts 1 "$PS" \
     "${ps_flags[@]}")
t2=$(run ps_restart 12 1 "${ps_args[@]}" --max_restarts 1 "$PS" "${ps_flags[@]}" \
     --checkpoint_dir "$TMP/ps_ckpt" --checkpoint_every 100)
noticed=$(grep -o "\[ps\] [0-9.]*: trainer1 (rank 1) failed" "$TMP/ps_elastic.log" |
          head -1 | grep -o "[0-9]*\.[0-9]*")
again=$(grep -o "trainer1 training again [0-9.]* s" "$TMP/ps_elastic.log" | grep -o "[0-9.]* s")
echo "parameter server, 600 steps: undisturbed ${t0} s"
echo "  trainer killed, elastic restart: ${t1} s (lost $(echo "$t1 - $t0" | bc) s);" \
     "death noticed by the server after $(echo "($noticed - $(cat "$TMP/ps_elastic.kill")) * 1000" |
     bc) ms; trainer training again ${again} after the server noticed"
echo "  trainer killed, group restart + checkpoint: ${t2} s (lost $(echo "$t2 - $t0" | bc) s)"

ddp_args=(--standalone --nproc_per_node 3)
d0=$(run ddp 0 0 "${ddp_args[@]}" "$DDP" --epochs 1 --max_steps 300 --log_every 25)
f0=$(run ft 0 0 "${ddp_args[@]}" "$FT" --steps 300 --log_every 25)
f1=$(run ft_kill 6 1 "${ddp_args[@]}" --elastic_roles replica --max_restarts 1 "$FT" --steps 300 \
     --log_every 25)
d1=$(run ddp_restart 6 1 "${ddp_args[@]}" --max_restarts 1 "$DDP" --epochs 1 --max_steps 300 \
     --log_every 25 --checkpoint_dir "$TMP/ddp_ckpt" --checkpoint_every 50)
# Per step, without start-up: the difference between 300 and 60 steps.
d60=$(run ddp60 0 0 "${ddp_args[@]}" "$DDP" --epochs 1 --max_steps 60 --log_every 25)
f60=$(run ft60 0 0 "${ddp_args[@]}" "$FT" --steps 60 --log_every 25)
ddp_step=$(echo "scale=1; ($d0 - $d60) * 1000 / 240" | bc)
ft_step=$(echo "scale=1; ($f0 - $f60) * 1000 / 240" | bc)
echo "DDP, 300 steps of 3 ranks: plain DDP ${d0} s, ${ddp_step} ms a step; fault-tolerant DDP" \
     "${f0} s, ${ft_step} ms a step (ratio $(echo "scale=2; $ft_step / $ddp_step" | bc));" \
     "quorum and commit $(grep -o "took [0-9.]* ms a step" "$TMP/ft.log" | head -1)"
echo "  replica killed, fault-tolerant (restarted alone, recovered from a peer): ${f1} s" \
     "(lost $(echo "$f1 - $f0" | bc) s)"
echo "  rank killed, DDP group restart + checkpoint: ${d1} s (lost $(echo "$d1 - $d0" | bc) s)"
