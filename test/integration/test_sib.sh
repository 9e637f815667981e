#!/usr/bin/env bash
# libsib, the message runtime (issue 11), on one host:
#
#  1. the CUnit suites of libsib (build/asan/test/test_sib_*: the protocol
#     table, argument validation, local traffic), under ASan;
#  2. sib_alltoall under mpirun (PMIx bootstrap), 8 ranks on 2 cores in
#     blocking mode: all-to-all of random tagged messages up to the eager
#     limit into wildcard receives, every byte, length, source and per-sender
#     order checked; each rank asserts from libsib's counters that it holds
#     one XRC send QP per host it sent to (here: 1), and `softib qps`, run
#     while every rank still holds its QPs, must show exactly one XRC send
#     QP per rank;
#  3. the same with a rank killed (SIGKILL) half-way and a process that joins
#     the running job from outside mpirun (addresses through files): the
#     survivors and the joiner finish with everything checked;
#  4. polling progress (SIB_PROGRESS=poll), 2 ranks.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh
trap sib_cleanup EXIT

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SOFTIB_TOOL="$SIB_ROOT/build/bin/softib" SIB_QUIET=1
prog="$SIB_ROOT/build/test/sib_alltoall"
msgs=300
sib_long && msgs=3000

# ------------------------------------------------------------------ 1
for t in build/asan/test/test_sib_*; do
	[ -x "$t" ] || continue
	check "unit: $(basename "$t")" sib_run 120 "$t"
done

# ------------------------------------------------------------------ 2
ranks_ok() { # ranks_ok LOG N: N "rank R: ok" lines and no FAILED
	[ "$(grep -c '^sib_alltoall rank [0-9]*: ok' "$1")" -eq "$2" ] &&
		! grep -q FAILED "$1"
}

log=$SIB_TMP/a2a.log
qps=$SIB_TMP/qps.txt
xrcd_files() { # the XRC domain files of this user and tag, sorted
	find /dev/shm -maxdepth 1 -name "sib-xrcd-$(id -u)-${SOFTIB_SEG_TAG:-}-*" \
		-printf '%f\n' 2>/dev/null | sort
}
xrcd_before=$(xrcd_files)
# a stats file of a process that died without removing it (killed)
true & dead=$!
wait "$dead"
stale=/dev/shm/sib-stats-$(id -u)-${SOFTIB_SEG_TAG:-}-$dead-7
: >"$stale"
timeout -k 5 120 mpirun -np 8 --oversubscribe "$prog" -m "$msgs" -q "$qps" \
	>"$log" 2>&1
rc=$?
ranks_ok "$log" 8 || cat "$log"
check "alltoall 8 ranks (rc $rc)" ranks_ok "$log" 8
xrcd_new=$(comm -13 <(echo "$xrcd_before") <(xrcd_files) | tr '\n' ' ')
check "the job's XRC domain file went with its last worker (left: ${xrcd_new:-none})" \
	test -z "$xrcd_new"
check "a dead process's stats file was swept by the next process's worker" \
	test ! -e "$stale"
# one XRC send QP per rank in softib's own view, as libsib counts it
per_pid=$(awk '$2 == "XRC_SEND" { n[$4]++ } END { for (p in n) print n[p] }' \
	"$qps" 2>/dev/null | sort | uniq -c | tr -s ' ')
check "softib qps: 8 processes with one XRC send QP each ($per_pid)" \
	test "$per_pid" = " 8 1"
check "softib sib: 8 workers, each with one XRC send QP serving one host" \
	test "$(grep -c '^worker .*send_qps=1 send_qps_max=1 recv_qps=1 hosts_sent_to=1' \
		"$qps.sib")" -eq 8
check "libsib counters: send QPs = hosts sent to = 1" \
	test "$(grep -c 'send_qps=1 send_qps_max=1 hosts_sent_to=1' "$log")" -eq 8

# ------------------------------------------------------------------ 3
dir=$SIB_TMP/join
mkdir -p "$dir"
export SIB_JOB_KEY="sibtest$$"
log=$SIB_TMP/kill.log
jlog=$SIB_TMP/joiner.log
timeout -k 5 120 mpirun -np 4 --oversubscribe --enable-recovery -x SIB_JOB_KEY \
	-x SIB_QUIET "$prog" -m $((msgs * 5)) -k 2 -J "$dir" >"$log" 2>&1 &
mp=$!
for ((i = 0; i < 200; i++)); do
	[ -f "$dir/rank.3" ] && break
	sleep 0.05
done
sib_run 120 "$prog" --join "$dir" -n 4 -m $((msgs * 5)) -k 2 >"$jlog" 2>&1
jrc=$?
wait "$mp"
rc=$?
ranks_ok "$log" 3 || cat "$log"
check "rank killed mid-run: 3 survivors finish (rc $rc)" ranks_ok "$log" 3
check "the survivors saw the dead rank fail their sends and receives" \
	test "$(grep -c 'receive from dead rank 2: peer failed' "$log")" -eq 3
grep -q 'joiner: ok' "$jlog" || cat "$jlog"
check "a process joined mid-run and exchanged with every rank (rc $jrc)" \
	grep -q 'joiner: ok' "$jlog"
unset SIB_JOB_KEY

# ------------------------------------------------------------------ 4
log=$SIB_TMP/poll.log
SIB_PROGRESS=poll timeout -k 5 60 mpirun -np 2 -x SIB_PROGRESS "$prog" \
	-m "$msgs" >"$log" 2>&1
ranks_ok "$log" 2 || cat "$log"
check "polling progress, 2 ranks" ranks_ok "$log" 2

summary
