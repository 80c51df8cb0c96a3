#!/usr/bin/env bash
# Runs a command at idle CPU priority: it gets only the CPU nothing else
# wants. CI builds the sanitizer binaries so, beside the main suite.
#   scripts/idle_priority.sh COMMAND [ARGS...]
#
# Why not `nice -n 19`: with the kernel's autogroups (on by default) nice
# weighs a process only against others of its session, and Bazel runs every
# action in a session of its own (its process-wrapper calls setsid). Niced
# builds then took half the CPU from the tests beside them: the multi-host
# cluster-fault test ran 587 s instead of 327 s. A CPU cgroup marked idle
# (cpu.idle, Linux 5.15+) holds whatever its processes start, sessions or
# not. Where no such cgroup can be made (not root, no cgroup fs), the
# command runs niced, and this says so.
set -uo pipefail
if [[ $# -eq 0 ]]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
group=""
for root in /sys/fs/cgroup/cpu /sys/fs/cgroup; do  # cgroup v1, then v2
  candidate=$root/tessera-idle.$$
  if [[ -f $root/cpu.shares || -f $root/cgroup.controllers ]] &&
    mkdir "$candidate" 2>/dev/null; then
    if echo 1 >"$candidate/cpu.idle" 2>/dev/null && echo $$ >"$candidate/cgroup.procs" 2>/dev/null; then
      group=$candidate
      break
    fi
    rmdir "$candidate" 2>/dev/null
  fi
done
if [[ -z $group ]]; then
  echo "idle_priority: no idle CPU cgroup could be made here; running niced instead," \
    "which the kernel's autogroups may ignore" >&2
  exec nice -n 19 "$@"
fi
"$@"
status=$?
# What the command left running (a Bazel server) goes back to normal
# priority with this shell, and the emptied group is removed.
while read -r pid; do
  echo "$pid" >"$(dirname "$group")/cgroup.procs" 2>/dev/null
done <"$group/cgroup.procs"
rmdir "$group" 2>/dev/null
exit "$status"
