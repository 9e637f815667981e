#!/bin/bash
# The kill storm (issue 15): build/test/kill_storm kills processes that
# push into two survivors' CQs and take from their SRQs with SIGKILL at
# random moments (100 kills; 1,000 in the long tier), starting another in
# each dead one's place; the survivors' stream to each other must never
# stall, every message they receive is checked (sequence and payload),
# and `softib heap-check` must find the segment heap consistent after each
# reclaim. One victim in three arms a test point (SOFTIB_TEST_DIE_AT) and
# kills itself inside a ring claim or the heap's critical section.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=build/test/kill_storm
kills=100 secs=90
sib_long && kills=1000 secs=900

if [ ! -x "$prog" ] || [ ! -x build/bin/softib ]; then
	fail "$prog or build/bin/softib is not built"
	summary
	exit
fi

log=$SIB_TMP/kill_storm.log
rc=0
sib_run $secs "$prog" -k $kills -s $RANDOM -v >"$log" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && grep -q 'PASS$' "$log"; then
	pass "kill storm: $(grep 'PASS$' "$log")"
else
	fail "kill storm, $kills kills (exit $rc)"
	tail -30 "$log"
fi

summary
