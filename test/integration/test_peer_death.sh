#!/bin/bash
# Peer death on one host: build/test/peer_death connects RC QPs between a
# parent and a child, the child kills itself with SIGKILL mid-stream, and
# the parent's outstanding SENDs (then RDMA WRITEs) must complete, the first
# with IBV_WC_RETRY_EXC_ERR and the rest with IBV_WC_WR_FLUSH_ERR, within
# 10 s of the kill, no post blocking, nothing hanging.  Over cross-memory
# attach and over the bounce path (SOFTIB_NO_CMA=1); the long tier repeats
# each case, since the moment of death races with the traffic.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=build/test/peer_death
rounds=1
sib_long && rounds=5

if [ ! -x "$prog" ]; then
	fail "$prog is not built"
	summary
	exit
fi

# cma, nocma: the host link; udp: the UDP link between the two processes
# (SOFTIB_LINK=udp), where the survivor learns of the death by its ACK
# timer alone.
for mode in cma nocma udp; do
	nocma=0 link=
	[ $mode = nocma ] && nocma=1
	[ $mode = udp ] && link=udp
	for op in send write; do
		for ((i = 1; i <= rounds; i++)); do
			log=$SIB_TMP/peer_death.$mode.$op.$i.log
			rc=0
			sib_run 90 env SOFTIB_NO_CMA=$nocma SOFTIB_LINK=$link "$prog" -o $op -v \
				>"$log" 2>&1 || rc=$?
			desc="peer death, parent posting ${op^^}s ($mode)"
			[ "$rounds" -gt 1 ] && desc+=", round $i"
			if [ "$rc" -eq 0 ] && grep -q 'variant: PASS$' "$log"; then
				pass "$desc: $(grep -o 'then WR.*kill' "$log")"
			else
				fail "$desc (exit $rc)"
				cat "$log"
			fi
		done
	done
done

summary
