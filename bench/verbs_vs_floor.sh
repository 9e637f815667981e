#!/bin/bash
# softib RC SEND one-way latency beside its floors, in one run, every
# anchor with the same CPU placement (first process on CPU A, second on B):
#
#   floor   build/bin/shm_floor: two processes, a cache line each way,
#           busy-poll, the payload copied through shared memory
#   vader   build/bin/mpi_osu -t lat under mpirun -np 2 --mca btl self,vader
#           (Open MPI's shared-memory transport; skipped if not built)
#   cma     one process_vm_writev of each size <= 4 KiB (shm_floor -t cma)
#   softib  build/bin/softib_osu -t lat (RC SEND)
#
# Each anchor runs RUNS times, interleaved (floor, vader, cma, softib,
# floor, ...), and the median of each size is printed, with the ratios
# and the targets of issue 10: 8 B <= 1.5x the floor and <= 1.0x vader;
# every size <= 4 KiB below one process_vm_writev of that size.
# With OLD=<build dir of another tree> (its bin/ and lib/), the script
# also runs both trees' softib_osu -t bw, interleaved, and prints the
# bandwidth from 64 KiB up side by side (target: new >= old).
#
#   bench/verbs_vs_floor.sh [-a CPU] [-b CPU] [-m MAX] [-r RUNS] [-p PORT]
#                           [-N NICE]
#
# Run it on a quiet machine: busy-polling ping-pongs measure the
# scheduler when other processes want the same CPUs (the load average
# is printed with the results). On a shared machine, -N -15 runs every
# anchor alike under that nice value (root), so that each side keeps
# its CPU for most of the time; it is printed with the results.
set -euo pipefail
cd "$(dirname "$0")/.."

A=0 B=1 MAX=4m RUNS=3 PORT=19511 NICE=0
while getopts "a:b:m:r:p:N:h" o; do
	case $o in
	a) A=$OPTARG ;;
	b) B=$OPTARG ;;
	m) MAX=$OPTARG ;;
	r) RUNS=$OPTARG ;;
	p) PORT=$OPTARG ;;
	N) NICE=$OPTARG ;;
	*) sed -n '2,27p' "$0" >&2; exit 2 ;;
	esac
done

bin=build/bin
# every anchor runs under the same nice value (-N)
nice_() { nice -n "$NICE" "$@"; }
for p in shm_floor softib_osu; do
	[ -x "$bin/$p" ] || { echo "$bin/$p not built (scons -j2)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d /tmp/verbs_vs_floor.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Rows "size value" only (comments and headers dropped).
rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 2 { print $1, $2 }' "$@"; }

# softib_osu between CPU A (server) and CPU B (client); $1: bin dir,
# $2: lib dir, then softib_osu's options.
softib_pair() {
	local b=$1 l=$2 rc=0
	shift 2
	LD_LIBRARY_PATH=$l nice_ taskset -c "$A" "$b/softib_osu" -p "$PORT" "$@" \
		>/dev/null 2>"$tmp/server.err" &
	local srv=$!
	sleep 0.3
	LD_LIBRARY_PATH=$l nice_ taskset -c "$B" "$b/softib_osu" -p "$PORT" "$@" 127.0.0.1 || rc=$?
	wait "$srv" || rc=$?
	return $rc
}

# An MPI rank pinned like the others: rank 0 on A, rank 1 on B.
cat >"$tmp/pin_rank.sh" <<EOF
#!/bin/sh
if [ "\${OMPI_COMM_WORLD_RANK:-0}" = 0 ]; then c=$A; else c=$B; fi
exec taskset -c "\$c" "\$@"
EOF
chmod +x "$tmp/pin_rank.sh"
have_mpi=0
[ -x "$bin/mpi_osu" ] && command -v mpirun >/dev/null && have_mpi=1

echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg); CPUs $A and $B; $RUNS runs each; nice $NICE"
for r in $(seq "$RUNS"); do
	nice_ "$bin/shm_floor" -a "$A" -b "$B" -m "$MAX" | rows >"$tmp/floor.$r"
	if [ $have_mpi = 1 ]; then
		nice_ mpirun -np 2 --mca btl self,vader --bind-to none \
			"$tmp/pin_rank.sh" "$bin/mpi_osu" -t lat -m "$MAX" 2>"$tmp/mpi.err" |
			rows >"$tmp/vader.$r" || true
	fi
	nice_ "$bin/shm_floor" -t cma -a "$A" -b "$B" | rows >"$tmp/cma.$r"
	softib_pair "$bin" build/lib -t lat -m "$MAX" | rows >"$tmp/softib.$r"
done
echo "# load after:  $(cut -d' ' -f1-3 /proc/loadavg)"

# The median of each size over the runs of one anchor.
median() {
	{ cat "$tmp/$1".* 2>/dev/null || true; } | sort -k1,1n -k2,2g | awk '
		function out() { if (n) print s, (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) }
		NR == 1 || $1 != s { out(); s = $1; n = 0 }
		{ a[++n] = $2 }
		END { out() }'
}
median floor >"$tmp/m.floor"
median vader >"$tmp/m.vader"
median cma >"$tmp/m.cma"
median softib >"$tmp/m.softib"

awk -v have_mpi=$have_mpi '
	FILENAME ~ /m.floor$/ { fl[$1] = $2; next }
	FILENAME ~ /m.vader$/ { va[$1] = $2; next }
	FILENAME ~ /m.cma$/ { cm[$1] = $2; next }
	{ sizes[++n] = $1; sb[$1] = $2 }
	END {
		printf "# one-way latency (us), medians\n"
		printf "%-9s %9s %9s %7s %9s %7s %9s %7s\n", "# size", "softib",
		       "floor", "x", "vader", "x", "cma", "x"
		for (i = 1; i <= n; i++) {
			s = sizes[i]
			printf "%-9s %9.2f", s, sb[s]
			if (s in fl) printf " %9.2f %7.2f", fl[s], sb[s] / fl[s]
			else printf " %9s %7s", "-", "-"
			if (s in va && va[s] > 0) printf " %9.2f %7.2f", va[s], sb[s] / va[s]
			else printf " %9s %7s", "-", "-"
			if (s in cm && cm[s] > 0) printf " %9.2f %7.2f", cm[s], sb[s] / cm[s]
			else printf " %9s %7s", "-", "-"
			printf "\n"
		}
		printf "# targets\n"
		# each verdict line ends with its figures (bench/targets.sh reads them)
		if (8 in fl) printf "8 B <= 1.5x floor:    %.2fx  %s  (softib %.2f us, floor %.2f us)\n",
			sb[8] / fl[8], sb[8] <= 1.5 * fl[8] ? "MET" : "MISSED", sb[8], fl[8]
		if (have_mpi && (8 in va) && va[8] > 0)
			printf "8 B <= 1.0x vader:    %.2fx  %s  (softib %.2f us, vader %.2f us)\n",
				sb[8] / va[8], sb[8] <= va[8] ? "MET" : "MISSED", sb[8], va[8]
		else
			printf "8 B <= 1.0x vader:    not measured (build/bin/mpi_osu missing)\n"
		bad = ""; m = 0; w = ""
		for (i = 1; i <= n; i++) {
			s = sizes[i]
			if (s in cm && s > 0 && cm[s] > 0) {
				m++; if (sb[s] >= cm[s]) bad = bad " " s
				if (w == "" || sb[s] / cm[s] > sb[w] / cm[w]) w = s
			}
		}
		printf "<= 4 KiB below one process_vm_writev (%d sizes): %s", m,
		       bad == "" ? "MET" : "MISSED at" bad
		if (w != "") printf "  (worst %s B: softib %.2f us, cma %.2f us)", w, sb[w], cm[w]
		printf "\n"
	}' "$tmp/m.floor" "$tmp/m.vader" "$tmp/m.cma" "$tmp/m.softib"

if [ -n "${OLD:-}" ]; then
	[ -x "$OLD/bin/softib_osu" ] || { echo "OLD=$OLD has no bin/softib_osu" >&2; exit 2; }
	for r in $(seq "$RUNS"); do
		softib_pair "$OLD/bin" "$OLD/lib" -t bw -m "$MAX" | rows >"$tmp/bwold.$r"
		softib_pair "$bin" build/lib -t bw -m "$MAX" | rows >"$tmp/bwnew.$r"
	done
	median bwold >"$tmp/m.bwold"
	median bwnew >"$tmp/m.bwnew"
	echo "# bandwidth (MB/s), medians: OLD=$OLD vs this tree; load $(cut -d' ' -f1-3 /proc/loadavg)"
	join "$tmp/m.bwold" "$tmp/m.bwnew" | awk '
		{ printf "%-9s %10.0f %10.0f %6.2f\n", $1, $2, $3, $3 / $2
		  if ($1 >= 65536 && $3 < $2) low = low " " $1 }
		END { printf ">= 64 KiB no lower than before: %s\n",
			  low == "" ? "MET" : "MISSED at" low }'
fi
