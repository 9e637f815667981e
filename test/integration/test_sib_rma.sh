#!/usr/bin/env bash
# libsib's rendezvous and RMA (issue 12) across processes, under mpirun:
#
#  1. one host, 3 ranks: build/test/sib_rma — tagged messages 0 B..64 MiB
#     across every protocol boundary, contiguous and iovec, every byte;
#     put / get / atomics at random offsets from every rank at once against
#     a serial model, exact fetch-add totals, one compare-swap winner;
#     access errors (outside a region, unmapped key) give
#     SIB_ERR_REMOTE_ACCESS and the connection still works; nothing left
#     registered or in flight (the runtime's counters);
#  2. the same with a rank killed mid-rendezvous (-k 1): the receive from
#     it and the send to it end with SIB_ERR_PEER_FAILED;
#  3. 1 and 2 again across 3 namespace hosts (1 rank each: every transfer
#     crosses the UDP link);
#  4. the READ variant of the rendezvous (SIB_RNDV_MODE=read; the default
#     is WRITE): the CUnit suite under ASan, 1 on one host and on 3 hosts;
#  5. one host, 1 again with each route of one-sided bytes: the regions
#     libsib allocates are shared memfds that peers map (the mapping route,
#     1 above: checked that it was taken), private memory
#     (SIB_MEM_ALLOC=anon: cross-memory attach), the mapping route under
#     SOFTIB_NO_CMA=1 (tagged rendezvous by the bounce path), and in the
#     long tier (SOFTIB_LONG=1) private memory with SOFTIB_NO_CMA=1 (every
#     one-sided byte by the bounce path); the route's CUnit suite (ASan).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh
. test/integration/hosts.sh
trap 'hosts_down; sib_cleanup' EXIT

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SIB_QUIET=1
prog="$SIB_ROOT/build/test/sib_rma"

ok_ranks() { # ok_ranks LOG N
	[ "$(grep -c '^sib_rma rank [0-9]*: ok' "$1")" -eq "$2" ] &&
		! grep -q FAILED "$1"
}
death_ok() { # death_ok LOG
	ok_ranks "$1" 2 &&
		grep -q 'rendezvous receive from dead rank 1: peer failed' "$1" &&
		grep -q 'rendezvous send to dead rank 1: peer failed' "$1"
}

log=$SIB_TMP/rma1.log
timeout -k 5 240 mpirun -np 3 --oversubscribe -x SIB_TEST_WRITE_REFUSED=1 "$prog" \
	>"$log" 2>&1
rc=$?
ok_ranks "$log" 3 || cat "$log"
check "one host, 3 ranks: tag 0 B..64 MiB, put/get/atomics, access errors, a rendezvous write refused (rc $rc)" \
	ok_ranks "$log" 3

log=$SIB_TMP/rma1k.log
timeout -k 5 60 mpirun --enable-recovery -np 3 --oversubscribe "$prog" -k 1 \
	>"$log" 2>&1
death_ok "$log" || cat "$log"
check "one host: rank killed mid-rendezvous, receive and send end PEER_FAILED" \
	death_ok "$log"

log=$SIB_TMP/rma1r.log
timeout -k 5 240 mpirun -np 3 --oversubscribe -x SIB_RNDV_MODE=read "$prog" \
	>"$log" 2>&1
rc=$?
ok_ranks "$log" 3 || cat "$log"
check "one host, READ variant: tag, put/get/atomics, access errors (rc $rc)" \
	ok_ranks "$log" 3
check "unit: test_sib_rma, READ variant (ASan)" \
	sib_run 120 env SIB_RNDV_MODE=read build/asan/test/test_sib_rma

check "one host: regions were memfds (the mapping route)" \
	grep -q 'regions memfd (mapping route)' "$SIB_TMP/rma1.log"
variants=("SIB_MEM_ALLOC=anon" "SOFTIB_NO_CMA=1")
[ -n "${SOFTIB_LONG:-}" ] && variants+=("SIB_MEM_ALLOC=anon SOFTIB_NO_CMA=1")
for v in "${variants[@]}"; do
	log=$SIB_TMP/rma1v.log
	xs=()
	for kv in $v; do xs+=(-x "$kv"); done
	timeout -k 5 240 env $v mpirun -np 3 --oversubscribe "${xs[@]}" "$prog" \
		>"$log" 2>&1
	rc=$?
	ok_ranks "$log" 3 || cat "$log"
	check "one host, $v: tag, put/get/atomics, access errors (rc $rc)" \
		ok_ranks "$log" 3
done
check "unit: test_hca_mem_map (ASan): bounds, stale key, owner death" \
	sib_run 60 build/asan/test/test_hca_mem_map

if ! hosts_up 3; then
	echo "test_sib_rma.sh: no network namespaces here: hosts part skipped"
	summary
	exit
fi
log=$SIB_TMP/rma3.log
HOSTS_TIMEOUT=300 hosts_mpirun 3 1 -x SIB_QUIET "$prog" >"$log" 2>&1
rc=$?
ok_ranks "$log" 3 || cat "$log"
check "3 hosts: tag 0 B..64 MiB, put/get/atomics, access errors (rc $rc)" \
	ok_ranks "$log" 3

log=$SIB_TMP/rma3r.log
HOSTS_TIMEOUT=300 hosts_mpirun 3 1 -x SIB_QUIET -x SIB_RNDV_MODE=read "$prog" \
	>"$log" 2>&1
rc=$?
ok_ranks "$log" 3 || cat "$log"
check "3 hosts, READ variant: tag, put/get/atomics, access errors (rc $rc)" \
	ok_ranks "$log" 3

log=$SIB_TMP/rma3k.log
HOSTS_TIMEOUT=90 hosts_mpirun 3 1 --enable-recovery -x SIB_QUIET "$prog" -k 1 \
	>"$log" 2>&1 &
mp=$!
for ((i = 0; i < 600; i++)); do
	death_ok "$log" && break
	grep -q 'FAILED' "$log" && break
	kill -0 "$mp" 2>/dev/null || break
	sleep 0.1
done
pkill -TERM -P "$mp" 2>/dev/null # timeout, which passes it to mpirun
kill "$mp" 2>/dev/null
wait "$mp"
death_ok "$log" || cat "$log"
check "3 hosts: rank killed mid-rendezvous, receive and send end PEER_FAILED" \
	death_ok "$log"

summary
