#!/bin/bash
# The per-connection mailbox (docs/datapath.md, "A mailbox per
# connection"): its two CUnit programs (build/test/test_verbs_mbox: sizes
# across the threshold with every byte checked, order with ring-path WQEs
# between, a full mailbox, RNR wait and exhaustion, the receiver's length
# error and error state, two processes, over RC and again over XRC;
# build/test/test_verbs_mbox_lanes: an XRC SRQ's lanes among several send
# QPs and SRQs) under three settings: mailbox on
# (the default; SOFTIB_MBOX=1 says so);
# with every message the receiver does not take at once retracted and
# sent again by the ring path (SOFTIB_MBOX_STALL_US=0), which exercises
# the retract and the order of the two paths; and with the mailbox off
# (SOFTIB_NO_MBOX=1), the ring path's answers to the same tests. Then
# ibv_rc_pingpong, polling and event-driven, with payloads in the mailbox
# and the retracts forced.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

progs=(build/test/test_verbs_mbox build/test/test_verbs_mbox_lanes)
for prog in "${progs[@]}"; do
	if [ ! -x "$prog" ]; then
		fail "$prog is not built"
		summary
		exit
	fi
done

# suite WHAT VAR=VALUE...: each program under those settings
suite() {
	local what=$1 prog name log rc
	shift
	for prog in "${progs[@]}"; do
		name=${prog##*/}
		rc=0
		log=$SIB_TMP/mbox.$((SIB_PASSES + SIB_FAILS)).log
		sib_run 120 env "$@" "$prog" >"$log" 2>&1 || rc=$?
		if [ "$rc" -eq 0 ]; then
			pass "$name, $what: $(grep -E '^ +asserts' "$log" | awk '{print $3}') asserts"
		else
			fail "$name, $what (exit $rc)"
			# which tests and asserts failed (CUnit lists them under
			# each FAILED test), then the summary
			grep -A12 'FAILED' "$log" | head -n 80
			tail -n 8 "$log"
		fi
	done
}

suite "mailbox on" SOFTIB_MBOX=1 SOFTIB_MBOX_STALL_US=2000
suite "every stalled message retracted" SOFTIB_MBOX=1 SOFTIB_MBOX_STALL_US=0
suite "mailbox at its largest (4,072 B)" SOFTIB_MBOX=1 SOFTIB_MBOX_MAX=4072
suite "mailbox off" SOFTIB_NO_MBOX=1

if command -v ibv_rc_pingpong >/dev/null; then
	for opt in "" "-e"; do
		for stall in 2000 0; do
			port=$(free_port)
			if run_pair "mbox_rc_pingpong${opt}_$stall" 60 \
				env SOFTIB_MBOX=1 SOFTIB_MBOX_STALL_US=$stall ibv_rc_pingpong -d softib0 -p "$port" \
				-s 100 -n 2000 -c $opt -- \
				env SOFTIB_MBOX=1 SOFTIB_MBOX_STALL_US=$stall ibv_rc_pingpong -d softib0 -p "$port" \
				-s 100 -n 2000 -c $opt 127.0.0.1; then
				pass "ibv_rc_pingpong -s 100 -c $opt, SOFTIB_MBOX_STALL_US=$stall"
			else
				fail "ibv_rc_pingpong -s 100 -c $opt, SOFTIB_MBOX_STALL_US=$stall"
			fi
		done
	done
fi
summary
