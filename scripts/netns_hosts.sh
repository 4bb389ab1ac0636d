#!/usr/bin/env bash
# scripts/netns_hosts.sh: several simulated "hosts" on one Linux machine, as network
# namespaces joined by a bridge, for multi-node tests of `garden launch`.
#
#   netns_hosts.sh up N [--nets=K]      create N hosts; prints PREFIX, then one
#                                       line per host: NAME ADDR [ADDR2 ...]
#   netns_hosts.sh down PREFIX          kill what runs inside PREFIX's hosts and
#                                       remove every namespace of PREFIX
#   netns_hosts.sh run NS CMD...        run CMD inside host NS
#   netns_hosts.sh cut NS [IF]          set NS's link(s) down (a lost host)
#   netns_hosts.sh heal NS [IF]         set them up again
#   netns_hosts.sh with N [--nets=K] -- CMD...
#                                       up, run CMD (in the root namespace, with
#                                       NETNS_PREFIX, NETNS_HOSTS, NETNS_ADDRS,
#                                       NETNS_IF exported), then down, whatever
#                                       CMD does (trap); exits with CMD's status
#   netns_hosts.sh selftest N           up, ping every pair, cut/heal, down,
#                                       check that nothing is left
#
# Layout (nothing is created in the root namespace):
#   PREFIX=gdn<pid of the `up`>, e.g. gdn12345
#   PREFIX-br        the switch: bridge br0 (and br1.. with --nets), ports v<i>
#   PREFIX-h<i>      host i: lo, and gd0 = 10.231.<X>.<10+i>/24 (gd1 on
#                    10.231.<X+1>.0/24 with --nets=2: a multi-homed host)
# Every host's interface has the same name (gd0), as on a real cluster, so
# GLOO_SOCKET_IFNAME=gd0 is one setting for all. X is NETNS_THIRD_OCTET (default
# 0 -> 10.231.0.0/24); only 10.231.x.0/24 addresses are ever assigned.
# Addresses live only inside the namespaces, so concurrent runs do not clash.
# Needs root and iproute2 (+ iputils-ping for the checks).
set -euo pipefail

die() { echo "netns_hosts: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (ip netns)"
command -v ip >/dev/null || die "needs iproute2 (apt-get install -y iproute2 iputils-ping)"

third=${NETNS_THIRD_OCTET:-0}
case "$third" in '' | *[!0-9]*) die "NETNS_THIRD_OCTET must be 0..254" ;; esac
[ "$third" -le 254 ] || die "NETNS_THIRD_OCTET must be 0..254"

# check_prefix PREFIX: only names this script makes are ever touched.
check_prefix() { [[ "$1" =~ ^gdn[0-9]+$ ]] || die "'$1' is not a prefix of this script (gdn<pid>)"; }
check_ns() {
  [[ "$1" =~ ^(gdn[0-9]+)-h[0-9]+$ ]] || die "'$1' is not a host of this script (gdn<pid>-h<i>)"
  ip netns list | awk '{print $1}' | grep -qx -- "$1" || die "no namespace '$1'"
}
addr_of() {  # addr_of HOST_INDEX NET_INDEX
  echo "10.231.$((third + $2)).$((10 + $1))"
}
namespaces_of() { ip netns list | awk '{print $1}' | grep -E "^$1-(br|h[0-9]+)\$" || true; }

down() {
  local prefix=$1 ns pid
  check_prefix "$prefix"
  for ns in $(namespaces_of "$prefix"); do
    # Processes still inside a host (a test's garden): ours, ended by id.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in $(namespaces_of "$prefix"); do ip netns del "$ns" 2>/dev/null || true; done
  [ -z "$(namespaces_of "$prefix")" ] || { echo "netns_hosts: could not remove all of $prefix" >&2; return 1; }
}

# up N NETS PREFIX: creates everything; prints the layout. The caller's trap
# removes a half-made set.
up() {
  local n=$1 nets=$2 prefix=$3 br i k ns
  br=$prefix-br
  ip netns add "$br"
  ip -n "$br" link set lo up
  for ((k = 0; k < nets; k++)); do
    ip -n "$br" link add "br$k" type bridge stp_state 0 forward_delay 0
    ip -n "$br" link set "br$k" up
  done
  for ((i = 0; i < n; i++)); do
    ns=$prefix-h$i
    # For testing the cleanup: fail on host NETNS_TEST_FAIL_AT, half made.
    [ "${NETNS_TEST_FAIL_AT:-}" != "$i" ] || { echo "netns_hosts: failing at host $i (NETNS_TEST_FAIL_AT)" >&2; return 1; }
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    for ((k = 0; k < nets; k++)); do
      # Made inside the switch's namespace, its peer moved to the host at
      # once: no name ever appears in the root namespace.
      ip -n "$br" link add "v${i}n$k" type veth peer name "gd$k" netns "$ns"
      ip -n "$br" link set "v${i}n$k" master "br$k" up
      ip -n "$ns" addr add "$(addr_of "$i" "$k")/24" dev "gd$k"
      ip -n "$ns" link set "gd$k" up
    done
  done
  echo "PREFIX=$prefix"
  for ((i = 0; i < n; i++)); do
    local line="$prefix-h$i"
    for ((k = 0; k < nets; k++)); do line+=" $(addr_of "$i" "$k")"; done
    echo "$line"
  done
}

# ping_all PREFIX N NETS: every host reaches every other on every net (only
# the addresses assigned above, from inside the namespaces).
ping_all() {
  local prefix=$1 n=$2 nets=$3 i j k tries
  for ((i = 0; i < n; i++)); do
    for ((j = 0; j < n; j++)); do
      [ "$i" = "$j" ] && continue
      for ((k = 0; k < nets; k++)); do
        # The first packet may wait for ARP and the bridge's ports: 3 tries.
        for tries in 1 2 3; do
          ip netns exec "$prefix-h$i" ping -c1 -W1 -q "$(addr_of "$j" "$k")" >/dev/null 2>&1 && break
          [ "$tries" = 3 ] && { echo "netns_hosts: $prefix-h$i cannot reach $(addr_of "$j" "$k")" >&2; return 1; }
        done
      done
    done
  done
  echo "ping: every pair of the $n hosts reaches each other on $nets net(s)"
}

parse_n() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 200 ] || die "N must be 1..200, not '${1:-}'"
}
parse_nets() {
  nets=1
  if [[ "${1:-}" == --nets=* ]]; then
    nets=${1#--nets=}
    [[ "$nets" =~ ^[1-4]$ ]] || die "--nets must be 1..4"
    [ $((third + nets - 1)) -le 254 ] || die "NETNS_THIRD_OCTET + nets - 1 must be <= 254"
    return 0
  fi
  return 1
}

cmd=${1:-}
shift || true
case "$cmd" in
  up)
    parse_n "${1:-}"; n=$1; shift
    parse_nets "${1:-}" && shift || true
    prefix=gdn$$
    [ -z "$(namespaces_of "$prefix")" ] || die "$prefix exists already"
    # On any failure, nothing is left half made.
    trap 'rc=$?; [ $rc = 0 ] || { down "$prefix" || true; echo "netns_hosts: up failed; removed $prefix" >&2; }' EXIT
    up "$n" "$nets" "$prefix"
    ping_all "$prefix" "$n" "$nets" >&2
    trap - EXIT
    ;;
  down)
    [ $# = 1 ] || die "usage: down PREFIX"
    down "$1"
    ;;
  run)
    [ $# -ge 2 ] || die "usage: run NS CMD..."
    check_ns "$1"
    ns=$1; shift
    exec ip netns exec "$ns" "$@"
    ;;
  cut | heal)
    [ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $cmd NS [IF]"
    check_ns "$1"
    state=$([ "$cmd" = cut ] && echo down || echo up)
    ifs=${2:-$(ip -n "$1" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -E '^gd[0-9]+$')}
    for ifname in $ifs; do
      [[ "$ifname" =~ ^gd[0-9]+$ ]] || die "'$ifname' is not a host interface (gd<k>)"
      ip -n "$1" link set "$ifname" "$state"
    done
    echo "$1: $(echo $ifs) $state"
    ;;
  with)
    parse_n "${1:-}"; n=$1; shift
    parse_nets "${1:-}" && shift || true
    [ "${1:-}" = -- ] && shift
    [ $# -ge 1 ] || die "usage: with N [--nets=K] -- CMD..."
    prefix=gdn$$
    trap 'down "$prefix" || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    layout=$(up "$n" "$nets" "$prefix")
    ping_all "$prefix" "$n" "$nets" >&2
    export NETNS_PREFIX=$prefix NETNS_IF=gd0
    NETNS_HOSTS=$(echo "$layout" | awk 'NR > 1 {print $1}' | tr '\n' ' ')
    NETNS_ADDRS=$(echo "$layout" | awk 'NR > 1 {print $2}' | tr '\n' ' ')
    export NETNS_HOSTS=${NETNS_HOSTS% } NETNS_ADDRS=${NETNS_ADDRS% }
    export NETNS_SCRIPT
    NETNS_SCRIPT=$(readlink -f "$0")
    # In the background, so that a signal to this script is handled at once
    # (bash runs a trap only after a foreground command ends): the command is
    # ended (by its id), then down removes the hosts and what runs in them.
    "$@" &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null; exit 143' TERM
    trap 'kill -INT "$child" 2>/dev/null; exit 130' INT
    status=0
    wait "$child" || status=$?
    exit $status
    ;;
  selftest)
    parse_n "${1:-}"; n=$1
    [ "$n" -ge 2 ] || die "selftest needs N >= 2"
    prefix=gdn$$
    trap 'down "$prefix" || true' EXIT
    up "$n" 2 "$prefix"
    ping_all "$prefix" "$n" 2
    # A cut host is unreachable (and reaches nobody); healed, it is back.
    cut_ns=$prefix-h$((n - 1)) far=$(addr_of $((n - 1)) 0)
    ip -n "$cut_ns" link set gd0 down
    if ip netns exec "$prefix-h0" ping -c1 -W1 -q "$far" >/dev/null 2>&1; then
      echo "selftest: $far still answers after cut" >&2; exit 1
    fi
    echo "cut: $prefix-h0 -> $far (gd0 of $cut_ns down) gets no answer"
    if ip netns exec "$prefix-h0" ping -c1 -W1 -q "$(addr_of $((n - 1)) 1)" >/dev/null 2>&1; then
      echo "cut: the second net (gd1) of $cut_ns still answers: a multi-homed host"
    else
      echo "selftest: gd1 of $cut_ns did not answer" >&2; exit 1
    fi
    ip -n "$cut_ns" link set gd0 up
    ping_all "$prefix" "$n" 1 | sed 's/^/heal: /'
    # Isolation: inside a host, nothing of the root namespace is seen.
    if ip netns exec "$prefix-h0" ip -o link show | grep -qv -E ': (lo|gd[0-9]+)[@:]'; then
      echo "selftest: $prefix-h0 has interfaces beyond lo and gd*" >&2; exit 1
    fi
    echo "isolation: $prefix-h0 has only $(ip netns exec "$prefix-h0" ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); printf "%s ", $2}')"
    down "$prefix"
    trap - EXIT
    [ -z "$(namespaces_of "$prefix")" ] || { echo "selftest: namespaces left" >&2; exit 1; }
    echo "down: no namespace of $prefix left"
    ;;
  *)
    sed -n '2,30p' "$0" >&2
    exit 2
    ;;
esac
