#!/usr/bin/env bash
# libsib (bench/sib_rma.c) beside ucx_perftest over shared memory (UCX_TLS
# sm,self: CMA for large messages), one host, interleaved REPS times so
# that the machine's load falls on both alike; prints every figure and the
# medians with the ratios to the targets of issue 12:
#   1 MiB tagged bandwidth >= 1.0x UCX tag_bw;
#   8 B put / get latency <= 1.2x UCX ucp_put_lat / ucp_get.
# libsib's one-sided figures target a region that sib_mem_map allocates
# (a shared memfd: the HCA's mapping route, no system call per operation,
# as UCX's own allocated buffers); "malloc" rows give the same with the
# application's malloc'd region (cross-memory attach, one system call).
#
#   bench/sib_vs_ucx.sh [-r REPS]
# Export SOFTIB_SEG_TAG / SOFTIB_UDP_PORT of your own first.  UCX_PORT
# (default 27077) is the ucx_perftest server's TCP port on 127.0.0.1.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPS=3
while getopts "r:" o; do case $o in r) REPS=$OPTARG ;; *) exit 2 ;; esac; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 UCX_TLS=sm,self
PORT=${UCX_PORT:-27077}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

ucx() { # ucx TEST SIZE ITERS -> the 50th percentile latency (usec) or MB/s
	timeout 60 ucx_perftest -p "$PORT" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.5
	timeout 60 ucx_perftest 127.0.0.1 -p "$PORT" -t "$1" -s "$2" -n "$3" \
		>"$tmp/u" 2>&1
	wait $srv
	awk -v t="$1" '/^Final:/ { if (t ~ /bw/) print $7; else print $3 }' "$tmp/u"
}
sib() { # sib TEST SIZE [ALLOC] -> the figure at SIZE
	timeout 120 mpirun -np 2 build/bin/sib_rma "$1" -m "$((4 << 20))" \
		-a "${3:-memfd}" >"$tmp/s" 2>&1
	awk -v s="$2" '$1 == s { v = $2 } END { print v }' "$tmp/s"
}
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for ((i = 0; i < REPS; i++)); do
	echo "sib tag_bw 1MiB $(sib tag_bw 1048576)" | tee -a "$tmp/all"
	echo "ucx tag_bw 1MiB $(ucx tag_bw 1048576 1000)" | tee -a "$tmp/all"
	echo "sib put_lat 8 $(sib put_lat 16)" | tee -a "$tmp/all"
	echo "ucx put_lat 8 $(ucx ucp_put_lat 8 20000)" | tee -a "$tmp/all"
	echo "sib get_lat 8 $(sib get_lat 16)" | tee -a "$tmp/all"
	echo "ucx get_lat 8 $(ucx ucp_get 8 20000)" | tee -a "$tmp/all"
	echo "sib tag_lat 8 $(sib tag_lat 16)" | tee -a "$tmp/all"
	echo "ucx tag_lat 8 $(ucx tag_lat 8 20000)" | tee -a "$tmp/all"
	echo "sib fadd_lat 8 $(sib add_lat 8)" | tee -a "$tmp/all"
	echo "ucx fadd_lat 8 $(ucx ucp_fadd 8 20000)" | tee -a "$tmp/all"
	echo "sib put_lat_malloc 8 $(sib put_lat 16 malloc)" | tee -a "$tmp/all"
	echo "sib get_lat_malloc 8 $(sib get_lat 16 malloc)" | tee -a "$tmp/all"
	echo "sib fadd_lat_malloc 8 $(sib add_lat 8 malloc)" | tee -a "$tmp/all"
done
echo "# medians over $REPS runs (load $(cut -d' ' -f1-3 /proc/loadavg))"
for k in "tag_bw 1MiB" "put_lat 8" "get_lat 8" "tag_lat 8" "fadd_lat 8" \
	"put_lat_malloc 8" "get_lat_malloc 8" "fadd_lat_malloc 8"; do
	s=$(grep "^sib $k " "$tmp/all" | awk '{ print $4 }' | med)
	u=$(grep "^ucx ${k/_malloc/} " "$tmp/all" | awk '{ print $4 }' | med)
	printf '%-12s sib %10s   ucx %10s   sib/ucx %s\n' "$k" "${s:-n/a}" "${u:-n/a}" \
		"$(awk -v s="${s:-0}" -v u="${u:-0}" 'BEGIN { if (u > 0) printf "%.2f", s / u; else print "n/a" }')"
done
