#!/usr/bin/env bash
# A/B across two namespace hosts: the 8-byte latency of this tree against
# a baseline build of another tree (e.g. main, built into its own build/),
# interleaved round by round, with the raw UDP ping-pong and verbs RC
# (udp_rc) between the same hosts after each pair, and the UDP datagrams
# host A received and sent during each run (/proc/net/snmp of its
# namespace: includes the ACKs, so it shows what an ACK policy costs).
#
#   bench/sib_ab_hosts.sh [-r ROUNDS] [-t sib|mpi] [-i ITERS] BASE_TREE
#
#   -t sib   libsib's tagged ping-pong (build/bin/sib_osu lat -s 8), median
#   -t mpi   MPI over --mca btl self,softib (build/bin/mpi_osu -t lat -m 8:8
#            -M), median, each tree's own component
# With A_WRAP=/path/to/wrapper each rank runs under it (e.g. a script that
# execs `perf stat -e 'syscalls:sys_enter_send*' -o FILE "$@"`; SIB_AB_TREE
# names the tree, OMPI_COMM_WORLD_RANK the rank). Needs root (ip netns).
# Export SOFTIB_SEG_TAG / SOFTIB_UDP_PORT of your own first; set
# HOSTS_NAME_PREFIX to tag the namespaces (test/integration/hosts.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROUNDS=3 MODE=sib ITERS=10000
while getopts "r:t:i:" o; do
	case $o in r) ROUNDS=$OPTARG ;; t) MODE=$OPTARG ;; i) ITERS=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
BASE=${1:-}
NEW=$PWD
[ -n "$BASE" ] && [ -x "$BASE/build/bin/sib_osu" ] ||
	{ echo "sib_ab_hosts: BASE_TREE with a build (build/bin/sib_osu) wanted" >&2; exit 2; }
BASE=$(cd "$BASE" && pwd)
. test/integration/hosts.sh
. test/integration/ompi.sh
trap hosts_down EXIT
hosts_up 2 || { echo "sib_ab_hosts: no network namespaces" >&2; exit 2; }
A=${HOSTS[0]} B=${HOSTS[1]} PORT=${UDP_RAW_PORT:-27188}
OMPI_DEF=$(ompi_info --param mca all --level 9 --parsable 2>/dev/null |
	sed -n 's/^mca:mca:base:param:mca_base_component_path:value:"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' |
	tr ':' '\n' | while read -r d; do [ -d "$d" ] && printf '%s:' "$d"; done)

# UDP datagrams in and out of host A so far
snmp() { ip netns exec "$A" awk '/^Udp:/ { if (++n == 2) print $2, $5 }' /proc/net/snmp; }

# run TREE: the median (us) and the datagrams of one run
run() {
	local t=$1 b a wrap=()
	[ -n "${A_WRAP:-}" ] && wrap=("$A_WRAP")
	b=$(snmp)
	if [ "$MODE" = sib ]; then
		HOSTS_TIMEOUT=90 hosts_mpirun 2 1 -x LD_LIBRARY_PATH="$t/build/lib" \
			-x SIB_AB_TREE="$t" "${wrap[@]}" "$t/build/bin/sib_osu" lat -s 8 \
			-i "$ITERS" 2>&1 | awk '$1 == 8 { printf "%s", $3 }'
	else
		HOSTS_TIMEOUT=120 hosts_mpirun 2 1 --mca mca_base_component_path \
			"$OMPI_DEF$t/build/lib/openmpi" --mca btl self,softib \
			-x LD_LIBRARY_PATH="$t/build/lib" -x SIB_AB_TREE="$t" "${wrap[@]}" \
			"$t/build/bin/mpi_osu" -t lat -m 8:8 -i "$ITERS" -M 2>&1 |
			awk '$1 == 8 { printf "%s", $2 }'
	fi
	a=$(snmp)
	echo "$b $a" | awk '{ printf " (datagrams in %d out %d)", $3 - $1, $4 - $2 }'
}

# pair PROG: the ping-pong's line for 8 B between the hosts (server in A)
pair() {
	PORT=$((PORT + 1))
	timeout -k 2 40 ip netns exec "$A" "$@" -p "$PORT" >/dev/null 2>&1 &
	sleep 0.3
	timeout -k 2 40 ip netns exec "$B" "$@" -p "$PORT" "${HOSTS_IP[$A]}" 2>&1 |
		awk '$1 == 8 { l = $0 } END { print l }'
	wait
}

med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "# $MODE 8 B across two hosts: base $BASE, new $NEW; load $(cut -d' ' -f1-3 /proc/loadavg)"
all=$(mktemp)
for ((i = 0; i < ROUNDS; i++)); do
	b=$(run "$BASE") n=$(run "$NEW")
	r=$(pair build/bin/udp_raw -t lat -s 8 -i 5000 | awk '{ print $3 }')
	v=$(pair build/bin/udp_rc -t lat -s 8 -i 5000 | awk '{ print $3 }')
	echo "round $i (load $(cut -d' ' -f1 /proc/loadavg)): base $b  new $n  raw UDP ${r:-?}  udp_rc ${v:-?}" |
		tee -a "$all"
done
mb=$(awk '{ print $6 }' "$all" | med) mn=$(awk '{ print $13 }' "$all" | med)
mr=$(awk '{ print $21 }' "$all" | med)
echo "# medians: base $mb us, new $mn us, raw UDP $mr us; new / raw" \
	"$(awk -v s="$mn" -v r="$mr" 'BEGIN { if (r > 0) printf "%.2f", s / r }')," \
	"base / raw $(awk -v s="$mb" -v r="$mr" 'BEGIN { if (r > 0) printf "%.2f", s / r }')" \
	"(load $(cut -d' ' -f1-3 /proc/loadavg))"
rm -f "$all"
