# Three network hosts for the benchmarks, as tests/testing/network_hosts.h
# makes them for the tests: network namespaces $P h0..h2 joined by a bridge
# in $P sw, host h at 10.<NET>.0.<h + 1>. Sourced; needs root.
#   hosts_up PREFIX NET    hosts_down PREFIX
hosts_up() {
  local p=$1 net=$2 h
  ip netns add "${p}sw"
  ip -n "${p}sw" link add br0 type bridge
  ip -n "${p}sw" link set br0 up
  for h in 0 1 2; do
    ip netns add "${p}h$h"
    ip -n "${p}sw" link add "h$h" type veth peer name eth0 netns "${p}h$h"
    ip -n "${p}sw" link set "h$h" master br0
    ip -n "${p}sw" link set "h$h" up
    ip -n "${p}h$h" link set lo up
    ip -n "${p}h$h" addr add "10.$net.0.$((h + 1))/24" dev eth0
    ip -n "${p}h$h" link set eth0 up
  done
}

# Kills what runs on the hosts and deletes them.
hosts_down() {
  local p=$1 ns pid
  for ns in "${p}h0" "${p}h1" "${p}h2" "${p}sw"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}
