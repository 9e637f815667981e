#!/usr/bin/env bash
# Every speed target of issues 10-13 beside its anchor, measured in one run,
# in one table.
#
#   sudo bench/targets.sh [-r REPS] [-i "10 11 12 13"] [-o DIR] [-p PORT]
#   bench/targets.sh -P DIR       (runs nothing: the table again from DIR)
#
# Runs each bench script once in a short mode, its whole output kept in
# DIR/<script>.txt (default DIR: build/bench/targets), then reads the
# final summary lines of those outputs (never anything else) and prints
# one table: issue, what is measured, softib's figure, the anchor and its
# figure, the ratio, the issue's target and the verdict (met / missed /
# not run, with the reason). Every figure comes from this run's outputs;
# the targets are the issues' (docs/benchmarks.md says what each row is).
#
#   issue 10  bench/verbs_vs_floor.sh   verbs RC SEND on one host: floor,
#                                       vader, one process_vm_writev
#             bench/udp_vs_raw.sh       UDP link vs raw UDP (root)
#   issue 11  bench/sib_vs_verbs.sh     libsib 8 B latency vs UCX tag_lat
#             bench/sib_rate_vs_ucx.sh  libsib message rate vs UCX tag_bw
#             bench/sib_vs_udp.sh -t lat  across hosts vs raw UDP (root)
#   issue 12  bench/sib_vs_ucx.sh       tag bandwidth, put/get vs UCX
#             bench/sib_vs_udp.sh -t bw   across hosts vs raw UDP stream
#   issue 13  bench/mpi_vs.sh -q -b "lat bw"   MPI: softib vs vader, tcp,
#                                       raw UDP (2 hosts need root)
#
#   -r REPS   runs per figure in each script (default 3; each script takes
#             the median)
#   -i LIST   the issues to run (default "10 11 12 13")
#   -o DIR    where the outputs go (default build/bench/targets)
#   -p PORT   first of 4 TCP ports on 127.0.0.1 the pairs meet on
#             (default 27090; give each concurrent user its own)
#   -P DIR    parse the outputs already in DIR and print the table
# A script that fails, times out (TARGETS_TIMEOUT seconds, default 600) or
# cannot run (not root, no ucx_perftest, no mpirun, no build) gives "not
# run" rows with the reason; the table prints anyway. Export
# SOFTIB_SEG_TAG / SOFTIB_UDP_PORT of your own first on a shared machine.
# Exit 0 when the table printed (targets met or not); 2 on bad use.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

REPS=3 ISSUES="10 11 12 13" OUT=$ROOT/build/bench/targets PORT=27090 PARSE=
while getopts "r:i:o:p:P:h" o; do
	case $o in
	r) REPS=$OPTARG ;;
	i) ISSUES=$OPTARG ;;
	o) OUT=$OPTARG ;;
	p) PORT=$OPTARG ;;
	P) PARSE=$OPTARG ;;
	*) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
case $REPS in '' | *[!0-9]* | 0) echo "targets: -r wants a count" >&2; exit 2 ;; esac
case $PORT in '' | *[!0-9]*) echo "targets: -p wants a port" >&2; exit 2 ;; esac
for i in $ISSUES; do
	case $i in 10 | 11 | 12 | 13) ;; *) echo "targets: no issue $i (10-13)" >&2; exit 2 ;; esac
done
want() { case " $ISSUES " in *" $1 "*) return 0 ;; esac; return 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- running the scripts --------------------------------------------------

# skip NAME REASON: the script is not run; its rows say why.
skip() {
	rm -f "$OUT/$1".*
	echo "$2" >"$OUT/$1.skip"
	printf '# %-18s not run: %s\n' "$1" "$2"
}

# run NAME CMD...: CMD (a bench script) into OUT/NAME.txt, bounded;
# OUT/NAME.rc its exit status, OUT/NAME.cmd the command line.
run() {
	local name=$1 t0=$SECONDS rc=0
	shift
	rm -f "$OUT/$name".*
	# the command line as a shell reads it back (quotes kept)
	printf '%q ' "$@" | sed 's/ $//' >"$OUT/$name.cmd"
	printf '# %-18s %s ... ' "$name" "$(cat "$OUT/$name.cmd")"
	# through bash: a script's execute bit is not needed
	timeout -k 10 "${TARGETS_TIMEOUT:-600}" bash "$@" >"$OUT/$name.txt" 2>&1 </dev/null || rc=$?
	echo "$rc" >"$OUT/$name.rc"
	echo "exit $rc, $((SECONDS - t0)) s, load $(load)"
}

run_all() {
	local root=0 ucx=0 mpi=0 b missing=
	mkdir -p "$OUT" || exit 2
	# each script's files are replaced when it runs (-i: the others stay)
	rm -f "$OUT/load" "$OUT/table.txt"
	[ "$(id -u)" = 0 ] && command -v ip >/dev/null && root=1
	command -v ucx_perftest >/dev/null && ucx=1
	command -v mpirun >/dev/null && mpi=1
	for b in softib_osu shm_floor udp_rc udp_raw sib_osu sib_rma; do
		[ -x build/bin/$b ] || missing+=" build/bin/$b"
	done
	echo "load at start: $(load)" >"$OUT/load"
	echo "# bench/targets.sh -r $REPS -i \"$ISSUES\": $(nproc) CPUs, load at start $(load)"
	echo "# outputs in $OUT"
	[ -z "$missing" ] || echo "# missing (scons -j2):$missing"
	if want 10; then
		if [ -x build/bin/softib_osu ] && [ -x build/bin/shm_floor ]; then
			run verbs_vs_floor bench/verbs_vs_floor.sh -r "$REPS" -m 64k -p "$PORT"
		else skip verbs_vs_floor "build/bin/softib_osu or shm_floor not built (scons -j2)"; fi
		if [ $root = 0 ]; then skip udp_vs_raw "needs root (ip netns)"
		else run udp_vs_raw bench/udp_vs_raw.sh -r "$REPS"; fi
	fi
	if want 11; then
		if [ $mpi = 0 ]; then skip sib_vs_verbs "no mpirun"
		elif [ $ucx = 0 ]; then skip sib_vs_verbs "no ucx_perftest (Debian ucx-utils)"
		else PORT=$((PORT + 1)) run sib_vs_verbs bench/sib_vs_verbs.sh -r "$REPS" -i 10000; fi
		if [ $mpi = 0 ]; then skip sib_rate_vs_ucx "no mpirun"
		elif [ $ucx = 0 ]; then skip sib_rate_vs_ucx "no ucx_perftest (Debian ucx-utils)"
		else UCX_PORT=$((PORT + 2)) run sib_rate_vs_ucx bench/sib_rate_vs_ucx.sh -r "$REPS" -i 100000; fi
		if [ $root = 0 ]; then skip sib_vs_udp.lat "needs root (ip netns)"
		elif [ $mpi = 0 ]; then skip sib_vs_udp.lat "no mpirun"
		else run sib_vs_udp.lat bench/sib_vs_udp.sh -r "$REPS" -t lat; fi
	fi
	if want 12; then
		if [ $mpi = 0 ]; then skip sib_vs_ucx "no mpirun"
		elif [ $ucx = 0 ]; then skip sib_vs_ucx "no ucx_perftest (Debian ucx-utils)"
		else UCX_PORT=$((PORT + 3)) run sib_vs_ucx bench/sib_vs_ucx.sh -r "$REPS"; fi
		if [ $root = 0 ]; then skip sib_vs_udp.bw "needs root (ip netns)"
		elif [ $mpi = 0 ]; then skip sib_vs_udp.bw "no mpirun"
		else run sib_vs_udp.bw bench/sib_vs_udp.sh -r "$REPS" -t bw; fi
	fi
	if want 13; then
		if [ $mpi = 0 ] || [ ! -x build/bin/mpi_osu ]; then
			skip mpi_vs "no mpirun or build/bin/mpi_osu (mpicc, scons -j2)"
		elif [ $root = 0 ]; then
			run mpi_vs bench/mpi_vs.sh -q -b "lat bw" -S 1host -r "$REPS" -o "$OUT/mpi_vs"
			echo "needs root (ip netns)" >"$OUT/mpi_vs.2hosts.skip"
		else
			# each figure the median of REPS runs, as in the other
			# scripts: one quick run's 1 MiB bandwidth moved between
			# 0.75 and 1.34 times vader's from run to run (about 12 s
			# a run)
			run mpi_vs bench/mpi_vs.sh -q -b "lat bw" -r "$REPS" -o "$OUT/mpi_vs"
		fi
	fi
	echo "load at end: $(load)" >>"$OUT/load"
}

# ---- reading their outputs --------------------------------------------------

ROWS=
# row ISSUE WHAT UNIT SOFTIB ANCHOR-NAME ANCHOR OP LIMIT SCRIPT: one table
# row; the ratio and the verdict from the two figures. A figure that is
# not a number makes the row "not run" with the script's reason.
row() {
	local why=
	if ! num "$4" || ! num "$6"; then why=$(reason "$9"); fi
	ROWS+=$(printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$1" "$2" "$3" \
		"${4:--}" "$5" "${6:--}" "$7" "$8" "$9" "$why")$'\n'
}
num() { [[ $1 =~ ^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]]; }

# reason SCRIPT: why SCRIPT's figure is missing.
reason() {
	local f=$DIR/$1
	if [ -f "$f.skip" ]; then cat "$f.skip"
	elif [ ! -f "$f.txt" ]; then echo "not selected (-i)"
	elif [ "$(cat "$f.rc" 2>/dev/null)" = 124 ] || [ "$(cat "$f.rc" 2>/dev/null)" = 137 ]; then
		echo "timed out: see $f.txt"
	elif [ -s "$f.rc" ] && [ "$(cat "$f.rc")" != 0 ]; then
		echo "failed (exit $(cat "$f.rc")): see $f.txt"
	else echo "no figure in its output: see $f.txt"; fi
}

# last LINE-REGEX SED-EXPR FILE: the last line matching, rewritten by sed.
last() {
	[ -f "$3" ] || return 0
	grep -E "$1" "$3" | tail -n 1 | sed -E "$2"
}

parse_10() {
	local f=$DIR/verbs_vs_floor.txt s a mtu
	read -r s a < <(last '^8 B <= 1.5x floor:' 's/.*\(softib ([^ ]*) us, floor ([^ ]*) us\).*/\1 \2/' "$f")
	row 10 "verbs RC SEND 8 B one-way, host" us "${s:-}" "shm floor" "${a:-}" "<=" 1.5 verbs_vs_floor
	s="" a=""
	read -r s a < <(last '^8 B <= 1.0x vader:' 's/.*\(softib ([^ ]*) us, vader ([^ ]*) us\).*/\1 \2/' "$f")
	row 10 "verbs RC SEND 8 B one-way, host" us "${s:-}" "vader (MPI)" "${a:-}" "<=" 1.0 verbs_vs_floor
	s="" a="" w=""
	read -r w s a < <(last '^<= 4 KiB below one process_vm_writev' \
		's/.*\(worst ([0-9]+) B: softib ([^ ]*) us, cma ([^ ]*) us\).*/\1 \2 \3/' "$f")
	row 10 "verbs RC SEND <= 4 KiB, worst size (${w:-?} B)" us "${s:-}" "1 process_vm_writev" "${a:-}" "<" 1.0 verbs_vs_floor
	ROWS+=$(printf '10\tverbs RC SEND bandwidth >= 64 KiB vs before\tMB/s\t-\tprevious tree\t-\t>=\t1.0\tverbs_vs_floor\t%s' \
		"needs OLD=<older build dir> bench/verbs_vs_floor.sh (not part of this command)")$'\n'
	f=$DIR/udp_vs_raw.txt
	for mtu in 1500 9000; do
		udp_row "$f" "$mtu" "8 B latency (us)" "UDP link 8 B one-way, MTU $mtu" us "raw UDP ping-pong" "<=" 1.3
		udp_row "$f" "$mtu" "1 MiB bandwidth (MB/s)" "UDP link 1 MiB bandwidth, MTU $mtu" MB/s "raw UDP stream" ">=" 1.0
		udp_row "$f" "$mtu" "8 B event-driven (us)" "UDP link 8 B event-driven, 1 CPU, MTU $mtu" us "raw UDP blocking recv" "<=" 2
		udp_row "$f" "$mtu" "8 B event, 2 CPUs (us)" "UDP link 8 B event-driven, 2 CPUs, MTU $mtu" us "raw UDP blocking recv" "<=" 2
	done
}

# udp_row FILE MTU MEASURE WHAT UNIT ANCHOR OP LIMIT: a row of the final
# table of udp_vs_raw.sh ("MTU IB-MTU runs MEASURE softib raw ratio ...").
udp_row() {
	local s="" a=""
	if [ -f "$1" ]; then
		read -r s a < <(awk -v m="$2" -v what="$3" '$1 == m && (i = index($0, what)) {
			split(substr($0, i + length(what)), f, " "); print f[1], f[2] }' "$1" | tail -n 1)
	fi
	row 10 "$4" "$5" "${s:-}" "$6" "${a:-}" "$7" "$8" udp_vs_raw
}

parse_11() {
	local s="" a=""
	read -r s a < <(last '^# medians over' 's/.*: libsib ([^ ]*) us, verbs .* ucx ([^ ]*) us .*/\1 \2/' \
		"$DIR/sib_vs_verbs.txt")
	row 11 "libsib tagged 8 B one-way, host" us "${s:-}" "UCX tag_lat (sm)" "${a:-}" "<=" 1.0 sib_vs_verbs
	s="" a=""
	read -r s a < <(last '^# medians over' 's/.*: libsib ([^ ]*), ucx ([^ ]*), libsib unbatched.*/\1 \2/' \
		"$DIR/sib_rate_vs_ucx.txt")
	row 11 "libsib 8 B message rate, host" "M msg/s" "${s:-}" "UCX tag_bw (sm)" "${a:-}" ">=" 1.0 sib_rate_vs_ucx
	s="" a=""
	read -r s a < <(last '^# medians over' 's/.*: libsib ([^ ]*) us, raw UDP ([^ ]*) us.*/\1 \2/' \
		"$DIR/sib_vs_udp.lat.txt")
	row 11 "libsib tagged 8 B one-way, 2 hosts" us "${s:-}" "raw UDP ping-pong" "${a:-}" "<=" 1.5 sib_vs_udp.lat
}

parse_12() {
	local f=$DIR/sib_vs_ucx.txt k key what unit op lim s a an
	# the medians: "KEY SIZE sib FIGURE ucx FIGURE sib/ucx RATIO"
	for k in "tag_bw 1MiB|libsib tagged 1 MiB bandwidth, host|MB/s|>=|1.0" \
		"put_lat 8|libsib put 8 B, host (sib_mem_map region)|us|<=|1.2" \
		"get_lat 8|libsib get 8 B, host (sib_mem_map region)|us|<=|1.2" \
		"put_lat_malloc 8|libsib put 8 B, host (malloc'd region)|us|<=|1.2" \
		"get_lat_malloc 8|libsib get 8 B, host (malloc'd region)|us|<=|1.2"; do
		IFS='|' read -r key what unit op lim <<<"$k"
		s="" a=""
		if [ -f "$f" ]; then
			# older outputs have no _malloc rows: leave them out
			case $key in *_malloc*) grep -q "^${key} *sib " "$f" || continue ;; esac
			read -r s a < <(awk -v k="$key" '$3 == "sib" && $5 == "ucx" && $1 " " $2 == k {
				print $4, $6 }' "$f" | tail -n 1)
		fi
		case $key in
		tag_bw*) an="UCX tag_bw (sm)" ;;
		put*) an="UCX ucp_put_lat (sm)" ;;
		*) an="UCX ucp_get (sm)" ;;
		esac
		row 12 "$what" "$unit" "${s:-}" "$an" "${a:-}" "$op" "$lim" sib_vs_ucx
	done
	s="" a=""
	read -r s a < <(last '^# medians over' 's/.*: libsib ([^ ]*) MB\/s, raw UDP ([^ ]*) MB\/s.*/\1 \2/' \
		"$DIR/sib_vs_udp.bw.txt")
	row 12 "libsib tagged 1 MiB bandwidth, 2 hosts" MB/s "${s:-}" "raw UDP stream" "${a:-}" ">=" 0.9 sib_vs_udp.bw
}

parse_13() {
	local f=$DIR/mpi_vs.txt spec key setting b size what unit an op lim s a w src
	for spec in "1host lat 8|MPI 8 B latency, host|us|vader|<=|1.2" \
		"1host bw 1048576|MPI 1 MiB bandwidth, host|MB/s|vader|>=|1.0" \
		"2hosts lat 8|MPI 8 B latency, 2 hosts|us|raw_udp|<=|1.5" \
		"2hosts bw 1048576|MPI 1 MiB bandwidth, 2 hosts|MB/s|raw_udp_stream|>=|0.8" \
		"1host lat worst|MPI latency, host, every size|us|tcp|<|1.0" \
		"1host bw worst|MPI bandwidth, host, every size|MB/s|tcp|>|1.0" \
		"2hosts lat worst|MPI latency, 2 hosts, every size|us|tcp|<|1.0" \
		"2hosts bw worst|MPI bandwidth, 2 hosts, every size|MB/s|tcp|>|1.0"; do
		IFS='|' read -r key what unit an op lim <<<"$spec"
		read -r setting b size <<<"$key"
		s="" a="" w=""
		# "target SETTING BENCH SIZE softib V ANCHOR V ratio R OP LIMIT VERDICT"
		if [ -f "$f" ]; then
			read -r w s a < <(awk -v set="$setting" -v b="$b" -v size="$size" '
				$1 == "target" && $2 == set && $3 == b && $5 == "softib" &&
				($4 == size || (size == "worst" && $4 ~ /^worst:/)) {
					w = $4; sub(/^worst:/, "", w); print w, $6, $8 }' "$f" | tail -n 1)
		fi
		[ "$size" = worst ] && what+=" (worst: ${w:-?} B)"
		an=${an//_/ }
		[ "$an" = tcp ] && an="tcp BTL"
		src=mpi_vs
		[ "$setting" = 2hosts ] && [ -f "$DIR/mpi_vs.2hosts.skip" ] && src=mpi_vs.2hosts
		row 13 "$what" "$unit" "${s:-}" "$an" "${a:-}" "$op" "$lim" "$src"
	done
}

# ---- the table ------------------------------------------------------------

# The shared-memory floor sib_vs_verbs.sh measured beside libsib and UCX:
# the state the machine was in for the one-host rows (docs/benchmarks.md).
floor_note() {
	local f
	f=$(last '^# medians over' 's/.*, floor ([^ ]*) us$/\1/' "$DIR/sib_vs_verbs.txt")
	num "$f" && echo "one-host floor (a cache line each way, sib_vs_verbs.sh): $f us"
	return 0
}

table() {
	DIR=$1
	local i
	for i in $ISSUES; do "parse_$i"; done
	echo
	sed -n '1p' "$DIR/load" 2>/dev/null
	printf '%s' "$ROWS" | awk -F '\t' '
	function ok(r, op, l) {
		return op == "<=" ? r <= l : op == ">=" ? r >= l : op == "<" ? r < l : r > l }
	BEGIN {
		printf "%-5s %-56s %10s  %-22s %10s %6s  %-7s %s\n", "issue", "what",
		       "softib", "anchor", "figure", "ratio", "target", "verdict"
	}
	{
		tgt = $7 " " $8 "x"
		if ($10 != "") {
			printf "%-5s %-56s %10s  %-22s %10s %6s  %-7s not run: %s\n", $1,
			       $2 " (" $3 ")", "-", $5, "-", "-", tgt, $10
			next
		}
		r = $6 > 0 ? $4 / $6 : 0
		printf "%-5s %-56s %10.2f  %-22s %10.2f %6.2f  %-7s %s\n", $1, $2 " (" $3 ")",
		       $4, $5, $6, r, tgt, ($6 > 0 && ok(r, $7, $8)) ? "met" : "missed"
	}'
	sed -n '2p' "$DIR/load" 2>/dev/null
	floor_note
	echo "ratio: softib / anchor, the same run; latency lower is better, bandwidth and rate higher"
	echo "detail (each script's whole output; docs/benchmarks.md explains the rows):"
	for i in verbs_vs_floor udp_vs_raw sib_vs_verbs sib_rate_vs_ucx sib_vs_udp.lat \
		sib_vs_ucx sib_vs_udp.bw mpi_vs; do
		[ -f "$DIR/$i.txt" ] || continue
		printf '  %-16s less %s' "$i" "$DIR/$i.txt"
		[ -s "$DIR/$i.cmd" ] && printf '   (%s)' "$(cat "$DIR/$i.cmd")"
		printf '\n'
	done
	[ -d "$DIR/mpi_vs" ] && echo "  mpi_vs plots: $DIR/mpi_vs/*.png"
	return 0
}

if [ -n "$PARSE" ]; then
	[ -d "$PARSE" ] || { echo "targets: no directory $PARSE" >&2; exit 2; }
	table "$PARSE"
	exit 0
fi
run_all
table "$OUT" | tee "$OUT/table.txt"
exit 0
