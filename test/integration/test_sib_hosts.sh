#!/usr/bin/env bash
# libsib across 3 hosts (network namespaces joined by a bridge, mpirun
# through the rsh agent of test/integration/hosts.sh), 2 ranks per host:
#
#  1. sib_alltoall: every rank sends to every rank, every byte checked;
#     each rank holds exactly 3 XRC send QPs (one per host, its own
#     included), asserted from libsib's counters, and `softib qps` on rank
#     0's host shows 3 XRC send QPs for each of its 2 processes;
#  2. a rank killed half-way (rank 3, on the second host) and a process that
#     joins from outside mpirun on the second host: the 5 survivors and the
#     joiner finish, everything checked;
#  3. sib_away (2 hosts x 1 rank): connections complete while a process is
#     away from libsib (the connection thread, transport/async.c): a send
#     queued behind a handshake goes out, and a peer's handshake is
#     answered, while its process sleeps outside libsib.
#  4. a rank stopped (SIGSTOP: every thread, the device's too) for 4 s
#     half-way through, then continued: nobody takes it for dead (the peer
#     timeout, 10 s; it was 3 s of unanswered pings, and a send QP broke
#     after 0.54 s of silence), and both ranks finish, everything checked.
# Skipped (not failed) where namespaces cannot be made (not root).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh
. test/integration/hosts.sh
trap 'hosts_down; sib_cleanup' EXIT

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SIB_QUIET=1
export SOFTIB_TOOL="$SIB_ROOT/build/bin/softib"
prog="$SIB_ROOT/build/test/sib_alltoall"
msgs=200
sib_long && msgs=2000

if ! hosts_up 3; then
	echo "test_sib_hosts.sh: no network namespaces here: skipped"
	exit 0
fi

ranks_ok() { # ranks_ok LOG N
	[ "$(grep -c '^sib_alltoall rank [0-9]*: ok' "$1")" -eq "$2" ] &&
		! grep -q FAILED "$1"
}

# ------------------------------------------------------------------ 1
log=$SIB_TMP/a2a.log
qps=$SIB_TMP/qps.txt
HOSTS_TIMEOUT=90 hosts_mpirun 3 2 -x SIB_QUIET -x SOFTIB_TOOL "$prog" \
	-m "$msgs" -q "$qps" >"$log" 2>&1
rc=$?
ranks_ok "$log" 6 || cat "$log"
check "alltoall 3 hosts x 2 ranks (rc $rc)" ranks_ok "$log" 6
check "libsib counters: 3 XRC send QPs per rank, one per host" \
	test "$(grep -c 'send_qps=3 send_qps_max=3 hosts_sent_to=3' "$log")" -eq 6
per_pid=$(awk '$2 == "XRC_SEND" { n[$4]++ } END { for (p in n) print n[p] }' \
	"$qps" 2>/dev/null | sort | uniq -c | tr -s ' ')
check "softib qps on rank 0's host: 2 processes with 3 XRC send QPs each ($per_pid)" \
	test "$per_pid" = " 2 3"

# ------------------------------------------------------------------ 2
dir=$SIB_TMP/join
mkdir -p "$dir"
export SIB_JOB_KEY="sibhosts$$"
log=$SIB_TMP/kill.log
jlog=$SIB_TMP/joiner.log
m=$((msgs * 5))
HOSTS_TIMEOUT=90 hosts_mpirun 3 2 --enable-recovery -x SIB_QUIET -x SIB_JOB_KEY \
	"$prog" -m "$m" -k 3 -J "$dir" >"$log" 2>&1 &
mp=$!
for ((i = 0; i < 400; i++)); do
	[ -f "$dir/rank.5" ] && break
	sleep 0.05
done
hosts_exec "${HOSTS[1]}" env SIB_JOB_KEY="$SIB_JOB_KEY" SIB_QUIET=1 \
	SOFTIB_SEG_TAG="${SOFTIB_SEG_TAG:-}" SOFTIB_UDP_PORT="${SOFTIB_UDP_PORT:-}" \
	timeout -k 5 90 "$prog" --join "$dir" -n 6 -m "$m" -k 3 >"$jlog" 2>&1
jrc=$?
# Open MPI's launcher may linger after a killed rank on another host: the
# survivors' lines are the verdict, then the launcher goes
for ((i = 0; i < 600; i++)); do
	ranks_ok "$log" 5 && break
	grep -q 'FAILED\|timed out' "$log" && break
	kill -0 "$mp" 2>/dev/null || break
	sleep 0.1
done
pkill -TERM -P "$mp" 2>/dev/null # timeout, which passes it to mpirun
kill "$mp" 2>/dev/null
wait "$mp"
ranks_ok "$log" 5 || cat "$log"
check "3 hosts, rank 3 killed mid-run: 5 survivors finish" ranks_ok "$log" 5
check "a receive naming the dead rank failed on each survivor" \
	test "$(grep -c 'receive from dead rank 3: peer failed' "$log")" -eq 5
grep -q 'joiner: ok' "$jlog" || cat "$jlog"
check "a process joined mid-run on host 2 and exchanged with every rank (rc $jrc)" \
	grep -q 'joiner: ok' "$jlog"
check "the joiner held 3 XRC send QPs (at most) for 3 hosts" \
	grep -q 'joiner: send_qps=[23] send_qps_max=3 hosts_sent_to=3' "$jlog"

# ------------------------------------------------------------------ 3
log=$SIB_TMP/away.log
HOSTS_TIMEOUT=60 hosts_mpirun 2 1 -x SIB_QUIET "$SIB_ROOT/build/test/sib_away" \
	>"$log" 2>&1
rc=$?
[ "$(grep -c '^sib_away rank [01]: ok' "$log")" -eq 2 ] || cat "$log"
check "connections complete while the process is away from libsib (rc $rc)" \
	test "$(grep -c '^sib_away rank [01]: ok' "$log")" -eq 2

# ------------------------------------------------------------------ 4
log=$SIB_TMP/stop.log
HOSTS_TIMEOUT=90 hosts_mpirun 2 1 -x SIB_QUIET "$prog" -m "$msgs" -S 1 \
	>"$log" 2>&1 &
mp=$!
spid=
for ((i = 0; i < 1200; i++)); do
	spid=$(ps -eo pid=,stat=,args= |
		awk '$2 ~ /^T/ && /sib_alltoall/ && !/mpirun/ { print $1; exit }')
	[ -n "$spid" ] && break
	kill -0 "$mp" 2>/dev/null || break
	sleep 0.05
done
[ -n "$spid" ] && sleep 4 && kill -CONT "$spid"
wait "$mp"
rc=$?
[ "$(grep -c '^sib_alltoall rank [01]: ok' "$log")" -eq 2 ] || cat "$log"
check "a rank stopped 4 s half-way (SIGSTOP) is not taken for dead: both finish (rc $rc)" \
	test -n "$spid" -a "$(grep -c '^sib_alltoall rank [01]: ok' "$log")" -eq 2

summary
