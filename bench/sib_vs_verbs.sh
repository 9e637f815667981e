#!/usr/bin/env bash
# The overhead libsib adds over the verbs it runs on, in one run: the
# 8-byte one-way latency of libsib's tagged ping-pong (build/bin/sib_osu
# lat, two ranks under mpirun, median) beside softib's RC SEND ping-pong
# (build/bin/softib_osu -t lat -M, median) and UCX's tag_lat over
# shared memory (ucx_perftest, typical), and the floor (build/bin/shm_floor:
# a cache line each way between two processes, pinned to CPUs 0 and 1),
# interleaved REPS times, the load average printed with each round.
# Issue 11's target: libsib adds less than ~0.1 us over the verbs
# latency, and is <= 1.0x UCX tag_lat. The floor tells the machine's
# state: this VM moves between one where a line crosses between the two
# CPUs in ~0.08 us and one where it takes several times that, and the
# ratio to UCX differs between them (docs/benchmarks.md).
#
#   bench/sib_vs_verbs.sh [-r REPS] [-i ITERS]
# Export SOFTIB_SEG_TAG / SOFTIB_UDP_PORT of your own first. PORT (default
# 27079) is the TCP port softib_osu and ucx_perftest meet on.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPS=3 ITERS=20000
while getopts "r:i:" o; do
	case $o in r) REPS=$OPTARG ;; i) ITERS=$OPTARG ;; *) exit 2 ;; esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PORT=${PORT:-27079}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for ((i = 0; i < REPS; i++)); do
	load=$(cut -d' ' -f1 /proc/loadavg)
	timeout 120 mpirun -np 2 --bind-to core build/bin/sib_osu lat -i "$ITERS" \
		>"$tmp/s" 2>&1
	s=$(awk '$1 == 8 { print $3 }' "$tmp/s")
	timeout 60 taskset -c 0 build/bin/softib_osu -t lat -M -m 8 -n "$ITERS" -p "$PORT" \
		>/dev/null 2>&1 &
	sleep 0.5
	timeout 60 taskset -c 1 build/bin/softib_osu -t lat -M -m 8 -n "$ITERS" -p "$PORT" \
		127.0.0.1 >"$tmp/v" 2>&1
	wait
	v=$(awk '$1 == 8 { print $3 }' "$tmp/v")
	UCX_TLS=sm,self timeout 60 ucx_perftest -p "$PORT" >/dev/null 2>&1 &
	sleep 0.5
	UCX_TLS=sm,self timeout 60 ucx_perftest 127.0.0.1 -p "$PORT" -t tag_lat -s 8 \
		-n "$ITERS" >"$tmp/u" 2>&1
	wait
	u=$(awk '/^Final:/ { print $3 }' "$tmp/u")
	f=$(timeout 60 build/bin/shm_floor -m 8 -n "$ITERS" 2>/dev/null | awk '$1 == 8 { print $2 }')
	echo "run $i (load $load): libsib ${s:-?} us   verbs ${v:-?} us   ucx ${u:-?} us   floor ${f:-?} us" |
		tee -a "$tmp/all"
done
s=$(awk '{ print $6 }' "$tmp/all" | med)
v=$(awk '{ print $9 }' "$tmp/all" | med)
u=$(awk '{ print $12 }' "$tmp/all" | med)
f=$(awk '{ print $15 }' "$tmp/all" | med)
echo "# medians over $REPS runs (load at end $(cut -d' ' -f1-3 /proc/loadavg)):" \
	"libsib $s us, verbs $v us (libsib adds" \
	"$(awk -v s="$s" -v v="$v" 'BEGIN { printf "%.2f", s - v }') us), ucx $u us" \
	"(libsib/ucx $(awk -v s="$s" -v u="$u" 'BEGIN { if (u > 0) printf "%.2f", s / u; else print "n/a" }'))," \
	"floor $f us"
