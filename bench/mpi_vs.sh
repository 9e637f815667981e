#!/usr/bin/env bash
# MPI over softib beside Open MPI's own transports and the floors, in one
# command: osu-style tables, ratios, and a PNG plot per benchmark.
#
#   sudo bench/mpi_vs.sh [-b "BENCHES"] [-T "TRANSPORTS"] [-S "SETTINGS"]
#                        [-r REPS] [-q] [-o DIR] [-P] [-U MTU]
#
# Benchmarks (-b, build/bin/mpi_osu -t ...; default all):
#   lat bw bibw mr allreduce alltoall put_lat
# Transports (-T; default "softib vader tcp", softib where
# build/lib/openmpi/mca_btl_softib.so exists and SOFTIB_MPI_BTL is not 0):
# each is an Open MPI BTL list, self,<transport>. vader joins only processes of one host, so
# across hosts it is not run.
# Settings (-S; default "1host 2hosts"):
#   1host   2 ranks on this machine (4 for mr, allreduce, alltoall)
#   2hosts  1 rank on each of two namespace hosts (2 each for mr,
#           allreduce, alltoall), test/integration/hosts.sh
# Floors drawn beside the transports:
#   1host   the shared-memory ping-pong and stream, build/bin/shm_floor,
#           where it exists
#   2hosts  raw UDP between the same two hosts (build/bin/udp_raw): the
#           ping-pong's median for lat and put_lat, the stream (datagrams
#           of softib's payload at the veth's MTU, 1024 B) for bw
# -U MTU sets the namespace hosts' veth MTU (default the kernel's 1500;
# at 9000 softib's path MTU is 4096 B instead of 1024, and the raw UDP
# stream's datagrams carry that payload; every transport runs on it).
# Latencies are medians of the iterations (mpi_osu -M); bandwidths means.
# With -r REPS each figure is the median over REPS runs. -q is quick:
# sizes to 1 MiB, a quarter of the iterations (the demo's setting).
# Output: the tables (and the load) on stdout and in DIR/summary.txt,
# DIR/<bench>.png, the data in DIR/data/ (DIR: build/bench/mpi_vs).
# -P runs nothing: it prints the tables and draws the plots again from
# DIR/data (of an earlier run with the same -b -T -S).
# Open MPI's tcp BTL between namespaces waits a timer tick per round trip
# (~4 ms, DESIGN.md), so its runs across hosts use few iterations.
# Needs root for 2hosts (ip netns); exit 0 unless a run failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
. test/integration/hosts.sh
. test/integration/ompi.sh

BENCHES="lat bw bibw mr allreduce alltoall put_lat"
# softib's BTL by default (SOFTIB_MPI_BTL=0 leaves it out)
TRANSPORTS="softib vader tcp"
[ "${SOFTIB_MPI_BTL:-1}" = 0 ] && TRANSPORTS="vader tcp"
SETTINGS="1host 2hosts"
REPS=1 QUICK=0 OUT=$ROOT/build/bench/mpi_vs PLOT_ONLY=0
while getopts "b:T:S:r:qo:PU:h" opt; do
	case $opt in
	b) BENCHES=$OPTARG ;;
	T) TRANSPORTS=$OPTARG ;;
	S) SETTINGS=$OPTARG ;;
	r) REPS=$OPTARG ;;
	q) QUICK=1 ;;
	o) OUT=$OPTARG ;;
	P) PLOT_ONLY=1 ;;
	U) export HOSTS_MTU=$OPTARG ;;
	*) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done
case $REPS in '' | *[!0-9]* | 0) echo "mpi_vs: -r wants a count" >&2; exit 2 ;; esac
OSU=$ROOT/build/bin/mpi_osu RAW=$ROOT/build/bin/udp_raw
SHM=$ROOT/build/bin/shm_floor
[ -x "$OSU" ] || { echo "mpi_vs: $OSU missing: run scons" >&2; exit 2; }
export LD_LIBRARY_PATH=$ROOT/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! ompi_softib_setup; then
	case " $TRANSPORTS " in *" softib "*)
		echo "# (no build/lib/openmpi/mca_btl_softib.so yet: softib not run)"
		TRANSPORTS=${TRANSPORTS//softib/} ;;
	esac
fi
DATA=$OUT/data
mkdir -p "$DATA" || exit 2
failed=0

# what each benchmark measures: lat-like (us, lower is better) or bw-like
kind() { case $1 in bw | bibw | mr) echo bw ;; *) echo lat ;; esac; }
ranks() { case $1 in mr | allreduce | alltoall) echo 4 ;; *) echo 2 ;; esac; }

# The mpi_osu arguments of one run.
osu_args() {
	local b=$1 setting=$2 tr=$3 a="-t $1"
	case $b in lat | put_lat) a+=" -M" ;; esac
	[ "$QUICK" = 1 ] && a+=" -m 1m"
	if [ "$tr" = tcp ]; then
		# Open MPI's tcp waits a timer tick per round trip between
		# namespaces (~4 ms), and on a busy machine on one host too:
		# a few iterations per size
		case $setting.$(kind "$b") in
		1host.lat) case $b in
			# 4 ranks on 2 cores: tens of ms per call at 256 KiB
			allreduce | alltoall) a+=" -i 20 -x 2" ;;
			*) a+=" -i 200 -x 10" ;;
			esac ;;
		2hosts.lat) a+=" -i 20 -x 2" ;;
		2hosts.bw) a+=" -i 4 -x 1" ;;
		1host.bw) a+=" -i 10 -x 1" ;;
		esac
	elif [ "$QUICK" = 1 ]; then
		case $(kind "$b") in
		lat) a+=" -i 500 -x 20" ;;
		bw) a+=" -i 5 -x 1" ;;
		esac
	else
		# enough for a median on a shared machine, short enough that a
		# whole run stays in minutes there (mpi_osu's own defaults are
		# 10000 and 100)
		case $(kind "$b") in
		lat) a+=" -i 2000 -x 100" ;;
		bw) a+=" -i 20 -x 2" ;;
		esac
	fi
	echo "$a"
}

# run_osu BENCH SETTING TRANSPORT REP: one mpi_osu run into
# $DATA/BENCH.SETTING.TRANSPORT.REP (its whole output).
run_osu() {
	local b=$1 setting=$2 tr=$3 rep=$4 n btl out
	n=$(ranks "$b")
	btl=self,$tr
	out=$DATA/$b.$setting.$tr.$rep
	# shellcheck disable=SC2046 # word lists on purpose
	if [ "$setting" = 1host ]; then
		timeout -k 5 300 mpirun --oversubscribe -np "$n" --mca btl "$btl" \
			$(ompi_osc_args "$btl") "$OSU" $(osu_args "$b" "$setting" "$tr") \
			>"$out" 2>&1 </dev/null
	else
		HOSTS_TIMEOUT=300 hosts_mpirun 2 $((n / 2)) --mca btl "$btl" \
			$(ompi_osc_args "$btl") "$OSU" $(osu_args "$b" "$setting" "$tr") \
			>"$out" 2>&1 </dev/null
	fi || {
		echo "mpi_vs: $b $setting $tr failed:" >&2
		tail -n 5 "$out" >&2
		failed=1
		return 1
	}
}

# median_of FILES...: per size (column 1), the median of column 2 over the
# files' data rows; two columns out.
median_of() {
	awk '!/^#/ && NF >= 2 && $1 ~ /^[0-9]+$/ { v[$1] = v[$1] " " $2 }
	END { for (s in v) { n = split(v[s], a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		m = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		printf "%s %s\n", s, m } }' "$@" | sort -n
}

# ---- floors -------------------------------------------------------------

# The shared-memory floor on one host, if build/bin/shm_floor exists: its
# osu-style output (size, value) for -t lat and -t bw.
floor_shm() {
	local t
	[ -x "$SHM" ] || return 0
	for t in lat bw; do
		timeout -k 5 120 "$SHM" -t "$t" >"$DATA/shm.$t.out" 2>&1 </dev/null &&
			median_of "$DATA/shm.$t.out" >"$DATA/floor.1host.$t.dat"
	done
}

# raw UDP between the first two hosts: ping-pong medians and streams.
UDP_PORT_BASE=18700
udp_pair() { # udp_pair ARGS...: server on host 1, client on host 2
	local h1=${HOSTS[0]} h2=${HOSTS[1]} spid rc=0
	UDP_PORT_BASE=$((UDP_PORT_BASE + 1))
	timeout -k 2 240 "$HOSTS_AGENT" "$h1" "$RAW $* -p $UDP_PORT_BASE" \
		>/dev/null 2>&1 </dev/null &
	spid=$!
	timeout -k 2 240 "$HOSTS_AGENT" "$h2" \
		"$RAW $* -p $UDP_PORT_BASE ${HOSTS_IP[$h1]}" </dev/null || rc=$?
	wait "$spid" || rc=1
	return "$rc"
}
# softib's payload per packet at the hosts' MTU: the largest IB MTU that
# fits with the RoCE headers (IP 20, UDP 8, BTH 12, ICRC 4, and room)
udp_payload() {
	local m=${HOSTS_MTU:-1500}
	if [ "$m" -ge 4200 ]; then echo 4096
	elif [ "$m" -ge 2100 ]; then echo 2048
	else echo 1024
	fi
}
floor_udp() {
	local s n
	[ -x "$RAW" ] || return 0
	# sizes to 4 KiB (the across-host targets are at 8 B), few enough
	# ping-pongs that a loaded machine still finishes them in the bound
	udp_pair -t lat -d 4096 -i "$([ "$QUICK" = 1 ] && echo 200 || echo 500)" \
		>"$DATA/udp.lat.out" 2>&1 &&
		awk '!/^#/ && NF >= 3 && $1 ~ /^[0-9]+$/ { print $1, $3 }' \
			"$DATA/udp.lat.out" >"$DATA/floor.2hosts.lat.dat"
	: >"$DATA/floor.2hosts.bw.dat"
	for s in 4096 16384 65536 262144 1048576 4194304; do
		[ "$QUICK" = 1 ] && [ "$s" -gt 1048576 ] && continue
		n=$((64 * 1048576 / s))
		udp_pair -t bw -m "$s" -n "$n" -d "$(udp_payload)" >"$DATA/udp.bw.$s.out" 2>&1 &&
			awk -v s="$s" '$1 == s { print $1, $2 }' "$DATA/udp.bw.$s.out" \
				>>"$DATA/floor.2hosts.bw.dat"
	done
}

# ---- tables and plots ---------------------------------------------------

# table BENCH SETTING: the transports side by side, the floor, and each
# transport's ratio to the reference (vader on one host; across hosts the
# raw UDP floor where there is one, else tcp).
table() {
	local b=$1 setting=$2 k ref cols=() files=() f t fl
	k=$(kind "$b")
	for t in $TRANSPORTS; do
		f=$DATA/$b.$setting.$t.dat
		[ -s "$f" ] && cols+=("$t") && files+=("$f")
	done
	fl=$DATA/floor.$setting.$k.dat
	case $b in lat | put_lat | bw) ;; *) fl= ;; esac
	if [ -n "$fl" ] && [ -s "$fl" ]; then
		cols+=("floor")
		files+=("$fl")
	fi
	[ ${#cols[@]} -gt 0 ] || return 0
	ref=
	if [ "$setting" = 1host ]; then
		for t in "${cols[@]}"; do [ "$t" = vader ] && ref=vader; done
	else
		for t in "${cols[@]}"; do [ "$t" = floor ] && ref=floor; done
		[ -z "$ref" ] && for t in "${cols[@]}"; do [ "$t" = tcp ] && ref=tcp; done
	fi
	echo
	echo "# mpi_osu -t $b, $setting ($([ "$k" = lat ] && echo "us, lower is better" || echo "MB/s, higher is better"))"
	awk -v names="${cols[*]}" -v ref="$ref" '
	BEGIN { n = split(names, name, " "); for (i = 1; i <= n; i++) if (name[i] == ref) r = i }
	FNR == 1 { fi++ }
	{ val[fi, $1] = $2; sizes[$1] = 1 }
	END {
		printf "%-10s", "# Size"
		for (i = 1; i <= n; i++) printf " %12s", name[i]
		for (i = 1; i <= n; i++) if (i != r && r && name[i] != "floor")
			printf " %14s", name[i] "/" ref
		printf "\n"
		m = 0; for (s in sizes) list[++m] = s + 0
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
			if (list[j] < list[i]) { t = list[i]; list[i] = list[j]; list[j] = t }
		for (q = 1; q <= m; q++) { s = list[q]
			printf "%-10s", s
			for (i = 1; i <= n; i++)
				if ((i, s) in val) printf " %12.2f", val[i, s]; else printf " %12s", "-"
			for (i = 1; i <= n; i++) if (i != r && r && name[i] != "floor") {
				if ((i, s) in val && (r, s) in val && val[r, s] > 0)
					printf " %14.2f", val[i, s] / val[r, s]
				else printf " %14s", "-"
			}
			printf "\n"
		}
	}' "${files[@]}"
}

# one colour per transport, the same in every panel and plot
color() {
	case $1 in
	softib) echo '#d62728' ;;
	vader) echo '#1f77b4' ;;
	tcp) echo '#2ca02c' ;;
	*) echo '#9467bd' ;;
	esac
}

# plot BENCH: DIR/BENCH.png, one panel per setting, every transport and
# its floor, log-log.
plot() {
	local b=$1 k setting t f fl n=0 specs ylabel title
	command -v gnuplot >/dev/null || return 0
	k=$(kind "$b")
	for setting in $SETTINGS; do n=$((n + 1)); done
	if [ "$k" = lat ]; then ylabel="latency (us)"; else ylabel="bandwidth (MB/s)"; fi
	{
		echo "set terminal pngcairo size $((640 * n)),480 font 'sans,10'"
		echo "set output '$OUT/$b.png'"
		echo "set multiplot layout 1,$n title 'mpi\\_osu -t $b ($(date -u +%F), load $(cut -d' ' -f1 /proc/loadavg))'"
		echo "set logscale xy 2"
		echo "set logscale y 10"
		echo "set xtics ('1' 1, '8' 8, '64' 64, '512' 512, '4K' 4096, '32K' 32768, '256K' 262144, '2M' 2097152)"
		echo "set xlabel 'message size (bytes)'"
		echo "set ylabel '$ylabel'"
		echo "set grid"
		echo "set key $([ "$k" = lat ] && echo 'top left' || echo 'bottom right')"
		for setting in $SETTINGS; do
			if [ "$setting" = 1host ]; then
				title="one host, $(ranks "$b") ranks"
			else
				title="two namespace hosts, $(($(ranks "$b") / 2)) rank(s) each"
			fi
			echo "set title '$title'"
			specs=()
			for t in $TRANSPORTS; do
				f=$DATA/$b.$setting.$t.dat
				[ -s "$f" ] && specs+=("'$f' using (\$1>0?\$1:1/0):2 with linespoints lw 2 lc rgb '$(color "$t")' title '$t'")
			done
			fl=$DATA/floor.$setting.$k.dat
			case $b in lat | put_lat | bw) ;; *) fl= ;; esac
			if [ -n "$fl" ] && [ -s "$fl" ]; then
				if [ "$setting" = 1host ]; then t="shared-memory floor"; else t="raw UDP floor"; fi
				specs+=("'$fl' using 1:2 with linespoints dt 2 lw 2 lc rgb 'black' title '$t'")
			fi
			if [ ${#specs[@]} -eq 0 ]; then
				echo "set label 1 'not run' at graph 0.5,0.5 center"
				echo "plot 1/0 notitle"
				echo "unset label 1"
			else
				(IFS=,; echo "plot ${specs[*]}")
			fi
		done
		echo "unset multiplot"
	} >"$DATA/$b.gp"
	gnuplot "$DATA/$b.gp" 2>"$DATA/$b.gp.err" || echo "mpi_vs: gnuplot failed for $b (see $DATA/$b.gp.err)" >&2
}

# targets: issue 13's targets, one line each, from the tables' data:
#   target SETTING BENCH SIZE softib V ANCHOR V ratio R OP LIMIT MET|MISSED
# (bench/targets.sh reads them). SIZE "worst:N" is the size of the worst
# ratio to tcp over every size both ran ("faster than tcp at every size").
targets() {
	local f=$DATA/%s.%s.%s.dat
	echo
	echo "# issue 13's targets (softib against the same run's anchors)"
	# target_at SETTING BENCH SIZE ANCHOR-FILE ANCHOR OP LIMIT
	target_at() {
		local sf
		# shellcheck disable=SC2059 # $f is the format
		sf=$(printf "$f" "$2" "$1" softib)
		[ -s "$sf" ] && [ -s "$4" ] || return 0
		awk -v set="$1" -v b="$2" -v size="$3" -v an="$5" -v op="$6" -v lim="$7" '
		FNR == 1 { fi++ }
		{ v[fi, $1] = $2 }
		END {
			if (size ~ /^worst/) {
				# the worst ratio over the sizes both have
				for (k in v) { split(k, p, SUBSEP)
					if (p[1] != 1 || !((2, p[2]) in v) || v[2, p[2]] <= 0) continue
					r = v[1, p[2]] / v[2, p[2]]
					if (w == "" || (op == "<" ? r > wr : r < wr)) { w = p[2]; wr = r } }
				if (w == "") exit
				s = w; label = "worst:" w
			} else { s = size; label = size
				if (!((1, s) in v) || !((2, s) in v) || v[2, s] <= 0) exit }
			r = v[1, s] / v[2, s]
			ok = op == "<=" ? r <= lim : op == ">=" ? r >= lim : op == "<" ? r < lim : r > lim
			printf "target %s %s %s softib %.2f %s %.2f ratio %.2f %s %s %s\n", set, b,
			       label, v[1, s], an, v[2, s], r, op, lim, ok ? "MET" : "MISSED"
		}' "$sf" "$4"
	}
	local b
	for b in $BENCHES; do
		case $b in lat | bw) ;; *) continue ;; esac
		if [ "$b" = lat ]; then
			# shellcheck disable=SC2059
			target_at 1host lat 8 "$(printf "$f" lat 1host vader)" vader "<=" 1.2
			target_at 2hosts lat 8 "$DATA/floor.2hosts.lat.dat" raw_udp "<=" 1.5
		else
			# shellcheck disable=SC2059
			target_at 1host bw 1048576 "$(printf "$f" bw 1host vader)" vader ">=" 1.0
			target_at 2hosts bw 1048576 "$DATA/floor.2hosts.bw.dat" raw_udp_stream ">=" 0.8
		fi
		for setting in $SETTINGS; do
			# shellcheck disable=SC2059
			target_at "$setting" "$b" worst "$(printf "$f" "$b" "$setting" tcp)" tcp \
				"$([ "$b" = lat ] && echo "<" || echo ">")" 1.0
		done
	done
}

# ---- the run ------------------------------------------------------------

run_all() {
	local setting b t r ok
	rm -f "$DATA"/*.dat "$DATA"/*.[0-9]* "$DATA"/*.out
	{
		echo "# mpi_vs: $(uname -r), $(nproc) CPUs, load at start:$(uptime | sed 's/.*load average//')"
		echo "# benchmarks: $BENCHES; transports: $TRANSPORTS; settings: $SETTINGS; reps $REPS$([ "$QUICK" = 1 ] && echo ', quick')"
	} | tee "$OUT/summary.txt"
	for setting in $SETTINGS; do
		if [ "$setting" = 2hosts ]; then
			if ! hosts_up 2; then
				echo "# no namespace hosts (needs root): 2hosts skipped" |
					tee -a "$OUT/summary.txt"
				continue
			fi
			floor_udp
		else
			floor_shm
		fi
		for b in $BENCHES; do
			for t in $TRANSPORTS; do
				[ "$setting" = 2hosts ] && [ "$t" = vader ] && continue
				ok=
				for ((r = 1; r <= REPS; r++)); do
					run_osu "$b" "$setting" "$t" "$r" && ok=1
				done
				[ -n "$ok" ] && median_of "$DATA/$b.$setting.$t".[0-9]* \
					>"$DATA/$b.$setting.$t.dat"
			done
		done
		[ "$setting" = 2hosts ] && hosts_down
	done
}
SUMMARY=$OUT/summary.txt
if [ "$PLOT_ONLY" = 1 ]; then
	# the run's own summary (with its loads) stays as it was
	SUMMARY=$OUT/summary.replot.txt
	echo "# mpi_vs: tables and plots again from $DATA" | tee "$SUMMARY"
else
	run_all
fi
for b in $BENCHES; do
	for setting in $SETTINGS; do table "$b" "$setting"; done
	plot "$b"
done | tee -a "$SUMMARY"
targets | tee -a "$SUMMARY"
{
	echo
	echo "# load at end:$(uptime | sed 's/.*load average//')"
	echo "# plots: $(for b in $BENCHES; do [ -f "$OUT/$b.png" ] && printf '%s ' "$OUT/$b.png"; done)"
	echo "# (open one with any image viewer, e.g. xdg-open $OUT/lat.png)"
} | tee -a "$SUMMARY"
exit "$failed"
