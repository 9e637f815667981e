#!/usr/bin/env bash
# Reclaim after deaths (issue 18): Debian's unmodified pingpongs of every
# kind run side by side on softib0 — ibv_rc_pingpong polling and with -e
# (event-driven), ibv_srq_pingpong -q 16 (an SRQ with 16 QPs),
# ibv_ud_pingpong, ibv_xsrq_pingpong (XRC: a server with two clients) —
# and are killed with SIGKILL at random moments, in overlapping bursts,
# some during their setup, while new ones start. Then, exactly:
#
#  1. with a live process on the device all along (build/test/dev_hold),
#     within 2 s of the last death: `softib qps|srqs|cqs|mrs|xrcds` list
#     nothing, `softib procs` only that process, and the heap's free bytes
#     (`softib status`) are what they were before the first pingpong;
#  2. the same kill storm again, ending with the live process killed too,
#     so that no process is left: the moment a new process has opened the
#     device, the same holds (reclaim runs inside the open).
#
# The test runs on a segment of its own (SOFTIB_SEG_TAG gets a suffix),
# created for it and removed at its end, so that its before and after are
# its own. 25 s of storm per part; 300 s under SOFTIB_LONG=1.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

hold=build/test/dev_hold
tool=build/bin/softib
storm_secs=25
sib_long && storm_secs=300
export SOFTIB_SEG_TAG=${SOFTIB_SEG_TAG:-t}-rcl$$
export LD_LIBRARY_PATH=$(sib_lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
seg_file=$(ls /dev/shm 2>/dev/null | grep -c "softib-.*-$SOFTIB_SEG_TAG\$")
if [ "$seg_file" != 0 ]; then
	fail "segment of tag $SOFTIB_SEG_TAG exists already"
	summary
	exit
fi
reclaim_cleanup() {
	local f
	for f in /dev/shm/softib-"$(id -u)"-*-"$SOFTIB_SEG_TAG" \
		 /dev/shm/softib-"$(id -u)"-*-"$SOFTIB_SEG_TAG".lock; do
		[ -e "$f" ] && rm -f "$f"
	done
	sib_cleanup
}
trap reclaim_cleanup EXIT

for t in "$hold" "$tool"; do
	if [ ! -x "$t" ]; then
		fail "$t is built"
		summary
		exit
	fi
done
for t in ibv_rc_pingpong ibv_srq_pingpong ibv_ud_pingpong ibv_xsrq_pingpong; do
	command -v $t >/dev/null || { fail "$t is installed (ibverbs-utils)"; summary; exit; }
done

# ---- a live process on the device: dev_hold, ended by closing its stdin
HOLD_PID=
start_hold() { # start_hold NAME: HOLD_PID once it has the device open
	local out=$SIB_TMP/$1.out i
	rm -f "$SIB_TMP/$1.fifo"
	mkfifo "$SIB_TMP/$1.fifo"
	"$hold" -t 900 <"$SIB_TMP/$1.fifo" >"$out" 2>&1 &
	HOLD_PID=$!
	exec 7>"$SIB_TMP/$1.fifo"
	for ((i = 0; i < 200; i++)); do
		grep -qs '^open' "$out" && return 0
		sleep 0.05
	done
	echo "dev_hold did not open the device:"
	cat "$out"
	return 1
}

free_bytes() {
	"$tool" status | awk '/^heap free/ { print $3 }'
}

rows() { # rows CMD: the listing's rows (its header and "no ..." left out)
	"$tool" "$1" | awk 'NR > 1 && !/^no /' | grep -c .
}

# What is left: "qps=N srqs=N cqs=N mrs=N xrcds=N procs=N free=DELTA"
# (procs: live slots other than the holder's; free: bytes missing from the
# heap against the baseline).
leftovers() {
	local base=$1 f m
	f=$(free_bytes)
	case $f in
	'' | *[!0-9]*) m="unknown (the heap's free lists could not be walked)" ;;
	*) m=$((base - f)) ;;
	esac
	echo "qps=$(rows qps) srqs=$(rows srqs) cqs=$(rows cqs) mrs=$(rows mrs)" \
	     "xrcds=$(rows xrcds) procs=$(($(rows procs) - 1))" \
	     "free_missing=$m"
}
clean() { [ "$1" = "qps=0 srqs=0 cqs=0 mrs=0 xrcds=0 procs=0 free_missing=0" ]; }

# ---- the storm
PIDS=()
NJOBS=0
NKILLS=0
iters=1000000000
start_job() { # start_job KIND
	local kind=$1 p s c n=2 k
	p=$(free_port) || return
	NJOBS=$((NJOBS + 1))
	case $kind in
	rc) s="ibv_rc_pingpong -d softib0 -p $p -n $iters" ;;
	rce) s="ibv_rc_pingpong -d softib0 -p $p -n $iters -e" ;;
	srq) s="ibv_srq_pingpong -d softib0 -p $p -q 16 -n $iters" ;;
	ud) s="ibv_ud_pingpong -d softib0 -p $p -s 512 -n $iters" ;;
	xsrq) s="ibv_xsrq_pingpong -d softib0 -p $p -c 2 -n 8000"; n=3 ;;
	esac
	c="$s localhost"
	[ "$kind" = xsrq ] && c="ibv_xsrq_pingpong -d softib0 -p $p -n 8000 localhost"
	# disowned: the shell reaps them without a "Killed" line each
	$s >"$SIB_TMP/job$NJOBS.s" 2>&1 &
	PIDS+=($!)
	disown $!
	sleep "0.$((RANDOM % 3 + 1))"
	for ((k = 1; k < n; k++)); do
		$c >"$SIB_TMP/job$NJOBS.c$k" 2>&1 &
		PIDS+=($!)
		disown $!
	done
}
prune() {
	local p alive=()
	for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
	PIDS=("${alive[@]}")
}
kill_some() { # kill_some N: N random processes of the storm, back to back
	local i
	for ((i = 0; i < $1 && ${#PIDS[@]} > 0; i++)); do
		kill -KILL "${PIDS[$((RANDOM % ${#PIDS[@]}))]}" 2>/dev/null && NKILLS=$((NKILLS + 1))
	done
}
kinds=(rc rce srq ud xsrq)
storm() { # storm SECS
	local end=$((SECONDS + $1)) k p
	for k in "${kinds[@]}" "${kinds[@]}"; do start_job "$k"; done
	while [ $SECONDS -lt $end ]; do
		sleep "0.$((RANDOM % 5))"
		prune
		kill_some $((RANDOM % 4 + 1))
		for ((k = RANDOM % 3 + 1; k > 0; k--)); do
			start_job "${kinds[$((RANDOM % 5))]}"
		done
		if [ $((RANDOM % 3)) = 0 ]; then # a death during setup
			start_job "${kinds[$((RANDOM % 5))]}"
			sleep "0.0$((RANDOM % 9))"
			kill -KILL "${PIDS[-1]}" "${PIDS[-2]}" 2>/dev/null && NKILLS=$((NKILLS + 2))
		fi
	done
	prune
	for p in "${PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null && NKILLS=$((NKILLS + 1))
	done
	for ((k = 0; k < 100; k++)); do # until the shell has reaped them all
		prune
		[ ${#PIDS[@]} = 0 ] && break
		sleep 0.1
	done
	PIDS=()
}

# ---------------------------------------------------------------- part 1
start_hold hold1 || { fail "dev_hold opens the device"; summary; exit; }
hold1=$HOLD_PID
base=$(free_bytes)
if [ -z "$base" ]; then
	fail "softib status prints the heap's free bytes"
	"$tool" status
	summary
	exit
fi
before=$(leftovers "$base")
check "before the storm, nothing but the holder: $before" clean "$before"

storm "$storm_secs"
echo "part 1: $NJOBS jobs started, $NKILLS processes killed (load $(cut -d' ' -f1-3 /proc/loadavg))"
after=
for ((i = 0; i < 20; i++)); do
	after=$(leftovers "$base")
	clean "$after" && break
	sleep 0.1
done
check "a live process on the device: within 2 s of the last death nothing of the dead is left: $after" \
	clean "$after"
if ! clean "$after"; then # what is left, and what the holder is doing
	"$tool" procs | head -20
	for t in /proc/"$hold1"/task/*; do
		echo "holder thread $(cat "$t/comm" 2>/dev/null): $(cat "$t/wchan" 2>/dev/null) $(awk '{ print $3 }' "$t/stat" 2>/dev/null)"
	done
	# where the holder's threads are (a reclaim that never ran)
	command -v gdb >/dev/null &&
		timeout 30 gdb -p "$hold1" -batch -ex "thread apply all bt 30" 2>/dev/null |
		grep -E '^#|^Thread' | head -60
fi

# ---------------------------------------------------------------- part 2
NJOBS=0 NKILLS=0
storm "$storm_secs" &
storm_pid=$!
sleep "$((storm_secs / 2))"
kill -KILL "$hold1" 2>/dev/null # the live process dies in the storm too
wait "$storm_pid"
exec 7>&-
wait "$hold1" 2>/dev/null
echo "part 2: the storm again, the holder killed in it (load $(cut -d' ' -f1-3 /proc/loadavg))"
live=$("$tool" procs | awk 'NR > 1 && $NF == "live"' | grep -c .)
echo "before the next open: $(rows qps) QPs listed, $live live processes"
start_hold hold2 || { fail "dev_hold opens the device again"; summary; exit; }
after=$(leftovers "$base")
check "no process left alive: the moment one opens the device, nothing of the dead is left: $after" \
	clean "$after"
[ "$after" = "${after/qps=0/}" ] && "$tool" qps | head -20
exec 7>&-
wait "$HOLD_PID" 2>/dev/null

summary
