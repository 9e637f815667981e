#!/usr/bin/env bash
# The inter-host link for real: two hosts made of network namespaces joined
# by a veth pair (created here, removed at exit; traffic stays inside
# them). Each namespace is a host with its own softib segment, so every
# byte crosses the UDP link as RoCEv2 datagrams:
#   - Debian's pingpongs (RC, UC, UD, SRQ) with GIDs (-g 0), sizes across
#     the path MTU (the veth's 1500-byte MTU gives IB MTU 1024);
#   - the same under built-in fault injection (loss, duplication,
#     reordering, corruption) with -c (every byte validated): RC recovers;
#   - perftest across the hosts (send, write, read, atomics);
#   - a pcap of the run that tshark decodes as InfiniBand.
# Needs root (ip netns); skipped, not failed, without it.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
	echo "test_udp_netns: needs root and iproute2: skipped"
	exit 0
fi

NA=sibA$$ NB=sibB$$
IPA=10.77.$(($$ % 200)).1 IPB=10.77.$(($$ % 200)).2
LIB=$(sib_lib)

netns_down() {
	ip netns pids "$NA" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns pids "$NB" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns del "$NA" 2>/dev/null
	ip netns del "$NB" 2>/dev/null
}
trap 'netns_down; sib_cleanup' EXIT

netns_up() {
	ip netns add "$NA" && ip netns add "$NB" &&
		ip link add "va$$" type veth peer name "vb$$" &&
		ip link set "va$$" netns "$NA" && ip link set "vb$$" netns "$NB" &&
		ip -n "$NA" addr add "$IPA/24" dev "va$$" &&
		ip -n "$NB" addr add "$IPB/24" dev "vb$$" &&
		ip -n "$NA" link set lo up && ip -n "$NB" link set lo up &&
		ip -n "$NA" link set "va$$" up && ip -n "$NB" link set "vb$$" up
}

if ! netns_up; then
	echo "test_udp_netns: cannot create network namespaces: skipped"
	exit 0
fi

# in_ns NS SECS CMD...: CMD inside namespace NS with the library, bounded.
in_ns() {
	local ns=$1 secs=$2
	shift 2
	timeout -k 5 "$secs" ip netns exec "$ns" env LD_LIBRARY_PATH="$LIB" "$@" </dev/null
}

# ns_pair NAME SECS PORT "ENV" SERVER_ARGS... : server in A, client in B.
ns_pair() {
	local name=$1 secs=$2 port=$3 envs=$4 slog clog spid src crc i
	shift 4
	slog=$SIB_TMP/$name.server.log
	clog=$SIB_TMP/$name.client.log
	# shellcheck disable=SC2086
	in_ns "$NA" "$secs" env $envs ${server_env:-} "$@" -p "$port" >"$slog" 2>&1 &
	spid=$!
	for ((i = 0; i < 50; i++)); do
		ip netns exec "$NA" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
		sleep 0.1
	done
	# shellcheck disable=SC2086
	in_ns "$NB" "$secs" env $envs "$@" -p "$port" "$IPA" >"$clog" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	if [ "$src" = 0 ] && [ "$crc" = 0 ]; then
		pass "$name"
	elif [ -n "${lossy_end_ok:-}" ] && lossy_end "$src" "$slog" "$crc" "$clog"; then
		pass "$name (the last ACK was lost after the peer had left: see above)"
	else
		fail "$name (server $src, client $crc)"
		tail -n 20 "$slog" "$clog"
	fi
}

# On a lossy wire the pingpongs can end one way only a fabric allows:
# one side has every message (it exits 0 with its summary) and leaves; the
# ACK of the other side's last message was lost, and can no longer be
# sent again, so that side's last WR ends in "transport retry counter
# exceeded" and nothing else. lossy_end SRC SLOG CRC CLOG accepts exactly
# that, and only where lossy_end_ok is set.
lossy_end() {
	local a=$1 alog=$2 b=$3 blog=$4
	if [ "$a" != 0 ]; then
		local t=$a tl=$alog
		a=$b alog=$blog b=$t blog=$tl
	fi
	[ "$a" = 0 ] && grep -q "iters in" "$alog" &&
		[ "$(grep -c "Failed status" "$blog")" = 1 ] &&
		grep -q "Failed status transport retry counter exceeded" "$blog" &&
		! grep -Eq "invalid data|Couldn't" "$blog"
}

echo "hosts: $NA ($IPA) <-> $NB ($IPB), veth MTU 1500"
in_ns "$NA" 10 ibv_devinfo -v | grep -E "active_mtu|GID\[ *0\]|port_lid" | sed 's/^/  A: /'

n=200
sib_long && n=20000

pingpongs=(
	"rc-default ibv_rc_pingpong -g 0 -n $n"
	"rc-4k-checked ibv_rc_pingpong -g 0 -n $n -s 4096 -c"
	"rc-64k-events ibv_rc_pingpong -g 0 -n 50 -s 65536 -e -c"
	"rc-1m ibv_rc_pingpong -g 0 -n 20 -s 1048576 -c"
	"uc-default ibv_uc_pingpong -g 0 -n $n -s 1024"
	"uc-4k-checked ibv_uc_pingpong -g 0 -n $n -s 4096 -c"
	"ud-default ibv_ud_pingpong -g 0 -n $n -s 1024"
	"srq-default ibv_srq_pingpong -g 0 -n $n -s 4096"
	"xsrq-default ibv_xsrq_pingpong -g 0 -m 1024"
	"xsrq-events ibv_xsrq_pingpong -g 0 -m 1024 -e -s 65536"
)
for c in "${pingpongs[@]}"; do
	read -r name cmd <<<"$c"
	# shellcheck disable=SC2086
	ns_pair "udp-$name" 120 "$(free_port)" "" $cmd -d softib0
done

# Reliability: the wire loses, duplicates, reorders and corrupts; RC's
# retransmission delivers every byte, checked by -c. Faults are injected on
# the server's side only: the pingpongs end without a handshake of their
# own, so a client that has what it waited for exits, and the ACK of its
# last message, were it lost, could never be sent again — on any fabric.
server_env="SOFTIB_FAULT=loss=0.05,dup=0.02,reorder=0.03,corrupt=0.01,seed=7"
lossy_end_ok=1
ns_pair "udp-rc-faults-4k" 180 "$(free_port)" "" \
	ibv_rc_pingpong -d softib0 -g 0 -n 300 -s 4096 -c
ns_pair "udp-rc-faults-64k" 180 "$(free_port)" "" \
	ibv_rc_pingpong -d softib0 -g 0 -n 30 -s 65536 -c
ns_pair "udp-srq-faults" 180 "$(free_port)" "" \
	ibv_srq_pingpong -d softib0 -g 0 -n 200 -s 2048
server_env= lossy_end_ok=

# perftest across the hosts (-x 0: address by GID).
for t in ib_send_lat ib_send_bw ib_write_bw ib_read_lat ib_read_bw ib_atomic_lat; do
	ns_pair "udp-$t" 120 "$(free_port)" "" $t -d softib0 -x 0 -n 500 -F
done

# Capture: every packet of a run, decoded by tshark as InfiniBand.
if command -v tshark >/dev/null; then
	pcap=$SIB_TMP/run.pcap
	ns_pair "udp-pcap-run" 60 "$(free_port)" "SOFTIB_PCAP=$pcap" \
		ibv_rc_pingpong -d softib0 -g 0 -n 20 -s 2000
	pkts=$(sib_tshark -r "$pcap" -Y infiniband 2>/dev/null | wc -l)
	# (tshark's RPC-over-RDMA heuristic mislabels short SENDs: off)
	decoded=$(sib_tshark -r "$pcap" -V --disable-heuristic rpcrdma_infiniband 2>/dev/null)
	bad=$(grep -c "Malformed" <<<"$decoded")
	if [ "$pkts" -gt 40 ] && [ "$bad" = 0 ] && grep -q "SEND First" <<<"$decoded"; then
		pass "pcap: $pkts InfiniBand packets, SEND First decoded, none malformed"
	else
		fail "pcap: $pkts InfiniBand packets, $bad malformed"
	fi
fi

summary
