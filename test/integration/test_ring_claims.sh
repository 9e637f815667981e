#!/bin/bash
# Ring claims of a dead requester (issue 15 item 2): build/test/ring_claims
# kills a requester with SIGKILL at each test point between claiming a
# slot of the survivor's SRQ, inline pool or CQ and publishing it
# (SOFTIB_TEST_DIE_AT, hca/die_at.h); the survivor's CQ and SRQ must keep
# flowing past a wrap, and its SRQ must hold exactly the WQEs it is owed
# (the one the dead requester held posted again, once). Small messages go
# through the CQ's inline pool, large ones by CMA and by the bounce path.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh
# A segment of its own: small messages must find the CQ's inline pool,
# which a segment whose heap was once filled past half (test_shm_full's,
# kept by a killed holder of an earlier run) no longer gives.
export SOFTIB_SEG_TAG=${SOFTIB_SEG_TAG:-ringclaims$$}

prog=build/test/ring_claims
rounds=1
sib_long && rounds=5

if [ ! -x "$prog" ]; then
	fail "$prog is not built"
	summary
	exit
fi

run_case() { # desc site size nocma
	local desc=$1 site=$2 size=$3 nocma=$4 i rc log
	for ((i = 1; i <= rounds; i++)); do
		log=$SIB_TMP/ring_claims.$site.$size.$nocma.$i.log
		rc=0
		sib_run 60 env SOFTIB_NO_CMA=$nocma "$prog" -k "$site" -s "$size" -v \
			>"$log" 2>&1 || rc=$?
		if [ "$rc" -eq 0 ] && grep -q 'PASS$' "$log"; then
			pass "$desc: $(grep 'PASS$' "$log")"
		else
			fail "$desc (exit $rc)"
			cat "$log"
		fi
	done
}

for site in rq_claimed rq_held inl_filling inl_ready cq_claimed cq_written; do
	run_case "requester killed at $site, 64 B inline" $site 64 0
done
for site in rq_claimed rq_held cq_claimed cq_written; do
	run_case "requester killed at $site, 64 KiB by CMA" $site 65536 0
	run_case "requester killed at $site, 64 KiB bounced" $site 65536 1
done
# a requester killed while it holds the survivor's bounce mailbox, its
# request posted (the mailbox's holder word left naming it: taken over
# only on proof of death, hca/mem_bounce.c): the survivor serves what it
# left, and its CQ and SRQ flow as after the other sites
run_case "requester killed holding the mailbox, 64 KiB bounced" bounce_held 65536 1
# the heap stays consistent through all of it
out=$(sib_run 30 build/bin/softib heap-check 2>&1)
if [ $? -eq 0 ]; then
	pass "softib heap-check after the deaths: $(echo "$out" | tail -1)"
else
	fail "softib heap-check after the deaths"
	echo "$out"
fi

summary
