#!/bin/bash
# The segment heap after a death inside its critical section (issue 15
# item 6): build/test/hca_heap_repair kills a process holding the segment
# lock half-way through draining the quarantine, giving a bump gap away,
# unlinking a free block and queueing a freed one (SOFTIB_TEST_DIE_AT
# test points, armed with hca_die_arm); the next locker's EOWNERDEAD must
# leave a heap that the verifier finds consistent and that hands no block
# out twice. Each run uses a segment of its own.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=build/test/hca_heap_repair
rounds=1
sib_long && rounds=20

if [ ! -x "$prog" ]; then
	fail "$prog is not built"
	summary
	exit
fi

for site in drain gap pop quar; do
	for ((i = 1; i <= rounds; i++)); do
		log=$SIB_TMP/heap_repair.$site.$i.log
		rc=0
		sib_run 60 "$prog" -k $site -v >"$log" 2>&1 || rc=$?
		desc="killed in the heap's critical section ($site)"
		[ "$rounds" -gt 1 ] && desc+=", round $i"
		if [ "$rc" -eq 0 ] && grep -q 'PASS$' "$log"; then
			pass "$desc: $(grep -c consistent "$log") heap checks consistent, no block handed out twice"
		else
			fail "$desc (exit $rc)"
			cat "$log"
		fi
	done
done

summary
