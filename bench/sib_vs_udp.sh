#!/usr/bin/env bash
# libsib's tagged 1 MiB bandwidth across two namespace hosts (UDP link,
# test/integration/hosts.sh) beside the raw UDP stream between the same
# two namespaces (build/bin/udp_raw -t bw, datagrams of softib's 1024-byte
# path MTU payload), interleaved REPS times; prints every run and the
# medians with issue 12's target: libsib >= 0.9x the raw UDP stream.
# With -t lat: the 8-byte latency instead, libsib's tagged ping-pong
# (build/bin/sib_osu lat -s 8, median of 10,000 round trips) beside
# udp_raw's ping-pong (median of as many),
# with issue 11's target: libsib <= 1.5x raw UDP.
#
#   bench/sib_vs_udp.sh [-r REPS] [-t bw|lat]   (root: ip netns; a build)
# Export SOFTIB_SEG_TAG / SOFTIB_UDP_PORT of your own first.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPS=3 TEST=bw
while getopts "r:t:" o; do
	case $o in r) REPS=$OPTARG ;; t) TEST=$OPTARG ;; *) exit 2 ;; esac
done
. test/integration/lib.sh
. test/integration/hosts.sh
trap 'hosts_down; sib_cleanup' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hosts_up 2 || { echo "sib_vs_udp: no network namespaces" >&2; exit 2; }
A=${HOSTS[0]} B=${HOSTS[1]} PORT=${UDP_RAW_PORT:-27088}
out=$SIB_TMP/out
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "# load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$TEST" = lat ]; then
	for ((i = 0; i < REPS; i++)); do
		# osu_latency's count for small messages: 10,000 round trips
		# each side (1,000, all sizes, gave medians that moved between
		# 4 and 6 us from run to run; docs/benchmarks.md)
		HOSTS_TIMEOUT=120 hosts_mpirun 2 1 "$SIB_ROOT/build/bin/sib_osu" lat \
			-s 8 -i 10000 >"$out" 2>&1
		s=$(awk '$1 == 8 { print $3 }' "$out")
		PORT=$((PORT + 1))
		timeout -k 2 40 ip netns exec "$A" build/bin/udp_raw -t lat -s 8 -i 10000 \
			-p "$PORT" >/dev/null 2>&1 &
		sleep 0.3
		timeout -k 2 40 ip netns exec "$B" build/bin/udp_raw -t lat -s 8 -i 10000 \
			-p "$PORT" "${HOSTS_IP[$A]}" >"$out" 2>&1
		wait
		r=$(awk '$1 == 8 { v = $3 } END { print v }' "$out")
		echo "run $i (load $(cut -d' ' -f1 /proc/loadavg)): libsib ${s:-?} us" \
			"  raw UDP ${r:-?} us" | tee -a "$SIB_TMP/all"
	done
	s=$(awk '{ print $6 }' "$SIB_TMP/all" | med)
	r=$(awk '{ print $10 }' "$SIB_TMP/all" | med)
	echo "# medians over $REPS runs (load at end $(cut -d' ' -f1-3 /proc/loadavg)):" \
		"libsib $s us, raw UDP $r us, ratio" \
		"$(awk -v s="$s" -v r="$r" 'BEGIN { if (r > 0) printf "%.1f", s / r; else print "n/a" }')" \
		"(target <= 1.5)"
	exit 0
fi
for ((i = 0; i < REPS; i++)); do
	HOSTS_TIMEOUT=120 hosts_mpirun 2 1 "$SIB_ROOT/build/bin/sib_rma" tag_bw \
		-m 1048576 >"$out" 2>&1
	s=$(awk '$1 == 1048576 { v = $2 } END { print v }' "$out")
	PORT=$((PORT + 1))
	timeout -k 2 40 ip netns exec "$A" build/bin/udp_raw -t bw -m 1m -n 128 \
		-d 1024 -p "$PORT" >/dev/null 2>&1 &
	sleep 0.3
	timeout -k 2 40 ip netns exec "$B" build/bin/udp_raw -t bw -m 1m -n 128 \
		-d 1024 -p "$PORT" "${HOSTS_IP[$A]}" >"$out" 2>&1
	wait
	read -r _ r lost _ < <(awk '$1 == 1048576 { print; exit }' "$out")
	echo "run $i: libsib ${s:-?} MB/s   raw UDP ${r:-?} MB/s (${lost:-?} % lost)" |
		tee -a "$SIB_TMP/all"
done
s=$(awk '{ print $4 }' "$SIB_TMP/all" | med)
r=$(awk '{ print $8 }' "$SIB_TMP/all" | med)
echo "# medians over $REPS runs (load at end $(cut -d' ' -f1-3 /proc/loadavg)):" \
	"libsib $s MB/s, raw UDP $r MB/s, ratio" \
	"$(awk -v s="$s" -v r="$r" 'BEGIN { if (r > 0) printf "%.2f", s / r; else print "n/a" }')" \
	"(target >= 0.9)"
