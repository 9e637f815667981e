#!/usr/bin/env bash
# libsib's 8-byte tagged message rate (build/bin/sib_osu rate: an
# osu_mbw_mr-style window of sends, the receiver's window of receives,
# a 1-byte answer per window; windows holding 10,000 messages go first,
# untimed, as ucx_perftest's 10,000 warm-up iterations) beside UCX's
# (ucx_perftest -t tag_bw -s 8,
# UCX_TLS=sm,self, server and client on 127.0.0.1), two processes on one
# host, interleaved REPS times so that the machine's load falls on both
# alike; prints every run and the medians with issue 11's target:
#   libsib message rate >= 1.0x UCX's.
# Also libsib with batching off (SIB_BATCH_MAX=0: one SEND per message) in
# the same rounds, and with -x the rate across two namespace hosts (UDP
# link; no target there, and no UCX: its sm transport needs one host).
#
#   bench/sib_rate_vs_ucx.sh [-r REPS] [-w WINDOW] [-i MSGS] [-x]
# Export SOFTIB_SEG_TAG / SOFTIB_UDP_PORT of your own first.  UCX_PORT
# (default 27079) is the ucx_perftest server's TCP port on 127.0.0.1.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPS=5 WIN=64 MSGS=200000 XHOST=0
while getopts "r:w:i:x" o; do
	case $o in r) REPS=$OPTARG ;; w) WIN=$OPTARG ;; i) MSGS=$OPTARG ;;
		x) XHOST=1 ;; *) exit 2 ;; esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PORT=${UCX_PORT:-27079}
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

ucx() { # -> UCX's overall message rate, M msg/s
	UCX_TLS=sm,self timeout 60 ucx_perftest -p "$PORT" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.5
	UCX_TLS=sm,self timeout 60 ucx_perftest 127.0.0.1 -p "$PORT" -t tag_bw \
		-s 8 -n "$MSGS" >"$tmp/u" 2>&1
	wait $srv
	awk '/^Final:/ { printf "%.3f\n", $NF / 1e6 }' "$tmp/u"
}
sib() { # [VAR=VALUE...] -> libsib's rate, M msg/s
	local xs=()
	for kv in "$@"; do xs+=(-x "$kv"); done
	env "$@" timeout 120 mpirun -np 2 "${xs[@]}" build/bin/sib_osu rate \
		-w "$WIN" -i "$MSGS" >"$tmp/s" 2>&1
	awk '/message rate/ { print $NF == "msg/s" ? $(NF - 2) : $NF }' "$tmp/s"
}
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "# load at start: $(cut -d' ' -f1-3 /proc/loadavg); window $WIN, $MSGS messages"
for ((i = 0; i < REPS; i++)); do
	s=$(sib) u=$(ucx) o=$(sib SIB_BATCH_MAX=0)
	echo "run $i (load $(cut -d' ' -f1 /proc/loadavg)): libsib ${s:-?}" \
		"  ucx ${u:-?}   libsib unbatched ${o:-?}  M msg/s" | tee -a "$tmp/all"
done
s=$(awk '{ print $6 }' "$tmp/all" | med)
u=$(awk '{ print $8 }' "$tmp/all" | med)
o=$(awk '{ print $11 }' "$tmp/all" | med)
echo "# medians over $REPS runs (load at end $(cut -d' ' -f1-3 /proc/loadavg)):" \
	"libsib $s, ucx $u, libsib unbatched $o M msg/s; libsib/ucx" \
	"$(awk -v s="$s" -v u="$u" 'BEGIN { if (u > 0) printf "%.2f", s / u; else print "n/a" }')" \
	"(target >= 1.0)"

[ "$XHOST" = 1 ] || exit 0
. test/integration/lib.sh
. test/integration/hosts.sh
cleanup() { hosts_down; sib_cleanup; rm -rf "$tmp"; }
hosts_up 2 || { echo "sib_rate_vs_ucx: no network namespaces" >&2; exit 2; }
: >"$tmp/x"
for ((i = 0; i < REPS; i++)); do
	for b in 2048 0; do
		HOSTS_TIMEOUT=120 hosts_mpirun 2 1 env SIB_BATCH_MAX=$b \
			"$SIB_ROOT/build/bin/sib_osu" rate -w "$WIN" -i "$MSGS" \
			>"$tmp/s" 2>&1
		r=$(awk '/message rate/ { print $(NF - 2) }' "$tmp/s")
		echo "$b ${r:-0}" >>"$tmp/x"
	done
	echo "cross-host run $i: libsib $(awk -v i=$((2 * i + 1)) 'NR == i { print $2 }' "$tmp/x")" \
		"  unbatched $(awk -v i=$((2 * i + 2)) 'NR == i { print $2 }' "$tmp/x") M msg/s"
done
echo "# cross-host medians over $REPS runs (load $(cut -d' ' -f1-3 /proc/loadavg)):" \
	"libsib $(awk '$1 == 2048 { print $2 }' "$tmp/x" | med)," \
	"unbatched $(awk '$1 == 0 { print $2 }' "$tmp/x" | med) M msg/s"
